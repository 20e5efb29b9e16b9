"""Fidelity (docs/twin.md): the same workload replayed by the twin's full policy and by the portal's
own services on PostgreSQL under the virtual clock gives the same decisions, one by one."""

from __future__ import annotations

import os
import sys
from collections import Counter
from dataclasses import replace
from decimal import Decimal
from typing import Any

import pytest

from allocations.fair_share.reads import half_life_seconds
from tests.conftest import requires_postgres
from tests.twin.fidelity.case import OVERSUBSCRIBING, fidelity_case
from tests.twin.fidelity.portal import PortalReplay
from tests.twin.fidelity.world import portal_world_build
from twin.replay.decisions import (
    IDLE_ACT,
    IDLE_END,
    IDLE_WARN,
    RANK,
    RECLAIM,
    REFUSED,
    SHRINK,
    START,
    SUBMIT,
    WINDOW,
    DecidingReplay,
    Decision,
    replay_decisions,
)

POSTGRES: pytest.MarkDecorator = requires_postgres()
pytestmark = pytest.mark.apart  # long and CPU-bound: beside the rest, on a database of its own (tests/pure.py)
REQUESTS = int(os.environ.get("GPUPORTAL_FIDELITY_REQUESTS", "500"))
HOURS = float(os.environ.get("GPUPORTAL_FIDELITY_HOURS", "300"))
"""Over how many hours the lines arrive (on 6 nodes of 8 GPUs): 300 reclaims a few dozen times;
240 is busier (about twice the reclaims, five times the refusals, and twice the time)."""


def _replay_both(requests: int, **options: object) -> tuple[dict[str, int], list[str]]:
    compared, differences, _ = _replayed_both(requests, **options)
    return compared, differences


def _replayed_both(requests: int, **options: object) -> tuple[dict[str, int], list[str], DecidingReplay]:
    case = fidelity_case(requests, **options)  # type: ignore[arg-type]
    log, replay = replay_decisions(case.jobs, case.nodes, case.policy, "full")
    world = portal_world_build(case.policy, case.nodes)
    result = PortalReplay(world, case.jobs).run(log)
    return result.compared, result.differences, replay


@POSTGRES
@pytest.mark.django_db
def test_twenty_whole_gpu_requests_of_one_class_are_decided_alike() -> None:
    compared, differences = _replay_both(20, shares=False, classes=False, scheduled=False, nodes=2, hours=8)
    assert not differences, "\n".join(differences[:20])
    assert compared["submit"] == 20 and compared["start"] + compared.get("reclaim", 0) >= 19, compared


@POSTGRES
@pytest.mark.django_db
def test_the_full_policy_decides_every_request_as_the_portal_does() -> None:
    compared, differences = _replay_both(REQUESTS, hours=HOURS)
    sys.stdout.write(f"fidelity: {REQUESTS} workload lines, decisions compared: {compared}\n")
    assert not differences, f"{len(differences)} decisions differ of {compared}:\n" + "\n".join(differences[:30])
    assert compared["submit"] >= REQUESTS
    assert compared.get("reclaim", 0) > 0 and compared.get(REFUSED, 0) > 0


def _ahead_counts(log: list[Decision], replay: DecidingReplay) -> Counter[str]:
    """The decisions of requests booked ahead: admitted or refused before their start
    (``start-ahead``, ``reclaim-ahead``, ``refused-ahead``) and tried again once it passed
    (``...-past``); ``scheduled-victims``: units of grants approved ahead that a reclaim took."""
    counts: Counter[str] = Counter()
    ahead = {decision.piece for decision in log if decision.kind == SUBMIT and decision.ahead is not None}
    for decision in log:
        if decision.ahead is not None and decision.kind != SUBMIT:
            counts[f"{decision.kind}-ahead" + ("-past" if decision.ahead <= decision.at else "")] += 1
        counts["scheduled-victims"] += sum(units for piece, units in decision.victims if piece in ahead and any(
            d.piece == piece and d.kind in (START, RECLAIM) and d.ahead is not None and d.ahead > decision.at
            for d in log[:log.index(decision)]))
    return counts


@POSTGRES
@pytest.mark.django_db
def test_requests_booked_ahead_are_decided_as_the_portal_decides_them() -> None:
    """Half the lines ask a later start: each is made at its submission and decided then over its
    own period, on both sides; the grants it is booked beside are those whose periods meet it,
    each GPU holding the most held at one instant; a grant approved ahead begins at its start
    (``begin``) and may be taken before it, at once; a refused one is approved again at the
    twin's next try, over the same period, even once its start has passed. 120 lines over 36 hours
    by default (``GPUPORTAL_FIDELITY_AHEAD_REQUESTS``, arriving over 0.3 hours a line)."""
    requests = int(os.environ.get("GPUPORTAL_FIDELITY_AHEAD_REQUESTS", "120"))
    case = fidelity_case(requests, hours=requests * 0.3, ahead_share=0.5)
    log, replay = replay_decisions(case.jobs, case.nodes, case.policy, "full")
    result = PortalReplay(portal_world_build(case.policy, case.nodes), case.jobs).run(log)
    counts = _ahead_counts(log, replay)
    sys.stdout.write(f"fidelity, booked ahead: decisions compared: {result.compared}; ahead: {dict(counts)}\n")
    assert not result.differences, f"{len(result.differences)} decisions differ of {result.compared}:\n" + \
        "\n".join(result.differences[:30])
    for kind in ("start-ahead", "reclaim-ahead", "refused-ahead", "start-ahead-past", "refused-ahead-past",
                 "scheduled-victims"):
        assert counts[kind] > 0, (kind, counts)


@POSTGRES
@pytest.mark.django_db
def test_the_rules_over_time_decide_as_the_portal_does(settings: Any) -> None:
    """Fair share orders the waiting requests, idle policies warn and reclaim, and quota windows'
    edges change the quotas, on both sides alike. A half-life of two hours: the departments' order
    changes within the case (three orders), not only once."""
    settings.GPUPORTAL_FAIR_SHARE_HALF_LIFE_HOURS = 2
    requests = int(os.environ.get("GPUPORTAL_FIDELITY_RULES_REQUESTS", "150"))
    compared, differences = _replay_both(requests, nodes=5, hours=requests * 0.45, half_life_s=half_life_seconds(),
                                         idle=True, windows=True)
    sys.stdout.write(f"fidelity with the rules over time: {requests} workload lines, decisions compared: {compared}\n")
    assert not differences, f"{len(differences)} decisions differ of {compared}:\n" + "\n".join(differences[:30])
    assert compared.get(RANK, 0) > 0 and compared.get("reclaim", 0) > 0
    assert compared.get(IDLE_WARN, 0) > 0 and compared.get(IDLE_ACT, 0) > 0 and compared.get(IDLE_END, 0) > 0
    assert compared.get(WINDOW, 0) == 2


@POSTGRES
@pytest.mark.django_db
def test_a_placement_the_portal_did_not_make_is_named() -> None:
    case = fidelity_case(20, shares=False, classes=False, scheduled=False, nodes=2, hours=8)
    log, _ = replay_decisions(case.jobs, case.nodes, case.policy, "full")
    first = next(index for index, decision in enumerate(log) if decision.kind == START)
    moved = replace(log[first].units[0], gpus=(7,))
    log[first] = replace(log[first], units=(moved, *log[first].units[1:]))
    result = PortalReplay(portal_world_build(case.policy, case.nodes), case.jobs).run(log)
    assert len(result.differences) == 1
    assert "gpu7" in result.differences[0] and f"line {log[first].line}" in result.differences[0]


def _changed(log: list[Decision], kind: str) -> tuple[list[Decision], str, float]:
    """The twin's log with its first decision of ``kind`` changed; what the difference names, and when."""
    first = next(index for index, decision in enumerate(log) if decision.kind == kind)
    decision, before, after = log[first], log[:first], log[first + 1:]
    if kind == WINDOW:
        assert decision.quota is not None
        name, guaranteed, limit = decision.quota
        return [*before, replace(decision, quota=(name, guaranteed, limit + 1)), *after], "quota from now", decision.at
    if kind == RANK:
        return [*before, replace(decision, order=decision.order[::-1]), *after], "fair-share order", decision.at
    return [*before, *after], "idle evaluation", decision.at  # the twin's warning left out


@POSTGRES
@pytest.mark.django_db
@pytest.mark.parametrize("kind", [WINDOW, RANK, IDLE_WARN])
def test_a_rule_the_portal_applied_otherwise_is_named(kind: str) -> None:
    case = fidelity_case(24, nodes=3, hours=8, half_life_s=half_life_seconds(), idle=True, windows=True)
    log, _ = replay_decisions(case.jobs, case.nodes, case.policy, "full")
    changed, words, at = _changed(log, kind)
    differences = PortalReplay(portal_world_build(case.policy, case.nodes), case.jobs).run(changed).differences
    assert len(differences) == 1 and words in differences[0] and f"t={at:.0f}s" in differences[0], differences


MIG_REQUESTS = int(os.environ.get("GPUPORTAL_FIDELITY_MIG_REQUESTS", "150"))
"""Lines of the MIG case (2 MIG-mode nodes and 2 shared-mode nodes of 8 A100s, a line every half
hour); ``GPUPORTAL_FIDELITY_MIG_SEED`` draws another workload of the same kind (3 by default)."""
MIG_SEED = int(os.environ.get("GPUPORTAL_FIDELITY_MIG_SEED", "3"))


def _mig_case(requests: int) -> Any:
    return fidelity_case(requests, nodes=4, mig_nodes=2, hours=requests * 0.5, seed=MIG_SEED)


@POSTGRES
@pytest.mark.django_db
def test_mig_instances_are_placed_on_the_slices_the_portal_books() -> None:
    """MIG-mode nodes beside shared-mode ones, MIG instances of three profiles next to whole GPUs
    and vGPU shares: every unit's node, GPU and slice alike, reclaims and refusals included."""
    case = _mig_case(MIG_REQUESTS)
    log, _ = replay_decisions(case.jobs, case.nodes, case.policy, "full")
    result = PortalReplay(portal_world_build(case.policy, case.nodes), case.jobs).run(log)
    slices = sum(1 for decision in log for unit in decision.units if unit.mig is not None)
    sys.stdout.write(f"fidelity with MIG: {MIG_REQUESTS} workload lines, {slices} MIG units placed, "
                     f"decisions compared: {result.compared}\n")
    assert not result.differences, f"{len(result.differences)} decisions differ of {result.compared}:\n" + \
        "\n".join(result.differences[:30])
    assert slices > 0 and result.compared.get("reclaim", 0) > 0 and result.compared.get(REFUSED, 0) > 0


@POSTGRES
@pytest.mark.django_db
def test_windows_within_requests_periods_decide_as_the_portal_does() -> None:
    """A raise that ends and a shrink (``period_window_rules``) within requests' periods: both
    sides weigh each request over its own period, step by step, with every grant until its own
    asked end; the tries whose period a window's edge cuts are counted, and some are refused for
    quota before the edge that binds them."""
    requests = int(os.environ.get("GPUPORTAL_FIDELITY_PERIODS_REQUESTS", "100"))
    compared, differences, replay = _replayed_both(requests, nodes=5, hours=requests * 0.45, windows=True, within=True)
    crossing = _crossing(replay)
    sys.stdout.write(f"fidelity with windows within periods: {requests} workload lines, decisions compared: "
                     f"{compared}, tries over an edge: {crossing}\n")
    assert not differences, f"{len(differences)} decisions differ of {compared}:\n" + "\n".join(differences[:30])
    assert compared.get(WINDOW, 0) == 5 and compared.get("reclaim", 0) > 0
    assert crossing[REFUSED] > 0 and crossing[START] > 0 and crossing["quota"] > 0


SHRINK_REQUESTS = int(os.environ.get("GPUPORTAL_FIDELITY_SHRINK_REQUESTS", "40"))
"""Lines of the case of a shrink that reclaims (2 nodes of 8 A100s, a line every 27 minutes);
``GPUPORTAL_FIDELITY_SHRINK_SEED`` draws another workload of the same kind (3 by default)."""
SHRINK_SEED = int(os.environ.get("GPUPORTAL_FIDELITY_SHRINK_SEED", "3"))


def _shrink_case(requests: int, *, nodes: int = 2, seed: int = SHRINK_SEED) -> Any:
    """nlp's limit lowered to half its guarantee under shrink policy ``reclaim``, the standard class
    oversubscribing by half (a request is checked against the limit times 1.5, so nlp may hold
    beyond the plain limit as the edge comes)."""
    return fidelity_case(requests, nodes=nodes, hours=requests * 0.45, windows=True, within=True, seed=seed,
                         shrink_policy="reclaim", factors={"gpu-standard": Decimal("1.5")})


@POSTGRES
@pytest.mark.django_db
def test_a_shrink_that_reclaims_takes_back_what_the_portal_takes_back() -> None:
    """The tick takes back the grants nlp holds beyond its lower limit (whole, or some of their
    units), the twin the same ones; they leave after their notice and the run goes on alike."""
    case = _shrink_case(SHRINK_REQUESTS)
    log, replay = replay_decisions(case.jobs, case.nodes, case.policy, "full")
    result = PortalReplay(portal_world_build(case.policy, case.nodes), case.jobs).run(log)
    taken = [victim for decision in log if decision.kind in (WINDOW, SHRINK) for victim in decision.victims]
    sys.stdout.write(f"fidelity with a shrink that reclaims: {SHRINK_REQUESTS} workload lines, decisions compared: "
                     f"{result.compared}, taken back (request, units): {taken}\n")
    assert not result.differences, f"{len(result.differences)} decisions differ of {result.compared}:\n" + \
        "\n".join(result.differences[:30])
    assert result.compared.get(WINDOW, 0) == 5 and taken and replay.shrink_reclaims == len(taken)


@POSTGRES
@pytest.mark.django_db
def test_a_grant_the_portal_did_not_take_back_is_named() -> None:
    case = _shrink_case(20, nodes=3, seed=1)
    log, _ = replay_decisions(case.jobs, case.nodes, case.policy, "full")
    first = next(index for index, decision in enumerate(log) if decision.kind == WINDOW and decision.victims)
    (piece, units), *rest = log[first].victims
    log[first] = replace(log[first], victims=((piece, units + 1), *rest))
    differences = PortalReplay(portal_world_build(case.policy, case.nodes), case.jobs).run(log).differences
    assert len(differences) == 1 and "taken back (request, units)" in differences[0], differences
    assert f"t={log[first].at:.0f}s" in differences[0]


FACTORS_REQUESTS = int(os.environ.get("GPUPORTAL_FIDELITY_FACTORS_REQUESTS", "60"))
"""Lines of the case of factors on several classes (3 nodes of 8 A100s, a line every 27 minutes);
``GPUPORTAL_FIDELITY_FACTORS_SEED`` draws another workload of the same kind (1 by default)."""
FACTORS_SEED = int(os.environ.get("GPUPORTAL_FIDELITY_FACTORS_SEED", "1"))


@POSTGRES
@pytest.mark.django_db
def test_classes_that_oversubscribe_decide_as_the_portal_does() -> None:
    """Every priority class oversubscribes (production by a quarter, standard by half, preemptible
    twice) and each department's limit is 1.2 times its guarantee, without windows: requests are
    admitted beyond a limit by their class's factor, and what lies beyond a limit is taken only by
    a request of a higher priority. Preemptible victims leave without notice, within the decision
    that reclaims them, and free their GPUs for the rest of the pass (the first draw's difference
    before the twin forgot its earlier refusals there)."""
    compared, differences, replay = _replayed_both(
        FACTORS_REQUESTS, nodes=3, hours=FACTORS_REQUESTS * 0.45, seed=FACTORS_SEED, limit_ratio=Decimal("1.2"),
        factors=OVERSUBSCRIBING)
    most = _most_held(replay)
    limits = {index: float(department.limit) for index, department in enumerate(replay.world.policy.departments, 1)}
    sys.stdout.write(f"fidelity with factors on every class: {FACTORS_REQUESTS} workload lines, decisions compared: "
                     f"{compared}, most held at once against the limit: "
                     f"{ {index: (most.get(index, 0.0), limit) for index, limit in limits.items()} }\n")
    assert not differences, f"{len(differences)} decisions differ of {compared}:\n" + "\n".join(differences[:30])
    assert compared.get("reclaim", 0) > 0 and compared.get(REFUSED, 0) > 0
    assert any(most.get(index, 0.0) > limit for index, limit in limits.items()), "no department held beyond its limit"


SHARES_REQUESTS = int(os.environ.get("GPUPORTAL_FIDELITY_SHARES_REQUESTS", "60"))
"""Lines of the case of classes' shares (3 nodes of 8 A100s, a line every 27 minutes);
``GPUPORTAL_FIDELITY_SHARES_SEED`` draws another workload of the same kind (12 by default: its
standard share's edge under ``reclaim`` finds nlp's standard work beyond it)."""
SHARES_SEED = int(os.environ.get("GPUPORTAL_FIDELITY_SHARES_SEED", "12"))


@POSTGRES
@pytest.mark.django_db
def test_windows_on_a_classs_share_decide_as_the_portal_does() -> None:
    """Windows of one priority class's share of a quota (``case.share_window_rules``: nlp's
    preemptible work at most 4 by day, every day in Berlin; vision's standard work 2 below its
    limit for a while; nlp's standard share under ``reclaim`` while nlp's limit falls),
    every class oversubscribing: a request of such a class is weighed in its share too, over its
    period, and each share's edges are the portal's. Without the windows the twin decides
    otherwise, so the shares are what is compared."""
    options: dict[str, Any] = {"nodes": 3, "hours": SHARES_REQUESTS * 0.45, "seed": SHARES_SEED,
                               "limit_ratio": Decimal("1.2"), "factors": OVERSUBSCRIBING}
    compared, differences, replay = _replayed_both(SHARES_REQUESTS, share_windows=True, **options)
    shares = Counter(decision.share for decision in replay.log if decision.kind == WINDOW)
    sys.stdout.write(f"fidelity with classes' shares: {SHARES_REQUESTS} workload lines, decisions compared: "
                     f"{compared}, window lines by share: {dict(shares)}\n")
    assert not differences, f"{len(differences)} decisions differ of {compared}:\n" + "\n".join(differences[:30])
    assert {"gpu-preemptible", "gpu-standard"} <= set(shares) and compared.get(REFUSED, 0) > 0
    taken = [d.victims for d in replay.log if d.kind in (WINDOW, SHRINK) and d.share is not None and d.victims]
    if SHARES_SEED == 12:  # the default draw: the share's edge takes standard work back
        assert taken, "no share's edge took anything back"
    case = fidelity_case(SHARES_REQUESTS, **options)
    without, _ = replay_decisions(case.jobs, case.nodes, case.policy, "full")
    assert _decided(without) != _decided([decision for decision in replay.log if decision.kind != WINDOW]), \
        "the classes' shares changed no decision"


FLAVORS_REQUESTS = int(os.environ.get("GPUPORTAL_FIDELITY_FLAVORS_REQUESTS", "60"))
"""Lines of the case of flavors' quotas (3 nodes of 8 A100s, a line every 27 minutes);
``GPUPORTAL_FIDELITY_FLAVORS_SEED`` draws another workload of the same kind (1 by default)."""
FLAVORS_SEED = int(os.environ.get("GPUPORTAL_FIDELITY_FLAVORS_SEED", "1"))


@POSTGRES
@pytest.mark.django_db
def test_quotas_of_flavors_decide_as_the_portal_does() -> None:
    """Each department has quotas of some flavors besides its own (``case.FLAVOR_QUOTAS``, in
    units of each flavor): a request is checked in its flavor's quota too, and the victim choice
    frees that quota where it binds. Without them the twin decides otherwise."""
    options: dict[str, Any] = {"nodes": 3, "hours": FLAVORS_REQUESTS * 0.45, "seed": FLAVORS_SEED}
    compared, differences, replay = _replayed_both(FLAVORS_REQUESTS, flavor_quotas=True, **options)
    sys.stdout.write(f"fidelity with flavors' quotas: {FLAVORS_REQUESTS} workload lines, decisions compared: {compared}\n")
    assert not differences, f"{len(differences)} decisions differ of {compared}:\n" + "\n".join(differences[:30])
    assert compared.get("reclaim", 0) > 0 and compared.get(REFUSED, 0) > 0
    case = fidelity_case(FLAVORS_REQUESTS, **options)
    without, _ = replay_decisions(case.jobs, case.nodes, case.policy, "full")
    assert _decided(without) != _decided(replay.log), "the flavors' quotas changed no decision"


FLAVOR_WINDOWS_SEED = int(os.environ.get("GPUPORTAL_FIDELITY_FLAVOR_WINDOWS_SEED", "6"))
"""The draw of the case of windows on flavors' quotas (60 lines; 6 by default: nlp's A100s' edge
under ``reclaim`` finds nlp beyond it)."""


@POSTGRES
@pytest.mark.django_db
def test_windows_on_quotas_of_flavors_decide_as_the_portal_does() -> None:
    """The flavors' quotas with windows on them (``case.flavor_window_rules``: nlp's A100s lowered
    under ``reclaim``, vision's halves raised, speech's preemptible share of its quarters by day),
    every class oversubscribing: each such quota's edges are the portal's, with what they take
    back, and a request is weighed in its flavor's quota as the windows set it over its period."""
    compared, differences, replay = _replayed_both(
        FLAVORS_REQUESTS, nodes=3, hours=FLAVORS_REQUESTS * 0.45, seed=FLAVOR_WINDOWS_SEED, flavor_quotas=True,
        flavor_windows=True, factors=OVERSUBSCRIBING)
    lines = Counter((d.flavor, d.share) for d in replay.log if d.kind == WINDOW)
    sys.stdout.write(f"fidelity with windows on flavors' quotas: decisions compared {compared}, window lines by "
                     f"(flavor, share): {dict(lines)}\n")
    assert not differences, f"{len(differences)} decisions differ of {compared}:\n" + "\n".join(differences[:30])
    assert {("a100", None), ("a100-half", None), ("a100-quarter", "gpu-preemptible")} <= set(lines)
    if FLAVOR_WINDOWS_SEED == 6:  # the default draw: nlp's A100s' edge takes one back
        assert any(d.victims for d in replay.log if d.kind in (WINDOW, SHRINK) and d.flavor == "a100")


def _decided(log: list[Decision]) -> list[tuple[object, ...]]:
    return [(d.at, d.kind, d.piece, d.units, d.victims, d.reason) for d in log]


NESTED_REQUESTS = int(os.environ.get("GPUPORTAL_FIDELITY_NESTED_REQUESTS", "60"))
"""Lines of the nested case (3 nodes of 8 A100s, a line every 27 minutes);
``GPUPORTAL_FIDELITY_NESTED_SEED`` draws another workload of the same kind (1 by default)."""
NESTED_SEED = int(os.environ.get("GPUPORTAL_FIDELITY_NESTED_SEED", "1"))


@POSTGRES
@pytest.mark.django_db
def test_teams_under_a_department_decide_as_the_portal_does() -> None:
    """Two teams under nlp (``case.TEAMS``), guaranteed within nlp's guarantee, beside nlp's own
    projects: every quota on a request's chain checks it, and a team's request within its
    guarantee takes what its sibling or nlp's own projects borrow under nlp."""
    case = fidelity_case(NESTED_REQUESTS, nodes=3, hours=NESTED_REQUESTS * 0.45, seed=NESTED_SEED, nested=True)
    log, _ = replay_decisions(case.jobs, case.nodes, case.policy, "full")
    result = PortalReplay(portal_world_build(case.policy, case.nodes), case.jobs).run(log)
    line_of = {decision.piece: decision.line for decision in log if decision.kind == SUBMIT}
    taken = Counter((case.jobs[line_of[decision.piece] - 1].department, case.jobs[line_of[victim] - 1].department)
                    for decision in log if decision.kind == RECLAIM for victim, _ in decision.victims)
    sys.stdout.write(f"fidelity with teams under nlp: {NESTED_REQUESTS} workload lines, decisions compared: "
                     f"{result.compared}, victims (for, of): {dict(taken)}\n")
    assert not result.differences, f"{len(result.differences)} decisions differ of {result.compared}:\n" + \
        "\n".join(result.differences[:30])
    assert taken[("nlp-asr", "nlp-mt")] + taken[("nlp-mt", "nlp-asr")] > 0, "no team took from its sibling"
    assert taken[("nlp-asr", "nlp")] + taken[("nlp-mt", "nlp")] > 0, "no team took from nlp's own projects"


@POSTGRES
@pytest.mark.django_db
def test_teams_under_a_department_are_ranked_by_fair_share_as_the_portal_ranks_them(settings: Any) -> None:
    """The teams' case with fair share (a half-life of two hours): the twin ranks the departments
    as they nest, as the portal's Fair Tree does (a department with teams an account, its own
    projects a leaf beside them), so every order the twin's pass tried them in is the portal's."""
    settings.GPUPORTAL_FAIR_SHARE_HALF_LIFE_HOURS = 2
    compared, differences, replay = _replayed_both(NESTED_REQUESTS, nodes=3, hours=NESTED_REQUESTS * 0.45,
                                                   seed=NESTED_SEED, nested=True, half_life_s=half_life_seconds())
    orders = {decision.order for decision in replay.log if decision.kind == RANK}
    sys.stdout.write(f"fidelity with teams and fair share: decisions compared {compared}, "
                     f"{len(orders)} orders of the departments\n")
    assert not differences, f"{len(differences)} decisions differ of {compared}:\n" + "\n".join(differences[:30])
    assert len(orders) > 1 and compared.get(RANK, 0) > 0


@POSTGRES
@pytest.mark.django_db
def test_a_shrink_takes_part_of_a_grant_without_notice_at_once_as_the_portal_does() -> None:
    """Teams under nlp, every class oversubscribing, and nlp's limit lowered to half its guarantee
    under ``reclaim`` (60 lines on 2 nodes, seed 3): the edge takes back part of a preemptible
    grant of a team; without notice the portal's tick gives those units back at once and the grant
    keeps the rest, which the comparison reads as what the grant no longer holds."""
    case = fidelity_case(60, nodes=2, hours=27, nested=True, windows=True, within=True, shrink_policy="reclaim",
                         factors=OVERSUBSCRIBING, seed=3)
    log, _ = replay_decisions(case.jobs, case.nodes, case.policy, "full")
    result = PortalReplay(portal_world_build(case.policy, case.nodes), case.jobs).run(log)
    asked = {decision.piece: (decision.quantity, case.jobs[decision.line - 1]) for decision in log if decision.kind == SUBMIT}
    partial = [(piece, units) for decision in log if decision.kind in (WINDOW, SHRINK) for piece, units in decision.victims
               if units < asked[piece][0] and case.policy.classes[asked[piece][1].priority_class].notice_s == 0]
    sys.stdout.write(f"fidelity with a shrink under teams: decisions compared {result.compared}, taken back in part "
                     f"without notice (request, units): {partial}\n")
    assert not result.differences, f"{len(result.differences)} decisions differ of {result.compared}:\n" + \
        "\n".join(result.differences[:30])
    assert partial and result.compared.get(WINDOW, 0) == 5


def _most_held(replay: DecidingReplay) -> dict[int, float]:
    """The most each department (its index) held at once over the replay, from its runs."""
    changes = sorted((at, sign * run.held, run.department) for run in replay.runs
                     for at, sign in ((run.start, 1), (run.end, -1)))
    held: dict[int, float] = {}
    most: dict[int, float] = {}
    for _, amount, department in changes:  # at one instant an end (negative) sorts before a start
        held[department] = held.get(department, 0.0) + amount
        most[department] = max(most.get(department, 0.0), held[department])
    return most


def _crossing(replay: DecidingReplay) -> dict[str, int]:
    """The tries whose period a window's edge cuts, by kind (and the refusals for quota among them)."""
    found = {START: 0, REFUSED: 0, "reclaim": 0, "quota": 0}
    for decision in replay.log:
        if (decision.at, decision.piece) in replay.crossing and decision.kind in found:
            found[decision.kind] += 1
            found["quota"] += decision.reason == "quota"
    return found


@POSTGRES
@pytest.mark.django_db
def test_a_slice_the_portal_did_not_book_is_named() -> None:
    case = _mig_case(20)
    log, _ = replay_decisions(case.jobs, case.nodes, case.policy, "full")
    first = next(index for index, decision in enumerate(log)
                 if decision.kind == START and any(unit.mig is not None for unit in decision.units))
    unit = next(unit for unit in log[first].units if unit.mig is not None)
    assert unit.mig is not None
    profile, start = unit.mig
    moved = replace(unit, mig=(profile, start + 1))
    log[first] = replace(log[first], units=tuple(moved if u is unit else u for u in log[first].units))
    differences = PortalReplay(portal_world_build(case.policy, case.nodes), case.jobs).run(log).differences
    assert len(differences) == 1, differences
    assert f"{profile}@{start + 1}" in differences[0] and f"line {log[first].line}" in differences[0]


@POSTGRES
@pytest.mark.django_db
def test_a_decision_over_a_period_the_portal_made_otherwise_is_named() -> None:
    """The first refusal for quota whose period a window's edge cuts, said to be for capacity."""
    case = fidelity_case(40, nodes=3, hours=18, windows=True, within=True)
    log, replay = replay_decisions(case.jobs, case.nodes, case.policy, "full")
    first = next(index for index, decision in enumerate(log) if decision.kind == REFUSED and decision.reason == "quota"
                 and (decision.at, decision.piece) in replay.crossing)
    changed = [*log[:first], replace(log[first], reason="capacity"), *log[first + 1:]]
    differences = PortalReplay(portal_world_build(case.policy, case.nodes), case.jobs).run(changed).differences
    assert len(differences) == 1 and "refused for quota by the portal" in differences[0], differences
    assert f"t={log[first].at:.0f}s line {log[first].line}" in differences[0]
