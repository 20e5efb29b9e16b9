"""Finish-time fairness (Themis): a request's completion time under a policy ÷ its completion time
with its department's guarantee share to itself (the alone replay; docs/twin.md, "Metrics")."""

from __future__ import annotations

import pytest

from tests.twin.test_replay import NODES, RULES, tiny
from twin.replay.engine import replay
from twin.replay.fairness import ALONE_DRAIN_S, finish_fairness, with_fairness
from twin.replay.metrics import measure

pytestmark = pytest.mark.pure  # no database: runs beside the suite (tests/pure.py)


def test_the_alone_replay_gives_each_department_its_guarantees_gpu_to_itself() -> None:
    alone = measure(replay(tiny(), NODES, RULES, "alone", drain_s=ALONE_DRAIN_S))
    # a's two 100 s jobs share a's one GPU: 100 and 200 s; b's 50 s job runs at once on b's GPU
    assert alone.completions == (100.0, 200.0, 50.0)


def test_reclaim_makes_the_borrower_finish_later_than_on_its_own_share() -> None:
    alone = measure(replay(tiny(), NODES, RULES, "alone", drain_s=ALONE_DRAIN_S))
    full = with_fairness(measure(replay(tiny(), NODES, RULES, "full", horizon=200.0, drain_s=100.0)), alone)
    # full: job 1 borrows b's GPU, is reclaimed at 70 and runs again 100..200: 200 s, as alone;
    # job 2 (b) waits the 60 s notice: 110 s against 50 alone
    assert full.completions == (100.0, 200.0, 110.0)
    fairness = full.finish_fairness
    assert fairness is not None
    assert fairness.worst == pytest.approx(110 / 50) and (fairness.count, fairness.left_out) == (3, 0)
    assert fairness.median == 1.0


def test_requests_that_never_finish_alone_are_left_out_and_the_rest_ranked_by_nearest_rank() -> None:
    shared = [float(k) for k in range(1, 21)] + [5.0]
    alone: list[float | None] = [1.0] * 20 + [None]
    fairness = finish_fairness(shared, alone)
    assert (fairness.count, fairness.left_out, fairness.worst, fairness.p95) == (20, 1, 20.0, 19.0)
    with pytest.raises(ValueError):
        finish_fairness([1.0], [])
