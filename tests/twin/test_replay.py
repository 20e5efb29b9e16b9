"""The replay's policies keep their invariants, and the metrics of a tiny workload are the ones
computed by hand (docs/twin.md, "Policies" and "Metrics")."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest

from placement import Gpu, Node
from twin.policy import Department, Policy, PriorityClass
from twin.replay.engine import Outcome, replay
from twin.replay.metrics import jain, measure, percentile
from twin.replay.modes import POLICIES
from twin.sources.generator import GeneratorSpec, generated_policy, workload_generate
from twin.workload import Job, jobs_read

pytestmark = pytest.mark.pure  # no database: runs beside the suite (tests/pure.py)

NODES = [Node("n1", 8000, 32768, (Gpu(0, "X"),)), Node("n2", 8000, 32768, (Gpu(0, "X"),))]
RULES = Policy((Department("a", Decimal(1), Decimal(2)), Department("b", Decimal(1), Decimal(2))),
               {"std": PriorityClass("std", 100, False, Decimal(1), 60.0)})


def tiny() -> list[Job]:
    base = {"project": "p", "num_gpu": 1, "quantity": 1, "requested_s": 200, "priority_class": "std", "busy": 0.5}
    rows = [{"submit_at": 0, "department": "a", "runtime_s": 100}, {"submit_at": 0, "department": "a", "runtime_s": 100},
            {"submit_at": 10, "department": "b", "runtime_s": 50}]
    return jobs_read("".join(json.dumps({**base, **row}) + "\n" for row in rows))


def run(mode: str) -> Outcome:
    return replay(tiny(), NODES, RULES, mode, horizon=200.0, drain_s=100.0)


def test_the_full_policy_reclaims_the_borrowed_gpu_for_a_request_within_its_guarantee() -> None:
    outcome = run("full")
    runs = sorted((r.record, r.start, r.end, r.lost) for r in outcome.runs)
    assert runs == [(0, 0.0, 100.0, False), (1, 0.0, 70.0, True), (1, 100.0, 200.0, False), (2, 70.0, 120.0, False)]
    m = measure(outcome)
    assert m.total.allocation == pytest.approx(320 / 400)
    assert m.total.busy == pytest.approx(0.5 * 320 / 400)
    assert m.total.work_gpu_h == pytest.approx(250 / 3600) and m.total.lost_gpu_h == pytest.approx(70 / 3600)
    assert (m.total.reclaims, m.total.violations_gpu_h) == (1, 0.0)  # waited 60 s: the notice, not longer
    assert (m.total.waits.p50, m.total.waits.p99, m.waits_in_guarantee.count) == (0.0, 60.0, 2)
    assert m.jain == pytest.approx(1.6 ** 2 / (2 * (1.35 ** 2 + 0.25 ** 2)))
    assert [round(d.allocation, 4) for d in m.departments] == [round(270 / 400, 4), round(50 / 400, 4)]


def test_without_reclaim_the_request_within_its_guarantee_waits_for_the_borrower_to_end() -> None:
    for mode in ("pool", "borrow"):
        m = measure(run(mode))
        assert m.total.allocation == pytest.approx(250 / 400)
        assert m.waits_in_guarantee.p99 == 90.0
        assert m.total.violations_gpu_h == pytest.approx(50 / 3600)
        assert m.violation_ratio == pytest.approx(50 / 400)
        assert m.total.reclaims == 0


def test_static_partitioning_gives_each_department_its_own_gpu_and_never_lends_it() -> None:
    outcome = run("static")
    assert sorted((r.record, r.start, r.end) for r in outcome.runs) == [(0, 0.0, 100.0), (1, 100.0, 200.0), (2, 10.0, 60.0)]
    waits = measure(outcome).departments
    assert (waits[0].waits.p99, waits[1].waits.p99) == (100.0, 0.0)


def test_percentiles_are_nearest_rank_and_jain_is_one_for_equal_shares() -> None:
    assert [percentile([1.0, 2.0, 3.0, 4.0], p) for p in (50, 95, 99, 25)] == [2.0, 4.0, 4.0, 1.0]
    assert jain([2.0, 2.0]) == 1.0 and jain([1.0, 0.0]) == 0.5


def _max_held(runs: list[tuple[float, float, float]]) -> float:
    """The most held at any instant (runs as start, end, amount)."""
    edges = sorted([(s, a) for s, _, a in runs] + [(e, -a) for _, e, a in runs], key=lambda x: (x[0], x[1]))
    held = peak = 0.0
    for _, amount in edges:
        held += amount
        peak = max(peak, held)
    return peak


NODES_8 = [Node(f"n{k}", 96000, 393216, tuple(Gpu(i, "G2") for i in range(4))) for k in range(8)]
SPEC = GeneratorSpec(seed=3, days=3, requests=300, installed_gpus=32, offered_load=1.4)


@pytest.mark.parametrize("mode", POLICIES)
def test_no_policy_ever_books_more_than_the_installed_gpus(mode: str) -> None:
    outcome = replay(workload_generate(SPEC), NODES_8, generated_policy(SPEC), mode)
    assert _max_held([(r.start, r.end, r.held) for r in outcome.runs]) <= 32 + 1e-9
    assert len(outcome.runs) > 50


def test_static_partitioning_never_holds_beyond_a_departments_own_gpus() -> None:
    outcome = replay(workload_generate(SPEC), NODES_8, generated_policy(SPEC), "static")
    for department in range(1, 9):
        runs = [(r.start, r.end, r.held) for r in outcome.runs if r.department == department]
        assert _max_held(runs) <= 4  # one 4-GPU node each


def test_the_pool_ignores_quotas() -> None:
    rules = Policy((Department("a", Decimal(0), Decimal(0)), Department("b", Decimal(0), Decimal(0))), RULES.classes)
    m = measure(replay(tiny(), NODES, rules, "pool", horizon=200.0))
    assert m.total.allocation == pytest.approx(250 / 400)
    borrow = measure(replay(tiny(), NODES, rules, "borrow", horizon=200.0))
    assert borrow.total.allocation == 0.0  # a limit of 0 admits nothing


def test_the_full_policy_never_takes_a_grant_within_its_departments_guarantee() -> None:
    classes = {name: PriorityClass(name, c.value, False, c.factor, 0.0)
               for name, c in generated_policy(SPEC).classes.items()}
    rules = Policy(generated_policy(SPEC).departments, classes)
    outcome = replay(workload_generate(SPEC), NODES_8, rules, "full")
    lost = [r for r in outcome.runs if r.lost]
    assert lost  # the check below checks something
    for run in lost:  # with no notice a victim leaves the moment it is chosen: its department was beyond its guarantee
        held = sum(r.held for r in outcome.runs if r.department == run.department and r.start < run.end <= r.end)
        assert held > float(rules.departments[run.department - 1].guarantee)


def test_the_sustainable_load_is_bracketed_then_bisected() -> None:
    from twin.replay.load import compressed, sustainable_load

    assert [job.submit_at for job in compressed(tiny(), 2.0)] == [0.0, 0.0, 5.0]
    search = sustainable_load(tiny(), NODES, RULES, "full", steps=1, target_s=60.0)
    assert search.multiplier == 64.0  # a reclaim's notice (60 s) is all it ever waits
    # Without reclaim job 3 (arriving at 10 / m) waits for job 2 to end at 100: 60 s at m = 1/4, 80 s at 1/2,
    # 71.7 s at the bisection's 2 ** -1.5.
    pool = sustainable_load(tiny(), NODES, RULES, "pool", steps=1, target_s=60.0)
    assert pool.multiplier == 0.25
    assert [m for m, _ in pool.tried] == [1.0, 0.5, 0.25, 2 ** -1.5]


def test_a_parent_limit_binds_its_children_together() -> None:
    """a and b under p (limit 1): the second request waits for the first although each child is
    within its own limit; flat, both start at once."""
    nested = Policy((Department("p", Decimal(0), Decimal(1)), Department("a", Decimal(0), Decimal(2), parent="p"),
                     Department("b", Decimal(0), Decimal(2), parent="p")), RULES.classes)
    jobs = [job for job in tiny() if job.line != 2]  # a at 0, b at 10, one GPU each
    for policy, b_starts in ((nested, 100.0), (RULES, 10.0)):
        for mode in ("full", "borrow"):
            outcome = replay(jobs, NODES, policy, mode, horizon=200.0, drain_s=100.0)
            assert [record.first_start for record in outcome.records] == [0.0, b_starts], (mode, policy)
