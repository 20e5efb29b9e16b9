"""bench/scale.py cannot rot: its seeding at a tiny size writes what the sizes ask, and one short
drive of its clients over HTTP does every operation without an error. Counts, never times."""

from __future__ import annotations

from typing import Any

import pytest
from pytest_django.live_server_helper import LiveServer

from allocations.models import Allocation, AllocationState
from bench import scale
from bench.scale_drive import PhaseResult, Plan, Tally, client_run
from bench.scale_report import Cpu, cpu_lines, target_lines
from bench.scale_seed import DAYS_OF_USAGE, Sizes, clusters_first_push, scale_seed
from clusters.models import ClusterPush, PushState
from demo.seed import DEMO_NODES, USERS

pytestmark = pytest.mark.django_db(transaction=True)

TINY = Sizes(clusters=2, nodes=16, departments=6, projects=9, users=14, clients=2)


@pytest.fixture
def seeded() -> dict[str, Any]:
    return scale_seed(TINY)


def test_the_seed_writes_the_clusters_departments_projects_people_and_usage_the_sizes_ask(seeded: dict[str, Any]) -> None:
    nodes = TINY.clusters * TINY.nodes + len(DEMO_NODES)
    assert seeded["counts"] == {
        "clusters": TINY.clusters + 1, "nodes": nodes, "gpus": 8 * nodes,
        "departments": TINY.departments + 3, "projects": TINY.projects + 3, "users": TINY.users + len(USERS),
        "memberships": TINY.users + len(USERS), "usage_hours": TINY.departments * DAYS_OF_USAGE * 24,
        "usage_days": TINY.departments * DAYS_OF_USAGE,
    }  # fmt: skip
    assert [cluster["hami"] for cluster in seeded["clusters"]] == [False, True]
    assert len(seeded["clients"]) == TINY.clients
    assert len({client["department"] for client in seeded["clients"]}) == TINY.clients  # a department each
    assert Allocation.objects.filter(state=AllocationState.ACTIVE).count() == TINY.departments  # the background grants


def test_one_short_drive_does_every_operation_without_an_error_and_the_approvals_reach_their_clusters(
    seeded: dict[str, Any], live_server: LiveServer
) -> None:
    clusters_first_push()
    port = int(live_server.url.rsplit(":", 1)[1])
    persona = seeded["clients"][0]
    tally = client_run(port, seeded, persona, Plan({"submit": 1}, count=4))
    assert len(tally.pending) == 4
    tally = client_run(port, seeded, persona, Plan({"approve": 1}, count=3), tally)
    assert (len(tally.pending), len(tally.granted)) == (1, 3)
    tally = client_run(port, seeded, persona, Plan({"release": 1}, count=1), tally)
    tally = client_run(port, seeded, persona, Plan({"grant": 1}, count=1, rate=50.0), tally)  # one more, approved
    assert (len(tally.latencies["submit"]), len(tally.latencies["approve"])) == (1, 1)
    reads = client_run(port, seeded, persona, Plan({"get": 1, "month": 1, "feedback": 1}, count=9, seed=3))
    assert tally.errors == {} and reads.errors == {}
    assert sum(len(values) for values in reads.latencies.values()) == 9
    assert set(reads.latencies) == {"get", "month", "feedback"}

    mine = Allocation.objects.filter(justification="scale bench")
    assert mine.count() == 5
    assert mine.filter(state=AllocationState.PENDING).count() == 1
    assert mine.filter(state=AllocationState.RELEASED).count() == 1
    assert {allocation.cluster_id for allocation in mine.exclude(state=AllocationState.PENDING)} <= {
        cluster["id"] for cluster in seeded["clusters"]}
    pushes = ClusterPush.objects.filter(allocation__in=mine)
    assert pushes.count() >= 4 and not pushes.exclude(state=PushState.DONE).exists()


def test_a_merged_tally_keeps_every_latency_and_error() -> None:
    one, two = Tally(), Tally()
    one.note("get", 200, 200, 0.1)
    two.note("get", 500, 200, 0.2)
    two.note("submit", 201, 201, 0.3)
    one.merge(two)
    assert (one.latencies, one.errors, one.statuses) == ({"get": [0.1], "submit": [0.3]}, {"get": 1}, {"get": [500]})


@pytest.mark.parametrize(("argv", "named"), [
    (["--nodes", "0"], "--nodes"),
    (["--seconds", "-1"], "--seconds"),
    (["--approval-rate", "0"], "--approval-rate"),
    (["--departments", "10", "--projects", "5"], "--projects"),
    (["--departments", "10", "--projects", "10", "--users", "15"], "--users"),
    (["--clusters", "1", "--departments", "100", "--projects", "100", "--users", "200", "--nodes", "50"], "--nodes"),
])  # fmt: skip
def test_a_bad_size_exits_with_a_message_naming_its_option(argv: list[str], named: str, capsys: Any) -> None:
    with pytest.raises(SystemExit) as exited:
        scale.options_checked(argv)
    assert exited.value.code == 2
    assert named in capsys.readouterr().err


def test_quick_sizes_are_valid_and_the_full_size_is_the_issues() -> None:
    quick, full = scale.options_checked(["--quick"]), scale.options_checked([])
    assert (quick.clusters, quick.nodes, quick.clients) == (3, 100, 8)
    assert (full.clusters, full.nodes, full.departments, full.projects, full.users, full.clients, full.web, full.workers) == (
        10, 2500, 500, 5000, 20000, 16, 4, 4)


def _phase(elapsed: float, **latencies: list[float]) -> PhaseResult:
    return PhaseResult(elapsed=elapsed, tallies=[Tally(latencies=dict(latencies))])


def test_each_target_gets_one_line_met_or_not_from_the_figures_of_its_phase() -> None:
    phases = {
        "get": _phase(1.0, get=[0.01] * 100),  # 100/s, p99 10 ms
        "submit": _phase(1.0, submit=[0.02] * 60),  # 0.6 of the GET's, p99 2x
        "approve": _phase(1.0, approve=[0.5] * 45),  # 45/s, p99 0.5 s
        "paced": _phase(1.0, submit=[0.1] * 20, approve=[0.2] * 20),  # 20 approvals/s
        "mix": _phase(1.0, get=[0.01] * 10, month=[0.03] * 10, feedback=[0.2] * 10),
    }
    # the slowest of 200 pushes is above the p99
    lines = target_lines(phases, {"lags": [1.0] * 199 + [6.0], "api_server_lags": [], "not_done": 0})
    assert [line.rsplit(": ", 1)[1] for line in lines] == ["MET", "MET", "MET", "NOT MET", "NOT MET"]
    cpu = {name: Cpu(web=1.0, database=0.5, workers=2.0) for name in phases}
    assert "40 approvals/s" in "\n".join(cpu_lines(phases, cpu))
