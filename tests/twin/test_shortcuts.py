"""The replay's shortcuts skip only victim plans that would fail (docs/twin.md, "Speed"): a seeded
month replayed with them and without them makes the same decisions, run for run."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from allocations.quotas import victims
from placement import Gpu, Node
from twin.policy import Policy, policy_with_rules
from twin.replay.engine import Outcome, Replay
from twin.sources.generator import GeneratorSpec, generated_policy, workload_generate

pytestmark = pytest.mark.pure  # no database: runs beside the suite (tests/pure.py)

# nodes of two sizes, so that whole GPUs and 4- or 8-GPU units need their victims on one node
NODES = [Node(f"n{k}", 96000, 393216, tuple(Gpu(i, "G") for i in range(8 if k % 3 == 0 else 2))) for k in range(9)]
SPEC = GeneratorSpec(seed=5, days=4, requests=500, installed_gpus=36, offered_load=1.6)
# with the nightly shrink most periods cross an edge and are weighed step by step, several times
# dearer: a shorter month of the same kind (still a hundred reclaims, dozens of idle reclaims)
WINDOWS_SPEC = replace(SPEC, days=2.5, requests=300)


def replayed(rules: Policy, monkeypatch: pytest.MonkeyPatch, *, shortcuts: bool,
             spec: GeneratorSpec = SPEC) -> tuple[Outcome, int]:
    asked = []
    original = victims.plan

    def counted(*args: Any, **kwargs: Any) -> Any:
        asked.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(victims, "plan", counted)
    replay = Replay(workload_generate(spec), NODES, rules, "full")
    replay.world.shortcuts = shortcuts
    outcome = replay.run()
    monkeypatch.setattr(victims, "plan", original)
    return outcome, len(asked)


RULES_OVER_TIME = """
windows:
  - {department: nlp, kind: recurring, begins_at: 2026-03-02T18:00:00Z, rrule: FREQ=DAILY, duration_minutes: 600,
     limit_delta: -12}
idle_policies:
  - {name: idle, threshold: 0.1, window_minutes: 60, grace_minutes: 30, action: reclaim}
fair_share: {half_life_hours: 24}
"""


@pytest.mark.parametrize("rules_over_time", [None, "fair share", "windows, idle and fair share"])
def test_the_shortcuts_change_no_decision_and_ask_fewer_plans(rules_over_time: str | None,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    spec = WINDOWS_SPEC if rules_over_time == "windows, idle and fair share" else SPEC
    rules = generated_policy(spec)
    if rules_over_time == "fair share":
        rules = replace(rules, fair_share_half_life_s=3600.0 * 24)
    elif rules_over_time is not None:
        rules = policy_with_rules(rules, RULES_OVER_TIME)
    fast, fast_plans = replayed(rules, monkeypatch, shortcuts=True, spec=spec)
    slow, slow_plans = replayed(rules, monkeypatch, shortcuts=False, spec=spec)
    assert fast.runs == slow.runs
    assert [(r.first_start, r.finish, r.restarts) for r in fast.records] == [
        (r.first_start, r.finish, r.restarts) for r in slow.records]
    assert fast.reclaims == slow.reclaims > 10
    assert (fast.idle_reclaims, fast.window_edges) == (slow.idle_reclaims, slow.window_edges)
    if rules_over_time == "windows, idle and fair share":
        assert fast.idle_reclaims > 0 and fast.window_edges > 0  # the rules did something to compare
    assert fast_plans < slow_plans  # the shortcuts skipped plans that would have failed
