"""Typical task classes ("M" in the FGD paper) and their popularity.

Definition from ``../shared/reference/placement-benchmark.md`` §3: distinct
(cpu_milli, gpu_milli, num_gpu, gpu_spec) tuples of a task list, most popular first, kept until
they cover at least 95 % of tasks; popularity renormalised to sum 1; CPU-only classes included.
The Django side can build the same from recent requests (:meth:`Workload.from_requests`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

from .decisions import Request, RequestKind
from .mig import mig_compute


@dataclass(frozen=True)
class TaskClass:
    cpu_milli: int
    gpu_milli: int
    gpu_count: int
    allowed_models: frozenset[str] = frozenset()
    mig_profile: str | None = None
    weight: float = 1.0
    memory_mib: int = 0
    """Mean memory of the class's requests (not part of the class key, as in the paper)."""

    @property
    def kind(self) -> RequestKind:
        return self.as_request().kind

    @property
    def gpu_demand(self) -> float:
        """GPU demand per pod in milli (a MIG instance counts its compute slices x 1000 / 7)."""
        if not self.gpu_count:
            return 0.0
        if self.mig_profile is not None:
            return self.gpu_count * mig_compute(self.mig_profile) * 1000 / 7
        return float(self.gpu_count * self.gpu_milli)

    def as_request(self) -> Request:
        return Request(self.cpu_milli, 0, self.gpu_count, self.gpu_milli or 1000, self.mig_profile,
                       self.allowed_models)


def _class_key(r: Request) -> tuple[int, int, int, frozenset[str], str | None]:
    return (r.cpu_milli, r.gpu_milli, r.gpu_count, r.allowed_models, r.mig_profile)


UnitKey = tuple[int, int, str, str | None, int]
"""A one-GPU unit shape as the portal's catalogue counts it: (cpu milli, gpu milli, model, MIG profile, memory MiB)."""


@dataclass(frozen=True)
class Workload:
    """A weighted set of typical task classes (weights sum to 1)."""

    classes: tuple[TaskClass, ...]

    @classmethod
    def from_requests(cls, requests: Iterable[Request], coverage: float = 0.95) -> Workload:
        counts: dict[tuple[int, int, int, frozenset[str], str | None], int] = {}
        memory: dict[tuple[int, int, int, frozenset[str], str | None], int] = {}
        for r in requests:
            key = _class_key(r)
            counts[key] = counts.get(key, 0) + 1
            memory[key] = memory.get(key, 0) + r.memory_mib
        total = sum(counts.values())
        if total == 0:
            return cls(())
        # most popular first; equal counts keep first-seen order (dicts keep insertion order)
        ordered = sorted(counts.items(), key=lambda kv: -kv[1])
        kept: list[tuple[tuple[int, int, int, frozenset[str], str | None], int]] = []
        covered = 0
        for key, n in ordered:
            kept.append((key, n))
            covered += n
            if covered >= coverage * total:
                break
        return cls(
            tuple(
                TaskClass(cpu, milli, k, models, mig, n / covered, memory[(cpu, milli, k, models, mig)] // n)
                for (cpu, milli, k, models, mig), n in kept
            )
        )

    @classmethod
    def from_unit_weights(cls, weights: Mapping[UnitKey, float]) -> Workload:
        """One-GPU unit shapes, keyed (cpu milli, gpu milli, model, MIG profile, memory MiB), with how
        many units of each are asked: most popular first, ties in a fixed order (the key's text), so
        that every caller with the same counts gets the same workload. The portal's booking
        (``allocations.booking.reservations.placement_workload``) and the twin's fidelity replay
        (``twin.replay.decisions``) both build theirs here."""
        total = sum(weights.values()) or 1.0
        ordered = sorted(weights.items(), key=lambda item: (-item[1], repr(item[0])))
        return cls(tuple(TaskClass(cpu, milli, 1, frozenset({model}), profile, weight / total, memory)
                         for (cpu, milli, model, profile, memory), weight in ordered))

    def top(self, coverage: float) -> Workload:
        """The most popular classes covering ``coverage`` of the weight, renormalised."""
        if coverage >= 1.0 or not self.classes:
            return self
        total = sum(c.weight for c in self.classes)
        kept: list[TaskClass] = []
        covered = 0.0
        for c in sorted(self.classes, key=lambda c: -c.weight):
            kept.append(c)
            covered += c.weight
            if covered >= coverage * total - 1e-12:
                break
        return Workload(tuple(replace(c, weight=c.weight / covered) for c in kept))

    def __len__(self) -> int:
        return len(self.classes)
