"""Which level of a department's quota chain held its waiting demand back: the replay records the
level admission's refusal names (its own quota, a parent's, the organisation's, a window's), the
GPUs when the quotas let it in, or a reclaim's notice, in GPU-hours waiting; and it only watches
(docs/twin.md, "What-if")."""

from __future__ import annotations

import dataclasses
import datetime
import json
from decimal import Decimal

import pytest

from allocations.quotas.windows import WindowSpec
from tests.twin.test_replay import NODES, NODES_8, RULES, SPEC, tiny
from tests.twin.test_rules import share_rules
from twin.policy import Department, Policy
from twin.policy_rules import WindowRule
from twin.replay.binding import binding_replay
from twin.replay.engine import replay
from twin.sources.generator import generated_policy, workload_generate
from twin.workload import Job, jobs_read
from whatifs.compare import binding_of

pytestmark = pytest.mark.pure  # no database: runs beside the suite (tests/pure.py)

NESTED = Policy((Department("p", Decimal(0), Decimal(1)), Department("a", Decimal(0), Decimal(2), parent="p"),
                 Department("b", Decimal(0), Decimal(2), parent="p")), RULES.classes)


def _one_each() -> list[Job]:
    return [job for job in tiny() if job.line != 2]  # a at 0 for 100 s, b at 10 for 50 s, one GPU each


@pytest.mark.parametrize("mode", ["full", "borrow"])
def test_a_parents_limit_is_named_for_the_child_it_holds_back(mode: str) -> None:
    outcome, binding = binding_replay(_one_each(), NODES, NESTED, mode, horizon=200.0, drain_s=100.0)
    assert [record.first_start for record in outcome.records] == [0.0, 100.0]
    assert binding.waiting == {"b": {("parent", "p"): 90.0}}  # 1 GPU-equivalent × 90 s
    levels = [(level.kind, level.department, level.gpu_h) for level in binding.levels("b")]
    assert levels == [("own", "b", 0.0), ("parent", "p", 90 / 3600)]
    words = binding_of(binding, "b", 1.5)["words"]
    assert words == "b: waited 2 min at p95; p's limit bound 100 % of the GPU-hours waiting, b's own limit 0 %"


def test_a_departments_own_limit_is_named_when_it_refuses_first() -> None:
    own = dataclasses.replace(NESTED, departments=(
        NESTED.departments[0], dataclasses.replace(NESTED.departments[1], limit=Decimal(1)), NESTED.departments[2]))
    line = {"project": "p", "num_gpu": 1, "quantity": 1, "requested_s": 200, "priority_class": "std", "busy": 0.5,
            "department": "a", "runtime_s": 100}
    jobs = jobs_read("".join(json.dumps({**line, "submit_at": at}) + "\n" for at in (0, 0)))
    _, binding = binding_replay(jobs, NODES, own, "full", horizon=200.0, drain_s=100.0)
    # a's own limit (1) and p's (1) both fail: the refusal names the nearest, a's own
    assert binding.waiting == {"a": {("own", "a"): 100.0}}


def test_a_limit_a_window_sets_is_named_as_the_windows() -> None:
    start = datetime.datetime(2026, 3, 2, tzinfo=datetime.UTC)
    window = WindowRule("p", WindowSpec(id=1, kind="temporary", begins_at=start,
                                        ends_at=start + datetime.timedelta(hours=1), limit=Decimal(1)))
    raised = dataclasses.replace(NESTED, departments=(dataclasses.replace(NESTED.departments[0], limit=Decimal(2)),
                                                      *NESTED.departments[1:]), windows=(window,), start=start)
    _, binding = binding_replay(_one_each(), NODES, raised, "full", horizon=200.0, drain_s=100.0)
    assert binding.waiting == {"b": {("window", "p"): 90.0}}


def test_the_gpus_and_a_reclaims_notice_are_levels_too() -> None:
    _, binding = binding_replay(tiny(), NODES, RULES, "full", horizon=200.0, drain_s=100.0)
    # b's request (within its guarantee) reclaims a's borrowed GPU and waits out its 60 s notice;
    # a's reclaimed unit comes back at 70 and waits for the organisation's two GPUs until 100
    assert binding.waiting == {"b": {("notice", ""): 60.0}, "a": {("organisation", ""): 30.0}}
    _, pooled = binding_replay(tiny(), NODES[:1], RULES, "pool", horizon=200.0, drain_s=100.0)
    assert set(pooled.waiting["a"]) == {("capacity", "")}  # no quotas: only the GPUs refuse


def test_watching_what_held_requests_back_changes_no_decision() -> None:
    jobs, nodes, policy = workload_generate(SPEC), NODES_8, generated_policy(SPEC)
    plain = replay(jobs, nodes, policy, "full")
    watched, binding = binding_replay(jobs, nodes, policy, "full")
    assert [(r.first_start, r.finish, r.restarts) for r in watched.records] == \
        [(r.first_start, r.finish, r.restarts) for r in plain.records]
    waited = sum(max(0.0, (r.first_start if r.first_start is not None else plain.stop) - r.job.eligible_at)
                 * r.job.milli / 1000 for r in plain.records if r.restarts == 0)
    recorded = sum(sum(found.values()) for found in binding.waiting.values())
    assert waited > 0 and recorded >= waited - 1e-6  # every first wait is attributed (restarts wait too)


def test_a_classs_share_a_window_sets_is_named_as_the_windows() -> None:
    """From 50 s to 150 s class ``low`` may hold 1 of a's GPUs: the second ``low`` request waits
    under that share (a window's) from 60 s until the window ends at 150 s."""
    line = {"project": "p", "num_gpu": 1, "quantity": 1, "requested_s": 200, "busy": 0.5, "department": "a",
            "priority_class": "low"}
    jobs = jobs_read("".join(json.dumps({**line, "submit_at": at, "runtime_s": 200}) + "\n" for at in (0, 60)))
    outcome, binding = binding_replay(jobs, NODES, share_rules(), "full", horizon=300.0, drain_s=100.0)
    assert [record.first_start for record in outcome.records] == [0.0, 150.0]
    assert binding.waiting == {"a": {("window", "a"): 90.0}}
