"""One seed's run: a fresh world on an emptied database, the clock set to the epoch, the actions
run one step at a time, every invariant checked after every step, the HTTP probes now and then, the
audit log verified at the end. The first step that breaks an invariant ends the run."""

from __future__ import annotations

import datetime
import importlib
import random
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

from django.db import connection

from audit.models import AuditEvent
from kernel.clock import clock_now, clock_reset, clock_set
from tests.simulation import executor
from tests.simulation.actions import Action, actions_generate
from tests.simulation.audit_chain import audit_chain_verify
from tests.simulation.context import Context, StepNotes
from tests.simulation.executor_more import push_sweep
from tests.simulation.faults import Faults
from tests.simulation.invariants_capacity import capacity, inventory_moves
from tests.simulation.invariants_quota import admissions, reclaims, shrink_obligations, shrinks_met
from tests.simulation.invariants_time import audit_events, audit_once, previews, timeline, why_agrees, window_edges
from tests.simulation.ledger import Snapshot, snapshot_read
from tests.simulation.probes import probes
from tests.simulation.world import EPOCH, database_flush, world_build

PARTS_OF = {"quota_edit": {"catalog"}, "class_edit": {"catalog"}, "window_create": {"windows"},
            "window_decide": {"windows"}, "window_cancel": {"windows"}, "inventory": {"nodes"}, "clock": {"edges"},
            "tick": {"edges"}, "idle_evaluate": {"idle"}}
"""What else than the grants and their bookings an action may change (re-read after it)."""
FAULT_COUNTS = {"push": (1, 3, 8, 9), "kill": (1, 1, 2, 3), "deadlock": (1, 1, 1, 2)}
"""Which audit event of the action a kill or a deadlock hits (most actions write one or two in a
transaction), and how many applies a push fault fails: once, a few times, as many as a push tries
(8) or more."""


@dataclass
class Failure:
    seed: int
    step: int
    action: Action
    found: list[tuple[str, str]]

    @property
    def invariant(self) -> str:
        return self.found[0][0]


@dataclass
class RunResult:
    seed: int
    steps: int
    failure: Failure | None
    context: Context
    step_seconds: list[float] = field(default_factory=list)
    kind_seconds: dict[str, float] = field(default_factory=dict)


def _join_flag() -> tuple[object, bool]:
    state = importlib.import_module("celery._state")
    return state, state.task_join_will_block()


def _concurrently(ctx: Context, subs: tuple[Action, ...]) -> list[str]:
    """The actions on threads released together, in one virtual second."""
    barrier = threading.Barrier(len(subs))
    outcomes = ["error"] * len(subs)
    state, flag = _join_flag()

    def run(index: int, action: Action) -> None:
        try:
            barrier.wait(timeout=30)
            if action.kind == "approve":
                outcomes[index] = executor.approve(ctx, action.numbers, preview=False)
            else:
                outcomes[index] = executor.run_plain(ctx, action)
        except Exception as error:  # noqa: BLE001 - recorded as an escaped exception
            ctx.notes.escaped.append(f"{action.kind} on a thread: {error!r}")
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=(index, sub)) for index, sub in enumerate(subs)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    state._set_task_join_will_block(flag)  # type: ignore[attr-defined]
    if any(thread.is_alive() for thread in threads):
        ctx.notes.escaped.append("a concurrent action did not finish within 120 s (a deadlock that never ends?)")
    return outcomes


def faulted(action: Action) -> Action:
    """The action a fault runs under: its own, but a tick for a deadlock on defragmentation (one plain
    transaction: no retry to exercise)."""
    sub = action.subs[0]
    return Action("tick", sub.numbers) if action.fault == "deadlock" and sub.kind == "defrag" else sub


def _parts(action: Action) -> frozenset[str]:
    """What the step may have changed besides the grants, from the actions it really ran."""
    ran = (faulted(action),) if action.kind == "fault" else (action, *action.subs)
    return frozenset(part for one in ran for part in PARTS_OF.get(one.kind, ()))


def execute(ctx: Context, action: Action) -> str:
    if action.kind == "concurrent":
        ctx.notes.concurrent = True
        outcomes = _concurrently(ctx, action.subs)
        for sub, outcome in zip(action.subs, outcomes, strict=True):
            ctx.outcome_counts[f"{sub.kind}:{outcome}"] += 1
        return ",".join(outcomes)
    if action.kind == "fault":
        sub = faulted(action)
        k = int(action.numbers[0])
        with ctx.faults.armed(action.fault, FAULT_COUNTS[action.fault][k - 1]):
            outcome = executor.run_plain(ctx, sub)
            if action.fault == "push":
                push_sweep(ctx)
        ctx.outcome_counts[f"{sub.kind}:{outcome}"] += 1
        return outcome
    outcome = executor.run_plain(ctx, action)
    ctx.outcome_counts[f"{action.kind}:{outcome}"] += 1
    return outcome


def check(ctx: Context, prev: Snapshot, snap: Snapshot, started: datetime.datetime) -> list[tuple[str, str]]:
    notes = ctx.notes
    found = [("escaped-exception", text) for text in notes.escaped]
    for window_id, at, in_force in notes.cancelled:
        ctx.cancelled_at[window_id] = (at, in_force)
    inventory_moves(ctx, prev, snap)
    found += capacity(ctx, snap)
    reclaiming = audit_events(ctx)
    now = snap.at
    found += admissions(prev, snap, now, notes.admitted)
    if not notes.concurrent:
        found += reclaims(prev, snap, started, reclaiming)
    found += audit_once(ctx, prev, snap)
    found += previews(ctx, snap, reclaiming)
    found += why_agrees(ctx)
    found += window_edges(ctx, prev, snap)
    shrink_obligations(prev, snap, notes.ticks, ctx.obligations)
    ctx.checks.update(["escaped-exception", "capacity", "booking", "admission", "audit-once", "window-edge"])
    if notes.previews:
        ctx.checks["preview-approve"] += len(notes.previews)
    if notes.reasons:
        ctx.checks["why-approve"] += len(notes.reasons)
    if notes.ticks and not notes.concurrent:
        tick = max(notes.ticks)
        found += timeline(snap, tick)
        found += shrinks_met(snap, tick, ctx.obligations)
        ctx.checks.update(["timeline", "shrink-reclaim-met"])
    return found


def run_seed(seed: int, steps: int, *, keep: Iterable[int] | None = None, probe_every: int = 50,
             verify_audit: bool = True, faults: Faults, ignore: frozenset[str] = frozenset()) -> RunResult:
    actions = actions_generate(seed, steps)
    chosen = sorted(set(keep)) if keep is not None else list(range(steps))
    random.seed(seed)  # the services' own jitter (push backoff, deadlock retries) draws from the global generator
    database_flush()
    clock_set(EPOCH)
    try:
        world = world_build()
        ctx = Context(world=world, faults=faults, snapshot=snapshot_read(clock_now()))
        ctx.audit_seq = AuditEvent.objects.order_by("-seq").values_list("seq", flat=True).first() or 0
        result = RunResult(seed=seed, steps=0, failure=None, context=ctx)
        for index in chosen:
            action = actions[index]
            began = time.perf_counter()
            ctx.step, ctx.notes = index, StepNotes()
            started = clock_now()
            ctx.action_counts[action.kind] += 1
            execute(ctx, action)
            snap = snapshot_read(clock_now(), previous=ctx.snapshot, parts=_parts(action))
            found = check(ctx, ctx.snapshot, snap, started)
            if probe_every and (len(result.step_seconds) + 1) % probe_every == 0:
                found += probes(ctx, snap, clock_now())
                ctx.checks["displayed-in-use"] += 1
            found = [item for item in found if item[0] not in ignore]
            ctx.snapshot = snap
            result.steps += 1
            result.step_seconds.append(time.perf_counter() - began)
            result.kind_seconds[action.kind] = result.kind_seconds.get(action.kind, 0.0) + result.step_seconds[-1]
            if found:
                result.failure = Failure(seed, index, action, found)
                return result
        ending = probes(ctx, ctx.snapshot, clock_now()) if probe_every else []
        if verify_audit:
            try:
                audit_chain_verify()
                ctx.checks["audit-verifies"] += 1
            except Exception as error:  # noqa: BLE001 - the verifier names the defect
                ending.append(("audit-verifies", f"{error!r}"))
        ending = [item for item in ending if item[0] not in ignore]
        if ending:
            result.failure = Failure(seed, chosen[-1] if chosen else 0, actions[chosen[-1]] if chosen else Action("none"),
                                     ending)
        return result
    finally:
        clock_reset()
