"""The MIG layout format, read in one place: mig-parted's config entries (gpu-sharing-formats.md §2),
as an administrator pins them on a node (``Node.mig_layout``) and as the NVIDIA MIG manager
applies them::

    [{"devices": [0, 1], "mig-enabled": True, "mig-devices": {"3g.40gb": 1, "2g.20gb": 2}},
     {"devices": "all", "mig-enabled": False}]

``devices`` is ``"all"`` (the default) or GPU indexes; ``mig-devices`` maps a profile to how many
instances of it each of those GPUs has. A pinned layout carries ``devices`` and ``mig-devices``
only (``is_pinned_layout``). The placement engine, the node configuration renderer, the planned
against observed comparison and the pages read entries through ``layout_entries`` and
``entry_profiles``; reading the keys anywhere else fails ``tests/architecture/test_one_rule.py``.
Plain data: no Django.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

ALL = "all"
PINNED_KEYS = frozenset({"devices", "mig-devices"})


@dataclass(frozen=True)
class LayoutEntry:
    """One entry: the GPU indexes it names, whether MIG is on there, and the instances of each
    profile per GPU. An entry that picks GPUs by ``device-filter`` (a PCI device id, which neither a
    node's inventory nor a report carries) is marked and left unread."""

    devices: tuple[int, ...]
    mig_enabled: bool
    profiles: Mapping[str, int]
    device_filter: bool = False


def entry_profiles(entry: Mapping[str, Any]) -> dict[str, int]:
    """Instances of each profile per GPU of one entry, as written (a count may be 0)."""
    return {str(name): int(count) for name, count in (entry.get("mig-devices") or {}).items()}


def entry_devices(entry: Mapping[str, Any], gpu_indexes: Sequence[int]) -> tuple[int, ...]:
    """The GPU indexes one entry names; ``"all"`` (or no ``devices``) names ``gpu_indexes``."""
    devices = entry.get("devices", ALL)
    return tuple(gpu_indexes) if devices == ALL else tuple(int(device) for device in devices)


def layout_entries(entries: Iterable[Mapping[str, Any]], gpu_indexes: Sequence[int]) -> Iterator[LayoutEntry]:
    """The entries in order, each read when it is reached."""
    for entry in entries:
        if "device-filter" in entry:
            yield LayoutEntry((), bool(entry.get("mig-enabled")), {}, device_filter=True)  # skipped by every reader
        else:
            yield LayoutEntry(entry_devices(entry, gpu_indexes), bool(entry.get("mig-enabled")), entry_profiles(entry))


def is_pinned_layout(layout: object) -> bool:
    """Whether ``layout`` is a layout an administrator may pin: a list of entries with ``devices``
    (``"all"`` or indexes) and ``mig-devices`` (profile to a count) only."""
    if not isinstance(layout, list):
        return False
    for entry in layout:
        if not isinstance(entry, dict) or set(entry) - PINNED_KEYS:
            return False
        devices = entry.get("devices", ALL)
        if devices != ALL and not (isinstance(devices, list) and all(isinstance(d, int) and d >= 0 for d in devices)):
            return False
        profiles = entry.get("mig-devices", {})
        if not isinstance(profiles, dict) or not all(isinstance(c, int) and c >= 0 for c in profiles.values()):
            return False
    return True
