"""The portal's idle evaluation beside a replay of the twin's log (``tests/twin/fidelity/portal.py``).

A grant the portal starts becomes active (``allocation_provision_succeeded``: the push landed, as
delivery reports it) with its utilisation written for every 5-minute bucket of its run, its line's
``busy`` as the activity (``AllocationUsage``: what telemetry would have read). The evaluation
(``idle_cases_evaluate``, what beat runs every 5 minutes) runs at every tick of the replay while a
grant is active; the grants it warns and reclaims at each tick are compared with the twin's
``idle-warn`` and ``idle-act`` at that tick. An ``idle-end`` runs the timeline task, which finishes
the reclaim once its notice ran out.
"""

from __future__ import annotations

import datetime
from collections import defaultdict
from decimal import Decimal

from accounting.idle.evaluation import idle_cases_evaluate
from accounting.idle_models import IdleCase, IdleState
from allocations.grants.services import allocation_provision_succeeded
from kernel.clock import clock_set
from telemetry.models import AllocationUsage, UsageSource
from tests.twin.fidelity.world import PortalWorld
from twin.replay.decisions import END, IDLE_ACT, IDLE_WARN, SUBMIT, Decision
from twin.workload import GPU_MILLI, Job

TICK = 300.0


class IdleTicks:
    """The evaluation's ticks between the log's decisions, and what each did against the twin."""

    def __init__(self, world: PortalWorld, epoch: datetime.datetime, log: list[Decision], pieces: dict[int, int]) -> None:
        self.world, self.epoch = world, epoch
        self.pieces = pieces  # allocation id -> piece (the replay's own, filled as it goes)
        self.expected: dict[float, set[tuple[str, int]]] = defaultdict(set)
        for decision in log:
            if decision.kind in (IDLE_WARN, IDLE_ACT):
                self.expected[decision.at].add((decision.kind, decision.piece))
        self.active: dict[int, int] = {}  # allocation id -> piece, while active
        self.next_tick = 0.0
        self.started: set[int] = set()

    def activate(self, allocation_id: int, piece: int, job: Job, quantity: int, at: float) -> None:
        """The grant starts on its cluster now, its readings written for its whole run (once: a
        reclaim whose victims leave at once is also the twin's ``begin``)."""
        if allocation_id in self.started:
            return
        self.started.add(allocation_id)
        allocation_provision_succeeded(allocation_id=allocation_id)
        self.active[allocation_id] = piece
        world = self.world
        granted = float(Decimal(job.shape.gpu_milli) / GPU_MILLI) * quantity
        first, end = -(-at // TICK) * TICK, at + job.runtime_s
        rows = [AllocationUsage(
            allocation_id=allocation_id, cluster=world.cluster, department=world.departments[job.department],
            bucket_start=self.epoch + datetime.timedelta(seconds=bucket), source=UsageSource.AGENT,
            devices=quantity, coverage=1.0, activity=job.busy, granted_gpu_eq=granted, used_gpu_eq=job.busy * granted,
        ) for bucket in _range(first, end)]  # fmt: skip
        AllocationUsage.objects.bulk_create(rows, batch_size=1000)

    def stop(self, allocation_id: int) -> None:
        self.active.pop(allocation_id, None)

    def until(self, decision: Decision) -> list[str]:
        """Every tick due before ``decision`` (its instant too, unless the decision is a run's end
        or a request made, which come first): evaluated, and compared. Returns the differences."""
        differences: list[str] = []
        while self.next_tick < decision.at or (self.next_tick == decision.at and decision.kind not in (SUBMIT, END)):
            at = self.next_tick
            self.next_tick += TICK
            if not self.active and not self.expected.get(at):
                continue
            moment = self.epoch + datetime.timedelta(seconds=at)
            clock_set(moment)
            idle_cases_evaluate(now=moment)
            found = self._moves(moment)
            if found != self.expected.get(at, set()):
                differences.append(f"t={at:.0f}s idle evaluation: the portal {_words(found)}, "
                                   f"the twin {_words(self.expected.get(at, set()))}")
        clock_set(self.epoch + datetime.timedelta(seconds=decision.at))
        return differences

    def _moves(self, moment: datetime.datetime) -> set[tuple[str, int]]:
        pieces = self.pieces
        warned = IdleCase.objects.filter(warned_at=moment).values_list("allocation_id", flat=True)
        acted = IdleCase.objects.filter(state=IdleState.RECLAIMED, closed_at=moment).values_list("allocation_id", flat=True)
        moves = {(IDLE_WARN, pieces[pk]) for pk in warned} | {(IDLE_ACT, pieces[pk]) for pk in acted}
        for _, piece in moves:
            if (IDLE_ACT, piece) in moves:
                self.active = {pk: p for pk, p in self.active.items() if p != piece}
        return moves


def _range(first: float, end: float) -> list[float]:
    out, at = [], first
    while at < end:
        out.append(at)
        at += TICK
    return out


def _words(moves: set[tuple[str, int]]) -> str:
    return ", ".join(f"{kind} request {piece}" for kind, piece in sorted(moves, key=lambda m: (m[1], m[0]))) or "nothing"
