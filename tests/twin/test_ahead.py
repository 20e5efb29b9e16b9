"""Booking ahead in the twin (docs/twin.md, "Booking ahead"): a picture of a later period holds, on
each GPU, the most held at one instant by the grants whose periods meet it (the portal's rule,
``placement.held``); a request that asks a later start is decided at its submission over its own
period, begins at its start, and weighs on every decision whose period meets it."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest

from placement import GEOMETRIES, Gpu, Node, Placement, Request
from placement.held import held_gpu
from tests.twin.fidelity.case import fidelity_case
from tests.twin.test_replay import NODES
from tests.twin.test_rules import window_rules
from twin.policy import Department, Policy, PriorityClass
from twin.replay.ahead import Booked, meets, picture_nodes
from twin.replay.decisions import BEGIN, RECLAIM, REFUSED, START, SUBMIT, replay_decisions
from twin.replay.engine import replay
from twin.workload import Job, jobs_read

pytestmark = pytest.mark.pure  # no database: runs beside the suite (tests/pure.py)

HOUR = 3600.0
A100 = "A100-SXM4-80GB"
NODE = Node("n1", 8000, 32768, (Gpu(0, A100, mig_geometry="A100-80GB"), Gpu(1, A100, mig_geometry="A100-80GB")))


def share(milli: int, gpu: int = 0) -> Placement:
    return Placement(Request(0, 0, 1, milli, None, frozenset({A100})), "n1", (gpu,))


def instance(profile: str, start: int, gpu: int = 0) -> Placement:
    return Placement(Request(0, 0, 1, 1000, profile, frozenset({A100})), "n1", (gpu,), (start,))


def gpu_of(booked: list[Booked], interval: tuple[float, float], gpu: int = 0) -> Gpu:
    return picture_nodes([NODE], booked, interval)[0].gpus[gpu]


def test_a_period_meets_the_grants_that_hold_at_some_instant_of_it() -> None:
    assert meets((0, 10), (5, 20)) and meets((10, 30), (5, 20)) and meets((0, 100), (5, 20))
    assert not meets((0, 5), (5, 20)) and not meets((20, 30), (5, 20))  # touching ends do not meet


def test_shares_that_never_hold_at_once_count_once_and_those_that_do_add_up() -> None:
    one_after_the_other = [Booked(share(500), (0, 10)), Booked(share(700), (10, 20))]
    assert gpu_of(one_after_the_other, (5, 15)).used_milli == 700
    at_once = [Booked(share(500), (0, 10)), Booked(share(300), (5, 20))]
    assert gpu_of(at_once, (0, 20)).used_milli == 800


def test_a_grant_whose_period_does_not_meet_the_interval_is_not_in_its_picture() -> None:
    booked = [Booked(share(500), (0, 10)), Booked(share(700), (30, 40))]
    assert gpu_of(booked, (10, 30)).used_milli == 0  # the first ends as it begins, the second begins as it ends
    assert gpu_of(booked, (9, 30)).used_milli == 500
    assert gpu_of(booked, (0, 40), gpu=1).used_milli == 0  # another GPU: nothing booked there


def test_more_than_a_whole_gpu_at_one_instant_shows_it_whole() -> None:
    """A reclaim's victim still running beside the units booked where it was (the portal's view
    shows the GPU full, no more)."""
    assert gpu_of([Booked(share(1000), (0, 10)), Booked(share(1000), (5, 20))], (0, 20)).used_milli == 1000


def test_mig_instances_on_one_slice_at_different_times_are_both_held() -> None:
    booked = [Booked(instance("3g.40gb", 0), (0, 10)), Booked(instance("3g.40gb", 0), (10, 20))]
    gpu = gpu_of(booked, (5, 15))
    assert gpu.mig_geometry == "A100-80GB" and len(gpu.mig_slices) == 2
    assert GEOMETRIES["A100-80GB"].held(gpu.mig_slices).compute == 3  # never both at once


def test_a_gpu_whose_instances_clash_or_that_is_also_held_whole_is_shown_full() -> None:
    clash = [Booked(instance("3g.40gb", 0), (0, 10)), Booked(instance("3g.40gb", 0), (5, 20))]
    assert gpu_of(clash, (0, 20)) == Gpu(0, A100, used_milli=1000)
    whole_then_carved = [Booked(share(1000), (0, 10)), Booked(instance("1g.10gb", 0), (10, 20))]
    assert gpu_of(whole_then_carved, (5, 15)) == Gpu(0, A100, used_milli=1000)
    assert gpu_of(whole_then_carved, (12, 15)).mig_slices  # only the instance meets a later interval


def test_the_portal_and_the_twin_show_a_gpu_by_one_rule() -> None:
    """``allocations.booking.view`` shows the database's GPUs with the same function."""
    empty = held_gpu(Gpu(3, A100, 81920), geometry=GEOMETRIES["A100-80GB"], milli=0, slices=(), mig_mode_when_empty=True)
    assert empty == Gpu(3, A100, 81920, 0, "A100-80GB")
    assert held_gpu(Gpu(3, A100), geometry=None, milli=1500, slices=()) == Gpu(3, A100, used_milli=1000)


ONE_GPU = [Node("n1", 8000, 32768, (Gpu(0, "X"),))]
RULES = Policy((Department("a", Decimal(1), Decimal(1)),), {"std": PriorityClass("std", 100, False, Decimal(1), 60.0)})


def jobs(*rows: dict[str, object]) -> list[Job]:
    base = {"department": "a", "project": "p", "num_gpu": 1, "quantity": 1, "priority_class": "std", "busy": 0.5}
    return jobs_read("".join(json.dumps({**base, **row}) + "\n" for row in rows))


def test_a_request_booked_ahead_is_decided_at_its_submission_and_begins_at_its_start() -> None:
    """The GPU runs a grant until 2 h; a request for 3 h to 4 h is booked on it at 0 (the
    periods do not meet) and begins at 3 h; one made at 10 minutes for four hours meets both and
    waits until the booked one ends, though the GPU is free from 2 h to 3 h."""
    workload = jobs({"submit_at": 0, "runtime_s": 2 * HOUR, "requested_s": 2 * HOUR},
                    {"submit_at": 0, "starts_at": 3 * HOUR, "runtime_s": HOUR, "requested_s": HOUR},
                    {"submit_at": 600, "runtime_s": HOUR, "requested_s": 4 * HOUR})
    log, deciding = replay_decisions(workload, ONE_GPU, RULES, "full", drain_s=10 * HOUR)
    lines = [(d.at, d.kind, d.line, d.ahead) for d in log if d.kind in (SUBMIT, START, BEGIN, REFUSED)]
    assert lines[:4] == [(0.0, SUBMIT, 1, None), (0.0, SUBMIT, 2, 3 * HOUR), (0.0, START, 1, None),
                         (0.0, START, 2, 3 * HOUR)]
    assert (3 * HOUR, BEGIN, 2, None) in lines
    assert (2 * HOUR, REFUSED, 3, None) in lines and (4 * HOUR, START, 3, None) in lines
    records = deciding.records
    assert [r.first_start for r in records] == [0.0, 3 * HOUR, 4 * HOUR]
    plain = replay(workload, ONE_GPU, RULES, "full", drain_s=10 * HOUR)
    assert [r.first_start for r in plain.records] == [0.0, 3 * HOUR, 4 * HOUR]  # the plain replay books ahead too


def test_the_baselines_know_no_booking_ahead_a_request_arrives_at_its_start() -> None:
    workload = jobs({"submit_at": 0, "runtime_s": 2 * HOUR, "requested_s": 2 * HOUR},
                    {"submit_at": 0, "starts_at": 3 * HOUR, "runtime_s": HOUR, "requested_s": HOUR},
                    {"submit_at": 600, "runtime_s": HOUR, "requested_s": 4 * HOUR})
    outcome = replay(workload, ONE_GPU, RULES, "pool", drain_s=10 * HOUR)
    assert [r.first_start for r in outcome.records] == [0.0, 3 * HOUR, 2 * HOUR]  # the third runs 2 h to 3 h first
    static = replay(workload, ONE_GPU, RULES, "static", drain_s=10 * HOUR)
    assert [r.first_start for r in static.records] == [0.0, 3 * HOUR, 2 * HOUR]


def test_a_request_booked_ahead_whose_period_ends_while_it_waits_expires() -> None:
    """Refused ahead (the GPU is held over its whole period), it is tried again as the GPU frees
    and is dropped once its period has passed, as the portal's pending request expires."""
    workload = jobs({"submit_at": 0, "runtime_s": 5 * HOUR, "requested_s": 5 * HOUR},
                    {"submit_at": 0, "starts_at": HOUR, "runtime_s": HOUR, "requested_s": 2 * HOUR},
                    {"submit_at": 4 * HOUR, "runtime_s": 60, "requested_s": 60})
    log, deciding = replay_decisions(workload, ONE_GPU, RULES, "full", drain_s=10 * HOUR)
    refused = [(d.at, d.ahead) for d in log if d.kind == REFUSED and d.line == 2]
    assert refused == [(0.0, HOUR)]
    assert deciding.records[1].first_start is None and deciding.records[2].first_start == 5 * HOUR
    assert not [d for d in log if d.line == 2 and d.at > 0]  # not tried once its period is over


def test_a_period_ahead_is_weighed_against_the_window_in_force_then_not_the_numbers_of_now() -> None:
    """a's limit is 2, lowered to 1 from 50 s to 150 s. At 10 s, with one GPU held through the
    window, a request for 60 s to 90 s lies wholly inside it (no edge within its period): it is
    refused for quota, as the portal's admission weighs it, though the numbers of now would let it
    borrow (found by a fidelity case: the flat check of now had stood in for the window's). Without
    the window it is booked ahead."""
    workload = jobs({"submit_at": 0, "runtime_s": 400, "requested_s": 400},
                    {"submit_at": 10, "starts_at": 60, "runtime_s": 30, "requested_s": 30})
    for rules, expected in ((window_rules(limit=1), (REFUSED, "quota")), (window_rules(limit_delta=0), (START, ""))):
        log, _ = replay_decisions(workload, NODES, rules, "full", drain_s=600)
        assert [(d.kind, d.reason) for d in log if d.line == 2 and d.at == 10][1:] == [expected]


def test_a_gpu_held_whole_is_not_opened_for_mig_instances() -> None:
    """An empty MIG-capable GPU may be shown carved for a MIG unit; one a share or a whole GPU's
    unit holds may not (the portal booked MIG instances beside a whole GPU when it was)."""
    geometry = GEOMETRIES["A100-80GB"]
    held = held_gpu(Gpu(5, A100), geometry=geometry, milli=1000, slices=(), mig_mode_when_empty=True)
    assert held == Gpu(5, A100, used_milli=1000) and not held.mig_mode
    assert held_gpu(Gpu(5, A100), geometry=geometry, milli=250, slices=(), mig_mode_when_empty=True).used_milli == 250


def test_every_grant_booked_ahead_finds_its_units_free_when_it_begins() -> None:
    """The fidelity case with half its lines booked ahead, in the twin alone: each scheduled grant's
    units are booked on the pools of now when it begins, which refuses (``Cluster.apply`` raises)
    a unit that no longer fits; every one begins or is taken before the replay ends."""
    case = fidelity_case(200, hours=60, ahead_share=0.5)
    log, deciding = replay_decisions(case.jobs, case.nodes, case.policy, "full")
    ahead = {d.piece for d in log if d.kind in (START, RECLAIM) and d.ahead is not None and d.ahead > d.at}
    begun = {d.piece for d in log if d.kind == BEGIN} & ahead
    assert len(ahead) > 90 and len(begun) > 80 and not deciding.world.scheduled
