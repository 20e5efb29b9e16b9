"""What is asked (:class:`Request`) and what the engine answers (:class:`Placement`, :class:`Rejection`)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from .inventory import GPU_MILLI


class RequestKind(str, Enum):
    CPU_ONLY = "cpu-only"
    SHARED = "shared"  # one GPU, a share below 1000 milli
    WHOLE = "whole"  # one or more entire GPUs
    MIG = "mig"  # one MIG instance on each of gpu_count GPUs


@dataclass(frozen=True)
class Request:
    """A workload's ask.

    ``gpu_milli`` is the per-GPU share in thousandths (1000 = a whole GPU; shares below 1000
    only with ``gpu_count == 1``). ``mig_profile`` (e.g. ``"3g.40gb"``) asks for one MIG
    instance per GPU instead. ``allowed_models`` restricts GPU models; empty means any.
    """

    cpu_milli: int
    memory_mib: int
    gpu_count: int = 0
    gpu_milli: int = GPU_MILLI
    mig_profile: str | None = None
    allowed_models: frozenset[str] = frozenset()
    name: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "allowed_models", frozenset(self.allowed_models))
        if self.gpu_count == 0:
            object.__setattr__(self, "gpu_milli", 0)
            object.__setattr__(self, "mig_profile", None)
        elif self.mig_profile is not None:
            object.__setattr__(self, "gpu_milli", 0)

    def problem(self) -> str | None:
        """Why this request can never be placed anywhere, or None if it is well-formed."""
        if self.cpu_milli < 0 or self.memory_mib < 0 or self.gpu_count < 0:
            return "CPU, memory and GPU count must not be negative"
        if self.gpu_count and self.mig_profile is None:
            if not 1 <= self.gpu_milli <= GPU_MILLI:
                return f"a GPU share must be within 1..{GPU_MILLI} thousandths"
            if self.gpu_count > 1 and self.gpu_milli != GPU_MILLI:
                return "a share below a whole GPU is only possible for a single GPU"
        return None

    @property
    def kind(self) -> RequestKind:
        if self.gpu_count == 0:
            return RequestKind.CPU_ONLY
        if self.mig_profile is not None:
            return RequestKind.MIG
        return RequestKind.WHOLE if self.gpu_milli == GPU_MILLI else RequestKind.SHARED

    @property
    def gpu_milli_total(self) -> int:
        """Total GPU demand in milli (MIG requests are not measured in milli: 0)."""
        return self.gpu_count * self.gpu_milli

    def describe(self) -> str:
        models = "/".join(sorted(self.allowed_models)) or "any"
        base = f"{self.cpu_milli / 1000:g} cores, {self.memory_mib / 1024:g} GiB"
        k = self.kind
        if k is RequestKind.CPU_ONLY:
            return base
        if k is RequestKind.MIG:
            return f"{base}, {self.gpu_count} x MIG {self.mig_profile} ({models})"
        if k is RequestKind.SHARED:
            return f"{base}, {self.gpu_milli / 10:g}% of one GPU ({models})"
        return f"{base}, {self.gpu_count} whole GPU(s) ({models})"

    def to_record(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "cpu_milli": self.cpu_milli,
            "memory_mib": self.memory_mib,
            "gpu_count": self.gpu_count,
            "gpu_milli": self.gpu_milli,
            "mig_profile": self.mig_profile,
            "allowed_models": sorted(self.allowed_models),
        }

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> Request:
        models: Iterable[str] = record.get("allowed_models") or ()
        return cls(
            cpu_milli=int(record.get("cpu_milli", 0)),
            memory_mib=int(record.get("memory_mib", 0)),
            gpu_count=int(record.get("gpu_count", 0)),
            gpu_milli=int(record.get("gpu_milli", GPU_MILLI) or GPU_MILLI),
            mig_profile=record.get("mig_profile"),
            allowed_models=frozenset(models),
            name=str(record.get("name", "")),
        )


@dataclass(frozen=True)
class Placement:
    """Where a request goes: the node, the GPU indices and, for MIG, the start slot per GPU."""

    request: Request
    node: str
    gpu_indices: tuple[int, ...] = ()
    mig_starts: tuple[int, ...] = ()
    policy: str = field(default="", compare=False)

    @property
    def mig_start(self) -> int | None:
        """The start slot for a single-GPU MIG placement (None when not MIG)."""
        return self.mig_starts[0] if self.mig_starts else None

    def to_record(self) -> dict[str, Any]:
        """Plain data for a reservation row; :meth:`from_record` reads it back."""
        return {
            "request": self.request.to_record(),
            "node": self.node,
            "gpu_indices": list(self.gpu_indices),
            "mig_starts": list(self.mig_starts),
            "policy": self.policy,
        }

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> Placement:
        return cls(
            request=Request.from_record(record["request"]),
            node=str(record["node"]),
            gpu_indices=tuple(int(i) for i in record.get("gpu_indices") or ()),
            mig_starts=tuple(int(s) for s in record.get("mig_starts") or ()),
            policy=str(record.get("policy", "")),
        )


class RejectionKind(str, Enum):
    INVALID = "invalid-request"
    NO_SUCH_MODEL = "no-such-model"
    CPU_MEMORY = "cpu-or-memory"
    GPU_SHARE = "gpu-share"
    WHOLE_GPUS = "whole-gpus"
    MIG_SLICE = "mig-slice"

    @classmethod
    def for_request(cls, request: Request) -> RejectionKind:
        """The kind of room ``request`` lacks when nothing more precise is asked for."""
        kind = request.kind
        if kind is RequestKind.MIG:
            return cls.MIG_SLICE
        if kind is RequestKind.SHARED:
            return cls.GPU_SHARE
        if kind is RequestKind.WHOLE:
            return cls.WHOLE_GPUS
        return cls.CPU_MEMORY


@dataclass(frozen=True)
class Rejection:
    """Why a request could not be placed, in words a person understands."""

    request: Request
    kind: RejectionKind
    reason: str

    def __str__(self) -> str:
        return self.reason
