"""The action stream: a pure function of the seed and the number of steps (``actions_generate``).

An action is a kind and numbers drawn by a ``random.Random(seed)``; what it acts on is resolved when
it runs, from the world as it is then (``pick`` 0.37 among the pending requests ordered by id), so
that any subset of a stream still runs (the shrinker replays subsets) and the same seed always gives
the same stream, whatever happened. The regression replays (``test_regressions.py``) name indices
of these streams: changing the kinds, their weights or how the numbers are drawn orphans them.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

KINDS: dict[str, float] = {
    "submit": 22, "approve": 22, "reject": 1.5, "release": 3, "renew": 4, "resize": 3, "change_decide": 3,
    "quota_edit": 1.5, "class_edit": 1, "window_create": 4, "window_decide": 2, "window_cancel": 1,
    "clock": 14, "tick": 2, "idle_readings": 3, "idle_evaluate": 2, "defrag": 1, "fair_share": 1,
    "inventory": 1.5, "usage_roll": 0.5, "push_sweep": 2, "concurrent": 5, "fault": 3,
}
CONCURRENT_KINDS = ("approve", "release", "renew", "resize", "change_decide", "tick", "idle_evaluate", "usage_roll",
                    "fair_share", "defrag", "push_sweep")
"""What actors do at once. Never two requests: the ids they get would depend on the race, and ids
order the victims (newest first) and what later actions pick."""
FAULT_KINDS = ("kill", "deadlock", "push")
FAULTED_KINDS = ("approve", "release", "tick", "renew", "resize", "change_decide", "window_decide", "window_cancel",
                 "idle_evaluate", "defrag", "push_sweep")


@dataclass(frozen=True)
class Action:
    kind: str
    numbers: tuple[float, ...] = ()
    subs: tuple[Action, ...] = field(default=())
    fault: str = ""

    def describe(self) -> str:
        if self.kind == "concurrent":
            return "concurrent[" + ", ".join(sub.describe() for sub in self.subs) + "]"
        if self.kind == "fault":
            return f"fault:{self.fault}({', '.join(f'{n:g}' for n in self.numbers)}) on {self.subs[0].describe()}"
        return f"{self.kind}({', '.join(f'{n:.3g}' for n in self.numbers)})"


def _numbers(rng: random.Random, kind: str) -> tuple[float, ...]:
    """Eight numbers in [0, 1) for any kind: each kind reads the ones it needs."""
    del kind
    return tuple(round(rng.random(), 6) for _ in range(8))


def _plain(rng: random.Random, kinds: dict[str, float]) -> Action:
    names = list(kinds)
    kind = rng.choices(names, weights=[kinds[name] for name in names])[0]
    return Action(kind, _numbers(rng, kind))


def _one(rng: random.Random) -> Action:
    plain = {kind: weight for kind, weight in KINDS.items() if kind not in ("concurrent", "fault")}
    draw = rng.choices(list(KINDS), weights=list(KINDS.values()))[0]
    if draw == "concurrent":
        pool = {kind: KINDS[kind] for kind in CONCURRENT_KINDS}
        count = rng.choice((2, 2, 3))
        return Action("concurrent", (), tuple(_plain(rng, pool) for _ in range(count)))
    if draw == "fault":
        fault = rng.choice(FAULT_KINDS)
        pool = {kind: KINDS[kind] for kind in (("approve",) if fault == "push" else FAULTED_KINDS)}
        return Action("fault", (float(rng.randint(1, 4)),), (_plain(rng, pool),), fault=fault)
    return _plain(rng, plain)


def actions_generate(seed: int, steps: int) -> list[Action]:
    rng = random.Random(seed)
    return [_one(rng) for _ in range(steps)]
