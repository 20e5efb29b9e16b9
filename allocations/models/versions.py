"""Driver and CUDA versions: the format a flavor's minimums take, and whether what a node reported
meets them. Pure: no Django, no I/O.

A version is dot-separated decimal integers compared part by part, missing parts counting as 0
(``535`` < ``535.104.05`` < ``550.54.15``; ``12`` = ``12.0`` < ``12.2``; ``05`` is 5). The node
agent reports the NVIDIA driver as NVML prints it (``535.104.05``) and the highest CUDA driver
API version it supports as major.minor (``12.2``). A reported value that is empty or not of this
form is unknown: it meets no minimum.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Protocol

DRIVER_VERSION_PATTERN = re.compile(r"^[0-9]{1,5}(\.[0-9]{1,5}){0,3}$")
"""A minimum driver version: ``535``, ``535.104`` or ``535.104.05``."""
CUDA_VERSION_PATTERN = re.compile(r"^[0-9]{1,3}(\.[0-9]{1,3})?$")
"""A minimum CUDA version: ``12`` or ``12.2``."""
DRIVER_VERSION_HELP = "dot-separated integers such as 535.104.05"
CUDA_VERSION_HELP = "major.minor such as 12.2"

Version = tuple[int, ...]


class ReportsVersions(Protocol):
    """A node as the inventory keeps what its agent last reported (``clusters.Node``)."""

    name: str
    driver_version: str
    cuda_version: str


def version_parse(text: str | None) -> Version | None:
    """``"535.104.05"`` → ``(535, 104, 5)``; None for an empty or malformed version."""
    value = (text or "").strip()
    if not value or not re.fullmatch(r"[0-9]+(\.[0-9]+)*", value):
        return None
    return tuple(int(part) for part in value.split("."))


def version_at_least(reported: str | None, minimum: str | None) -> bool:
    """Whether ``reported`` is ``minimum`` or newer. No minimum: always; a minimum but an unknown
    (empty or malformed) reported version: never. A malformed minimum is refused before it is
    stored (``minimum_errors``); here it is treated like an unknown report, never met."""
    if not (minimum or "").strip():
        return True
    have, need = version_parse(reported), version_parse(minimum)
    if have is None or need is None:
        return False
    width = max(len(have), len(need))
    return have + (0,) * (width - len(have)) >= need + (0,) * (width - len(need))


def minimum_errors(*, min_driver_version: str, min_cuda_version: str) -> dict[str, str]:
    """Field name → why the minimum is not a version (empty: both are fine or unset)."""
    errors: dict[str, str] = {}
    if min_driver_version and not DRIVER_VERSION_PATTERN.match(min_driver_version):
        errors["min_driver_version"] = f"A driver version is {DRIVER_VERSION_HELP}."
    if min_cuda_version and not CUDA_VERSION_PATTERN.match(min_cuda_version):
        errors["min_cuda_version"] = f"A CUDA version is {CUDA_VERSION_HELP}."
    return errors


@dataclass(frozen=True)
class Minimums:
    """A flavor's driver and CUDA minimums (empty: none)."""

    driver: str = ""
    cuda: str = ""

    def __bool__(self) -> bool:
        return bool(self.driver or self.cuda)

    def met_by(self, *, driver_version: str | None, cuda_version: str | None) -> bool:
        return version_at_least(driver_version, self.driver) and version_at_least(cuda_version, self.cuda)

    def met_by_node(self, node: ReportsVersions) -> bool:
        return self.met_by(driver_version=node.driver_version, cuda_version=node.cuda_version)

    def describe(self) -> str:
        """``driver ≥ 535.104.05 and CUDA ≥ 12.2``."""
        parts = [f"driver ≥ {self.driver}" if self.driver else "", f"CUDA ≥ {self.cuda}" if self.cuda else ""]
        return " and ".join(part for part in parts if part)

    def reported(self, node: ReportsVersions) -> str:
        """``a100-0: driver 470.57.02, CUDA unknown``: what one node reports, of the minimums set."""
        parts = []
        if self.driver:
            parts.append(f"driver {node.driver_version or 'unknown'}")
        if self.cuda:
            parts.append(f"CUDA {node.cuda_version or 'unknown'}")
        return f"{node.name}: {', '.join(parts)}"
