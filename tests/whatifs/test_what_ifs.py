"""What-ifs: who may ask for what, the fields a bad proposal is refused by, the comparison a run
computes on a small history, its audit events, and the API over HTTP."""

from __future__ import annotations

import datetime
import json
from typing import Any

import pytest
from django.http import Http404
from django.utils import timezone

from audit.models import AuditEvent
from kernel.errors import FieldError, NotAllowed
from tests.conftest import World
from tests.whatifs.history import over_nlp_limit
from whatifs.compare import Demand, comparison_run
from whatifs.models import WhatIf, WhatIfState
from whatifs.selectors import what_if_get, what_if_list
from whatifs.services import what_if_create, what_if_run
from whatifs.sources import history_workload, inventory_nodes, live_policy

pytestmark = pytest.mark.django_db

RAISE_NLP = [{"kind": "quota", "department": "nlp", "limit_delta": 4}]


def ask(world: World, persona: str, changes: Any = None, **kwargs: Any) -> WhatIf:
    kwargs.setdefault("history_days", 7)
    return what_if_create(actor=world.users[persona], changes=RAISE_NLP if changes is None else changes, **kwargs)


def refused_field(world: World, persona: str, changes: Any, **kwargs: Any) -> str:
    with pytest.raises(FieldError) as caught:
        ask(world, persona, changes, **kwargs)
    return next(iter(caught.value.fields))


@pytest.mark.parametrize(("changes", "field"), [
    ([], "changes"),
    ([{"kind": "magic"}], "changes[0].kind"),
    ([{"kind": "quota", "department": "nlp", "limit": -1}], "changes[0].limit"),
    ([{"kind": "quota", "department": "nlp"}], "changes[0].limit"),
    ([RAISE_NLP[0], {"kind": "quota", "department": "nlp", "flavor": "h100", "limit": 2}], "changes[1].flavor"),
    ([{"kind": "quota", "department": "nlp", "limit_delta": -11}], "changes[0].limit_delta"),
    ([{"kind": "quota", "quota": 999999, "limit": 3}], "changes[0].quota"),
    ([{"kind": "quota", "department": "nlp", "limit": 3, "colour": "red"}], "changes[0].colour"),
    ([{"kind": "priority_class", "name": "gpu-standard", "oversubscription_factor": "0.5"}],
     "changes[0].oversubscription_factor"),
    ([{"kind": "priority_class", "name": "gpu-gold", "notice_minutes": 5}], "changes[0].name"),
    ([{"kind": "window", "department": "nlp", "limit_delta": 4, "begins_at": "2026-03-01T00:00:00Z"}],
     "changes[0].ends_at"),
    ([{"kind": "idle_policy", "threshold": 2, "window_minutes": 60, "action": "warn"}], "changes[0].threshold"),
])
def test_a_bad_proposal_is_refused_naming_its_field(world: World, changes: Any, field: str) -> None:
    assert refused_field(world, "platform", changes) == field


def test_the_workload_is_one_source_history_or_a_file_checked_line_by_line(world: World) -> None:
    assert refused_field(world, "platform", RAISE_NLP, history_days=None) == "history_days"
    assert refused_field(world, "platform", RAISE_NLP, history_days=None, workload="{}\n") == "workload"
    line = {"submit_at": 0, "department": "nlp", "project": "p", "flavor": "a100", "quantity": 1, "runtime_s": 60,
            "requested_s": 30, "priority_class": "gpu-standard", "busy": 0.5}
    with pytest.raises(FieldError, match="workload:1: requested_s"):
        ask(world, "platform", history_days=None, workload=json.dumps(line))
    made = ask(world, "platform", history_days=None, workload=json.dumps({**line, "requested_s": 60}))
    assert made.source == "file" and made.state == WhatIfState.QUEUED


def test_a_department_admin_changes_only_its_subtree_and_platform_admins_anything(world: World) -> None:
    assert ask(world, "nlp_admin").department == world.nlp  # their department by default
    speech = [{"kind": "quota", "department": "nlp-speech", "limit": 2}]
    assert refused_field(world, "nlp_admin", speech) == "changes[0].department"  # speech has no quota: named
    vision = [{"kind": "quota", "department": "vision", "limit_delta": 4}]
    assert refused_field(world, "nlp_admin", vision) == "changes[0].department"  # outside nlp
    classes = [{"kind": "priority_class", "name": "gpu-standard", "notice_minutes": 5}]
    assert refused_field(world, "nlp_admin", classes) == "changes[0].name"  # the platform's
    assert ask(world, "platform", [*vision, *classes]).department is None
    with pytest.raises(NotAllowed):
        ask(world, "nlp_member")
    with pytest.raises(NotAllowed):
        ask(world, "auditor", department_id=world.nlp.pk)  # reads nlp, administers nothing
    with pytest.raises(Http404):
        ask(world, "vision_admin", department_id=world.nlp.pk)
    with pytest.raises(Http404):
        ask(world, "nobody")


def test_an_outsider_cannot_see_a_departments_what_ifs(world: World) -> None:
    mine = ask(world, "nlp_admin")
    assert what_if_get(user=world.users["platform"], what_if_id=mine.pk) == mine
    assert list(what_if_list(user=world.users["vision_admin"])) == []
    for persona in ("vision_admin", "nlp_member", "auditor"):
        with pytest.raises(Http404):
            what_if_get(user=world.users[persona], what_if_id=mine.pk)


def _nlp(result: dict[str, Any]) -> dict[str, Any]:
    return next(row for row in result["departments"] if row["department"] == "nlp")


def test_raising_nlps_limit_lets_its_demand_over_the_old_limit_start_at_once(world: World) -> None:
    over_nlp_limit(world)
    made = ask(world, "nlp_admin")
    run = what_if_run(what_if_id=made.pk)
    assert run is not None and run.state == WhatIfState.DONE, run.error if run else None
    assert run.progress == 100 and run.started_at and run.finished_at
    nlp = _nlp(run.result)
    # 6 + 6 A100s against a limit of 10: the second request waits for the first's two days to end,
    # and the window (to now) ends before its own two days do: nlp holds less of it
    assert nlp["current"]["wait_p99_min"] == pytest.approx(47 * 60, abs=1)
    assert nlp["proposed"]["wait_p99_min"] == 0  # 14: both at once
    assert nlp["difference"]["wait_p99_min"] < 0
    assert nlp["proposed"]["allocation_pct"] > nlp["current"]["allocation_pct"]
    vision = next(row for row in run.result["departments"] if row["department"] == "vision")
    assert all(value == 0 for value in vision["difference"].values())  # nobody else is touched
    assert set(run.result["current"]["series"]) == {"nlp", "vision"}
    assert sum(run.result["proposed"]["waits"]["nlp"]) == nlp["proposed"]["requests"] == 2
    assert what_if_run(what_if_id=made.pk) is None  # runs once


def test_lowering_nlps_limit_makes_it_wait_where_it_did_not(world: World) -> None:
    over_nlp_limit(world)
    made = ask(world, "platform", [{"kind": "quota", "department": "nlp", "limit": 6}])
    run = what_if_run(what_if_id=made.pk)
    assert run is not None
    nlp = _nlp(run.result)
    assert nlp["proposed"]["wait_p50_min"] >= nlp["current"]["wait_p50_min"]
    assert nlp["proposed"]["allocation_pct"] <= nlp["current"]["allocation_pct"]


def test_every_run_is_audited_with_its_inputs_and_a_failure_says_why(world: World) -> None:
    over_nlp_limit(world)
    made = ask(world, "nlp_admin", title="raise nlp")
    what_if_run(what_if_id=made.pk)
    events = list(AuditEvent.objects.filter(target_type="whatifs.whatif", target_id=str(made.pk)).order_by("seq"))
    assert [event.action for event in events] == ["what_if.requested", "what_if.started", "what_if.finished"]
    assert events[0].details["changes"] == RAISE_NLP and events[0].details["history_days"] == 7
    assert events[0].actor_username == "nlp_admin" and events[0].department_id == world.nlp.pk
    assert events[2].details["differences"]["nlp"]["wait_p99_min"] < 0
    empty = ask(world, "platform", history_days=1)  # nothing asked for in the last day
    failed = what_if_run(what_if_id=empty.pk)
    assert failed is not None and failed.state == WhatIfState.FAILED and "no request" in failed.error
    assert AuditEvent.objects.filter(target_id=str(empty.pk), action="what_if.failed").exists()


def test_the_api_answers_202_with_a_location_and_then_the_comparison(world: World,
                                                                       django_capture_on_commit_callbacks: Any) -> None:
    over_nlp_limit(world)
    client = world.client("nlp_admin")
    bad = client.post("/api/v1/what-ifs/", {"changes": [{"kind": "quota", "department": "nlp", "limit": "x"}],
                                            "history_days": 7}, format="json")
    assert bad.status_code == 400 and "changes[0].limit" in json.dumps(bad.json())
    with django_capture_on_commit_callbacks(execute=True):
        answer = client.post("/api/v1/what-ifs/", {"changes": RAISE_NLP, "history_days": 7}, format="json")
    assert answer.status_code == 202, answer.content
    location = answer["Location"]
    assert location == f"/api/v1/what-ifs/{answer.json()['id']}/"
    shown = client.get(location).json()
    assert shown["state"] == "done" and shown["progress"] == 100
    assert _nlp(shown["result"])["difference"]["wait_p99_min"] < 0
    listed = client.get("/api/v1/what-ifs/").json()["results"]
    assert [row["id"] for row in listed] == [shown["id"]] and "result" not in listed[0]
    assert world.client("vision_admin").get(location).status_code == 404
    assert world.client("nlp_member").post("/api/v1/what-ifs/", {"changes": RAISE_NLP, "history_days": 7},
                                           format="json").status_code == 403


def test_an_uploaded_workload_is_replayed_with_every_kind_of_change(world: World) -> None:
    lines = [{"submit_at": 60 * index, "department": "nlp", "project": "llm", "flavor": "a100", "quantity": 6,
              "runtime_s": 7200, "requested_s": 7200, "priority_class": "gpu-standard", "busy": 0.5} for index in range(2)]
    window = {"kind": "window", "department": "nlp", "limit_delta": 4, "begins_at": "2026-03-01T00:00:00Z",
              "ends_at": "2026-03-03T00:00:00Z"}
    idle = {"kind": "idle_policy", "threshold": 0.1, "window_minutes": 60, "action": "warn", "department": "nlp"}
    a100s = {"kind": "quota", "department": "nlp", "flavor": "a100", "limit_delta": 4}  # its 8 A100s too
    made = ask(world, "nlp_admin", [*RAISE_NLP, window, idle, a100s], history_days=None,
               workload="\n".join(json.dumps(line) for line in lines))
    run = what_if_run(what_if_id=made.pk)
    assert run is not None and run.state == WhatIfState.DONE, run.error if run else None
    assert "not_replayed" not in run.result  # every kind is replayed
    nlp = _nlp(run.result)
    assert nlp["current"]["wait_p99_min"] == pytest.approx(119, abs=1)  # the second waits for the first's 2 h
    assert nlp["proposed"]["wait_p99_min"] == 0
    # its limit raised alone, its quota of A100s (8) still holds the second back, as the portal would
    alone = what_if_run(what_if_id=ask(world, "nlp_admin", RAISE_NLP, history_days=None,
                                       workload="\n".join(json.dumps(line) for line in lines)).pk)
    assert alone is not None and _nlp(alone.result)["proposed"]["wait_p99_min"] == pytest.approx(119, abs=1)


BOOKED_AHEAD = [
    {"submit_at": 0, "department": "nlp", "project": "llm", "flavor": "a100", "quantity": 1, "runtime_s": 600,
     "requested_s": 600, "priority_class": "gpu-standard", "busy": 0.5},
    {"submit_at": 60, "starts_at": 3600, "department": "nlp", "project": "llm", "flavor": "a100", "quantity": 1,
     "runtime_s": 600, "requested_s": 600, "priority_class": "gpu-standard", "busy": 0.5},
    {"submit_at": 120, "starts_at": 120, "department": "nlp", "project": "llm", "flavor": "a100", "quantity": 1,
     "runtime_s": 600, "requested_s": 600, "priority_class": "gpu-standard", "busy": 0.5},
]
"""Three requests, one of them asking for a start an hour after its submission (the third asks for
its own submission's instant: not ahead)."""


def test_the_result_counts_the_requests_booked_ahead_which_both_sides_decide_at_their_submission(world: World) -> None:
    made = ask(world, "nlp_admin", history_days=None, workload="\n".join(json.dumps(line) for line in BOOKED_AHEAD))
    run = what_if_run(what_if_id=made.pk)
    assert run is not None and run.state == WhatIfState.DONE, run.error if run else None
    assert run.result["requests"] == 3 and run.result["booked_ahead"] == 1
    over_nlp_limit(world)  # the portal's own history: requests starting when they were made
    history = what_if_run(what_if_id=ask(world, "nlp_admin").pk)
    assert history is not None and history.result["booked_ahead"] == 0


def test_progress_is_reported_while_the_two_replays_run(world: World) -> None:
    over_nlp_limit(world)
    seen: list[int] = []
    policy = live_policy()
    comparison_run(Demand(history_workload(days=7, now=timezone.now()), inventory_nodes()), policy, policy,
                   progress=seen.append)
    assert seen == sorted(seen) and seen[0] > 0 and seen[-1] < 100 and len(seen) == 3


def test_a_run_abandoned_by_a_killed_worker_runs_again_when_its_task_comes_back(world: World) -> None:
    over_nlp_limit(world)
    made = ask(world, "platform")
    WhatIf.objects.filter(pk=made.pk).update(state=WhatIfState.RUNNING, started_at=timezone.now())
    assert what_if_run(what_if_id=made.pk) is None  # running elsewhere
    WhatIf.objects.filter(pk=made.pk).update(started_at=timezone.now() - datetime.timedelta(hours=1))
    again = what_if_run(what_if_id=made.pk)
    assert again is not None and again.state == WhatIfState.DONE


def _window_at(start: datetime.datetime, begins_h: float, hours: float) -> dict[str, Any]:
    begins = start + datetime.timedelta(hours=begins_h)
    return {"kind": "window", "department": "nlp", "limit_delta": 4, "begins_at": begins.isoformat(),
            "ends_at": (begins + datetime.timedelta(hours=hours)).isoformat()}


def test_a_proposed_window_changes_the_replay_only_within_its_period(world: World) -> None:
    start = over_nlp_limit(world)  # nlp's second 6 A100s an hour after its first: 12 against its limit of 10
    during = what_if_run(what_if_id=ask(world, "platform", [_window_at(start, 0.5, 50)]).pk)
    before = what_if_run(what_if_id=ask(world, "platform", [_window_at(start, -30, 2)]).pk)
    ending = what_if_run(what_if_id=ask(world, "platform", [_window_at(start, 0.5, 2)]).pk)
    assert during is not None and before is not None and ending is not None
    assert during.state == before.state == ending.state == WhatIfState.DONE
    assert _nlp(during.result)["difference"]["wait_p99_min"] < 0  # the limit raised over the second's period: it starts
    assert _nlp(before.result)["difference"] == dict.fromkeys(_nlp(before.result)["difference"], 0)
    # a raise that ends within the second's 48 hours never lets it in: it is weighed over its period
    assert _nlp(ending.result)["difference"]["wait_p99_min"] == 0
    assert during.result["proposed"]["window_edges"] > during.result["current"]["window_edges"]
    series = during.result["current"]["series"]["nlp"]["held"], during.result["proposed"]["series"]["nlp"]["held"]
    assert during.history_until is not None
    replay_start = during.history_until - datetime.timedelta(days=7)
    first_step = int((start - replay_start).total_seconds() // during.result["series_step_s"])
    assert series[0][:first_step] == series[1][:first_step]  # nothing changes before the window


def test_a_proposed_idle_policy_that_reclaims_idle_grants_changes_reclaims(world: World) -> None:
    lines = [{"submit_at": 600 * index, "department": "nlp", "project": "llm", "flavor": "a100", "quantity": 2,
              "runtime_s": 36000, "requested_s": 36000, "priority_class": "gpu-standard", "busy": 0.01}
             for index in range(3)]
    lines.append({**lines[0], "submit_at": 72000, "department": "vision", "project": "seg", "busy": 0.9})  # measured to 20 h
    reclaim = {"kind": "idle_policy", "threshold": 0.05, "window_minutes": 60, "action": "reclaim", "department": "nlp"}
    made = ask(world, "platform", [reclaim], history_days=None, workload="\n".join(json.dumps(line) for line in lines))
    run = what_if_run(what_if_id=made.pk)
    assert run is not None and run.state == WhatIfState.DONE, run.error if run else None
    assert run.result["current"]["idle_reclaims"] == 0 and run.result["proposed"]["idle_reclaims"] == 3
    assert _nlp(run.result)["difference"]["work_gpu_h"] < 0  # taken back after their idle hour and grace
    assert refused_field(world, "platform", [{**reclaim, "department": "nowhere"}]) == "changes[0].department"


def test_a_proposed_window_that_reclaims_takes_back_what_the_lower_limit_leaves_beyond(world: World) -> None:
    """nlp's 6 A100s start at once; gpu-standard proposed to oversubscribe twice, so a window that
    lowers nlp's limit from 10 to 4 an hour later still lets them in over their period (6 ≤ 4 × 2).
    Under shrink policy ``reclaim`` the edge takes back what nlp holds beyond 4; under ``wait``
    nothing is taken. A shrink policy the portal has not is refused, naming the field."""
    now = timezone.now()
    line = {"submit_at": 0, "department": "nlp", "project": "llm", "flavor": "a100", "quantity": 6,
            "runtime_s": 4 * 3600, "requested_s": 4 * 3600, "priority_class": "gpu-standard", "busy": 0.5}
    factor = {"kind": "priority_class", "name": "gpu-standard", "oversubscription_factor": 2}

    def window(policy: str) -> dict[str, Any]:
        return {"kind": "window", "department": "nlp", "limit_delta": -6, "shrink_policy": policy,
                "begins_at": (now + datetime.timedelta(hours=1)).isoformat(),
                "ends_at": (now + datetime.timedelta(hours=3)).isoformat()}

    results = {}
    for policy in ("reclaim", "wait"):
        made = ask(world, "platform", [factor, window(policy)], history_days=None, workload=json.dumps(line))
        run = what_if_run(what_if_id=made.pk)
        assert run is not None and run.state == WhatIfState.DONE, run.error if run else None
        results[policy] = run.result
    assert results["reclaim"]["proposed"]["shrink_reclaims"] == 1 and results["reclaim"]["current"]["shrink_reclaims"] == 0
    assert _nlp(results["reclaim"])["difference"]["lost_gpu_h"] > 0  # the units taken back lost their run
    assert results["wait"]["proposed"]["shrink_reclaims"] == 0 and _nlp(results["wait"])["difference"]["lost_gpu_h"] == 0
    assert refused_field(world, "platform", [window("evict")]) == "changes[0].shrink_policy"


def test_a_proposed_window_on_a_classs_share_holds_that_classs_demand_only(world: World) -> None:
    """nlp's two preemptible requests of 2 A100s, ten minutes apart, both start today (4 of its 10,
    beyond which the class's factor 1.5 lets it go even further). A proposed window on the
    preemptible share of nlp's quota, 7 below its limit while the replay runs, caps that class at 3:
    the second waits for the first to end, and nlp's standard request beside them does not. A class
    the portal has not is refused naming the field. A share of nlp's quota of A100s (8 less 7: one
    A100) holds them back too."""
    now = timezone.now()
    line = {"submit_at": 0, "department": "nlp", "project": "llm", "flavor": "a100", "quantity": 2,
            "runtime_s": 2 * 3600, "requested_s": 2 * 3600, "priority_class": "gpu-preemptible", "busy": 0.5}
    lines = [line, {**line, "submit_at": 600}, {**line, "submit_at": 1200, "priority_class": "gpu-standard"}]
    share = {"kind": "window", "department": "nlp", "priority_class": "gpu-preemptible", "limit_delta": -7,
             "begins_at": (now - datetime.timedelta(hours=1)).isoformat(),
             "ends_at": (now + datetime.timedelta(hours=10)).isoformat()}
    made = ask(world, "platform", [share], history_days=None, workload="\n".join(json.dumps(row) for row in lines))
    assert made.changes == [share]
    run = what_if_run(what_if_id=made.pk)
    assert run is not None and run.state == WhatIfState.DONE, run.error if run else None
    waits = _nlp(run.result)
    assert waits["current"]["wait_p99_min"] == 0 and waits["proposed"]["wait_p99_min"] >= 100  # about two hours
    assert run.result["proposed"]["window_edges"] > run.result["current"]["window_edges"]
    assert refused_field(world, "platform", [{**share, "priority_class": "gpu-gold"}]) == "changes[0].priority_class"
    on_a100s = ask(world, "platform", [{**share, "flavor": "a100"}], history_days=None,
                   workload="\n".join(json.dumps(row) for row in lines))  # a share of nlp's quota of A100s
    run = what_if_run(what_if_id=on_a100s.pk)
    assert run is not None and _nlp(run.result)["proposed"]["wait_p99_min"] >= 100  # the same cap, on its A100s
