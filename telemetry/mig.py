"""Planned against actual MIG layout of one node: pure functions, no Django.

The plan is a list of mig-parted config entries (gpu-sharing-formats.md §2), the form both the
``nvidia.com/mig.config`` label's well-known configs and the portal's own renderer produce::

    [{"devices": [0, 1], "mig-enabled": True, "mig-devices": {"3g.40gb": 1, "2g.20gb": 2}},
     {"devices": "all", "mig-enabled": False}]

``planned_per_gpu`` turns entries into what each GPU index should have; ``mig_layout_compare``
compares that with what the agent reported, so the plan can come from the label, from the
renderer, or from a test, and the comparison does not care which.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from clusters.mig_layout import layout_entries
from placement.mig import geometry_for_model

MIG_CONFIG_LABEL = "nvidia.com/mig.config"
MIG_CONFIG_STATE_LABEL = "nvidia.com/mig.config.state"
ALL_DISABLED = "all-disabled"
ALL_ENABLED = "all-enabled"
_ALL_PROFILE = re.compile(r"^all-(?P<profile>([1-8]c\.)?[1-8]g\.[0-9]{1,4}gb(\+me)?)$")
APPLYING_STATES = frozenset({"pending", "rebooting"})


@dataclass(frozen=True)
class PlannedGpu:
    """What the plan wants on one GPU; ``profiles`` empty with MIG on means nothing carved."""

    mig_enabled: bool
    profiles: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class ObservedGpuMig:
    """What the agent reported for one GPU. ``mig_capable`` None: the MIG mode query failed."""

    index: int
    mig_capable: bool | None
    current: str | None = None  # "enabled" | "disabled"
    pending: str | None = None
    profiles: tuple[str | None, ...] = ()  # one per MIG device; None where the profile was not read


@dataclass(frozen=True)
class MigProblem:
    index: int
    kind: str  # mig_mode | profiles | not_mig_capable | missing_gpu | mig_manager_failed
    expected: Any = None
    actual: Any = None

    def as_dict(self) -> dict[str, Any]:
        return {"gpu_index": self.index, "kind": self.kind, "expected": self.expected, "actual": self.actual}


@dataclass(frozen=True)
class MigComparison:
    plan: str  # compared | unknown | applying
    problems: tuple[MigProblem, ...] = ()
    reset_pending: tuple[int, ...] = ()  # GPU indexes whose MIG mode change waits for a GPU reset
    unverifiable: tuple[int, ...] = ()  # GPU indexes whose MIG state the report did not tell

    @property
    def mismatch(self) -> bool:
        return bool(self.problems)

    def as_detail(self) -> dict[str, Any]:
        return {
            "plan": self.plan,
            "problems": [problem.as_dict() for problem in self.problems],
            "reset_pending": list(self.reset_pending),
            "unverifiable": list(self.unverifiable),
        }


def entries_from_label(config: str, *, gpu_model: str, memory_mib: int = 0) -> list[dict[str, Any]] | None:
    """The entries of a well-known mig-parted config name, or None when the name alone does not
    say (a custom config, or one of the portal's ``gpuportal-<hash>`` layouts)."""
    if config == ALL_DISABLED:
        return [{"devices": "all", "mig-enabled": False}]
    if config == ALL_ENABLED:
        return [{"devices": "all", "mig-enabled": True, "mig-devices": {}}]
    match = _ALL_PROFILE.match(config)
    if match is None:
        return None
    geometry = geometry_for_model(gpu_model, memory_mib)
    if geometry is None or match["profile"] not in geometry.by_name:
        return None
    profile = geometry.profile(match["profile"])
    return [{"devices": "all", "mig-enabled": True, "mig-devices": {profile.name: profile.max_count}}]


def planned_per_gpu(entries: Iterable[Mapping[str, Any]], gpu_indexes: Iterable[int]) -> dict[int, PlannedGpu]:
    """What each GPU should have. An entry with a ``device-filter`` is skipped (the report carries no
    PCI device id to match it); a later entry naming a GPU again wins. GPUs no entry names are
    absent from the result: the plan says nothing about them."""
    indexes = sorted(set(gpu_indexes))
    planned: dict[int, PlannedGpu] = {}
    for entry in layout_entries(entries, indexes):
        if entry.device_filter:
            continue
        wanted = PlannedGpu(
            mig_enabled=entry.mig_enabled, profiles={name: count for name, count in entry.profiles.items() if count > 0}
        )
        for index in entry.devices:
            planned[index] = wanted
    return planned


def mig_layout_compare(
    *, planned: Mapping[int, PlannedGpu] | None, observed: Sequence[ObservedGpuMig], config_state: str = ""
) -> MigComparison:
    """Compare the plan (None: unknown) with the reported GPUs.

    While the MIG manager is applying a change (``config_state`` pending or rebooting) nothing is a
    mismatch yet; ``failed`` is one by itself. A GPU whose MIG mode query failed, or a MIG device
    whose profile was not read, cannot be checked and is listed as unverifiable, not as a mismatch.
    """
    reset_pending = tuple(
        gpu.index for gpu in observed if gpu.current is not None and gpu.pending is not None and gpu.current != gpu.pending
    )
    if config_state in APPLYING_STATES:
        return MigComparison(plan="applying", reset_pending=reset_pending)
    if planned is None:
        return MigComparison(plan="unknown", reset_pending=reset_pending)
    problems: list[MigProblem] = []
    unverifiable: list[int] = []
    if config_state == "failed":
        problems.append(MigProblem(index=-1, kind="mig_manager_failed", expected="success", actual="failed"))
    by_index = {gpu.index: gpu for gpu in observed}
    for index, wanted in sorted(planned.items()):
        gpu = by_index.get(index)
        if gpu is None:
            problems.append(MigProblem(index=index, kind="missing_gpu", expected=_plan_text(wanted), actual=None))
            continue
        problem = _compare_gpu(wanted, gpu)
        if isinstance(problem, MigProblem):
            problems.append(problem)
        elif problem == "unverifiable":
            unverifiable.append(index)
    return MigComparison(
        plan="compared", problems=tuple(problems), reset_pending=reset_pending, unverifiable=tuple(unverifiable)
    )


def _compare_gpu(wanted: PlannedGpu, gpu: ObservedGpuMig) -> MigProblem | str | None:
    if gpu.mig_capable is None:
        return "unverifiable"
    if not gpu.mig_capable:
        if wanted.mig_enabled:
            return MigProblem(index=gpu.index, kind="not_mig_capable", expected="enabled", actual=None)
        return None
    actual_mode = gpu.current == "enabled"
    if actual_mode != wanted.mig_enabled:
        return MigProblem(index=gpu.index, kind="mig_mode", expected=_mode(wanted.mig_enabled), actual=gpu.current)
    if not wanted.mig_enabled:
        return None
    if any(profile is None for profile in gpu.profiles):
        return "unverifiable"
    actual = dict(sorted(Counter(str(profile) for profile in gpu.profiles).items()))
    expected = dict(sorted(wanted.profiles.items()))
    if actual != expected:
        return MigProblem(index=gpu.index, kind="profiles", expected=expected, actual=actual)
    return None


def _mode(enabled: bool) -> str:
    return "enabled" if enabled else "disabled"


def _plan_text(wanted: PlannedGpu) -> dict[str, Any]:
    return {"mig": _mode(wanted.mig_enabled), "profiles": dict(sorted(wanted.profiles.items()))}
