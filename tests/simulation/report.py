"""What a run prints: each failure (seed, step, action, invariant, the shrunk sequence and the
command that replays it), and the summary of all seeds: steps, actions of each kind and how they
ended, faults injected, what the services did (from the audit log), invariant checks, violations,
time per step."""

from __future__ import annotations

import json
import statistics
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from tests.simulation.actions import actions_generate
from tests.simulation.runner import Failure, RunResult

EVENTS = ("allocation.approved", "allocation.admission_denied", "allocation.reclaiming", "allocation.reclaimed",
          "allocation.started", "allocation.expired", "allocation.released", "allocation.renewed",
          "allocation.resized", "allocation.moved", "quota_window.edge", "quota_window.shrink_warned",
          "idle_case.reclaimed", "allocation.failed")


@dataclass
class Summary:
    seeds: int = 0
    steps: int = 0
    actions: Counter[str] = field(default_factory=Counter)
    outcomes: Counter[str] = field(default_factory=Counter)
    faults: Counter[str] = field(default_factory=Counter)
    events: Counter[str] = field(default_factory=Counter)
    checks: Counter[str] = field(default_factory=Counter)
    failures: list[Failure] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)
    step_seconds: list[float] = field(default_factory=list)
    kind_seconds: Counter[str] = field(default_factory=Counter)
    planned_seeds: int = 0
    http_requests: int = 0
    database_deadlocks: int = 0
    wall_seconds: float = 0.0
    jobs: int = 1

    _COUNTERS = ("actions", "outcomes", "faults", "events", "checks", "kind_seconds")
    _NUMBERS = ("seeds", "steps", "planned_seeds", "http_requests", "database_deadlocks", "wall_seconds")

    def add(self, result: RunResult) -> None:
        ctx = result.context
        self.seeds += 1
        self.steps += result.steps
        self.actions.update(ctx.action_counts)
        self.outcomes.update(ctx.outcome_counts)
        self.faults.update(ctx.faults.injected)
        ctx.faults.injected = dict.fromkeys(ctx.faults.injected, 0)
        for (action, _), count in ctx.audit_counts.items():
            if action in EVENTS:
                self.events[action] += count
        self.checks.update(ctx.checks)
        self.step_seconds += result.step_seconds
        self.kind_seconds.update(result.kind_seconds)
        if result.failure is not None:
            self.failures.append(result.failure)
            self.violations.append(f"seed {result.failure.seed} step {result.failure.step} "
                                   f"{result.failure.invariant}: {result.failure.found[0][1][:300]}")

    def to_json(self) -> str:
        """What another process needs to merge this run into its own (``--jobs``)."""
        data: dict[str, Any] = {name: dict(getattr(self, name)) for name in self._COUNTERS}
        data |= {name: getattr(self, name) for name in self._NUMBERS}
        return json.dumps(data | {"violations": self.violations, "step_seconds": self.step_seconds})

    def merge_json(self, text: str) -> None:
        """Add a run another process wrote with :meth:`to_json`; the wall time is the longest."""
        data = json.loads(text)
        for name in self._COUNTERS:
            getattr(self, name).update(data[name])
        for name in ("seeds", "steps", "planned_seeds", "http_requests", "database_deadlocks"):
            setattr(self, name, getattr(self, name) + data[name])
        self.wall_seconds = max(self.wall_seconds, data["wall_seconds"])
        self.violations += data["violations"]
        self.step_seconds += data["step_seconds"]

    def text(self) -> str:
        seconds = sorted(self.step_seconds) or [0.0]
        p95 = seconds[min(len(seconds) - 1, int(len(seconds) * 0.95))]
        stopped = (f" (the time budget ran out after {self.seeds} of {self.planned_seeds} seeds)"
                   if self.planned_seeds > self.seeds else "")
        lines = [
            f"simulation: {self.seeds} seeds, {self.steps} steps, {len(self.violations)} violations{stopped}",
            f"  wall time {self.wall_seconds / 60:.1f} min in {self.jobs} process(es); PostgreSQL deadlocks detected "
            f"(pg_stat_database) {self.database_deadlocks}; HTTP probe requests {self.http_requests}, "
            f"http-5xx violations {self.checks_failed('http-5xx')}",
            f"  time per step: mean {statistics.fmean(seconds) * 1000:.1f} ms, median "
            f"{statistics.median(seconds) * 1000:.1f} ms, p95 {p95 * 1000:.1f} ms, total {sum(seconds):.1f} s",
            "  actions: " + _counts(self.actions),
            "  mean ms per action kind (its step, checks included): " + ", ".join(
                f"{kind} {self.kind_seconds[kind] / count * 1000:.0f}" for kind, count in sorted(self.actions.items())),
            "  outcomes: " + _counts(self.outcomes),
            "  faults injected: " + _counts(self.faults),
            "  what the services did: " + _counts(self.events),
            "  invariant checks: " + _counts(self.checks),
        ]
        lines += [f"  VIOLATION {violation}" for violation in self.violations]
        return "\n".join(lines)

    def checks_failed(self, invariant: str) -> int:
        return sum(violation.split(" ", 4)[4].startswith(invariant + ":") for violation in self.violations)


def _counts(counter: Counter[str]) -> str:
    return ", ".join(f"{key} {value}" for key, value in sorted(counter.items())) or "none"


def failure_text(failure: Failure, steps: int, shrunk: list[int] | None, mutation: str = "",
                 *, shrinking_tried: bool = False) -> str:
    actions = actions_generate(failure.seed, steps)
    lines = [
        f"FAILED seed {failure.seed} at step {failure.step}: {failure.action.describe()}",
        *(f"  violated {name}: {text}" for name, text in failure.found[:8]),
    ]
    if shrunk is not None:
        lines.append(f"  shrunk to {len(shrunk)} of {failure.step + 1} actions:")
        lines += [f"    [{index}] {actions[index].describe()}" for index in shrunk]
        lines.append("  replay: " + replay_command(failure.seed, max(shrunk) + 1 if shrunk else steps, shrunk, mutation))
    elif shrinking_tried:
        lines.append("  not shrunk: the run did not fail again when replayed (a race between concurrent actors?)")
    lines.append("  replay all: " + replay_command(failure.seed, failure.step + 1, None, mutation))
    return "\n".join(lines)


def replay_command(seed: int, steps: int, keep: list[int] | None, mutation: str = "") -> str:
    command = f"python -m tests.simulation --seed {seed} --steps {steps}"
    if keep is not None:
        command += " --only " + ",".join(map(str, keep))
    if mutation:
        command += f" --mutation {mutation}"
    return command
