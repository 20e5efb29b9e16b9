"""The portal's rules over time in the replay (docs/twin.md, "Policies" and "The replay"): quota
windows through ``allocations.quotas.windows``, idle policies through the idle ladder, fair-share
ordering through the Fair Tree; and the policy file's sections for them, with errors naming the
entry and the key."""

from __future__ import annotations

import datetime
import json
from dataclasses import replace
from decimal import Decimal

import pytest

from tests.twin.fidelity.case import OVERSUBSCRIBING, fidelity_case
from tests.twin.test_formats import POLICY
from tests.twin.test_replay import NODES, RULES
from twin.errors import TwinInputError
from twin.policy import Department, FlavorQuota, Policy, PriorityClass, policy_read, policy_with_rules, policy_write
from twin.policy_rules import DEFAULT_START
from twin.replay.binding import binding_replay
from twin.replay.decisions import SHRINK, WINDOW, DecidingReplay, replay_decisions
from twin.replay.engine import Outcome, replay
from twin.replay.rules import FairShareClock, department_children, window_steps
from twin.workload import Job, Shape, jobs_read
from whatifs.compare import binding_of

pytestmark = pytest.mark.pure  # no database: runs beside the suite (tests/pure.py)

RULES_FILE = POLICY + """windows:
  - {department: nlp, kind: temporary, begins_at: 2026-03-03T00:00:00Z, ends_at: 2026-03-04T00:00:00Z, limit: 20}
  - {department: vision, kind: recurring, begins_at: 2026-03-02T20:00:00Z, rrule: FREQ=DAILY,
     timezone: Europe/Berlin, duration_minutes: 120, guaranteed_delta: -2}
idle_policies:
  - {name: idle-nlp, department: nlp, threshold: 0.1, window_minutes: 60, grace_minutes: 30, action: reclaim}
fair_share: {half_life_hours: 24}
"""


def jobs(*rows: dict[str, object]) -> list[Job]:
    base = {"project": "p", "num_gpu": 1, "quantity": 1, "requested_s": 99999, "priority_class": "std", "busy": 0.5}
    return jobs_read("".join(json.dumps({**base, **row}) + "\n" for row in rows))


def starts(outcome: Outcome) -> list[float | None]:
    return [record.first_start for record in outcome.records]


def test_windows_idle_policies_and_fair_share_read_and_write_back() -> None:
    policy = policy_read(RULES_FILE)
    assert [rule.department for rule in policy.windows] == ["nlp", "vision"]
    assert policy.windows[1].spec.duration == datetime.timedelta(hours=2)
    assert policy.idle_policies[0].rules.window_minutes == 60 and policy.fair_share_half_life_s == 86400
    assert policy.start == DEFAULT_START
    assert policy_read(policy_write(policy)) == policy


@pytest.mark.parametrize(("old", "new", "where", "key"), [
    ("limit: 20}", "}", "windows[0]", "limit"),
    ("department: nlp, kind: temporary", "department: ops, kind: temporary", "windows[0]", "department"),
    ("ends_at: 2026-03-04T00:00:00Z", "ends_at: 2026-03-02T00:00:00Z", "windows[0]", "ends_at"),
    ("rrule: FREQ=DAILY", "rrule: FREQ=SOMETIMES", "windows[1]", "rrule"),
    ("guaranteed_delta: -2}", "guaranteed_delta: -2, priority_class: gpu-gold}", "windows[1]", "priority_class"),
    ("action: reclaim", "action: shout", "idle_policies[0]", "action"),
    ("threshold: 0.1", "threshold: 2", "idle_policies[0]", "threshold"),
    ("window_minutes: 60", "window_minutes: 5", "idle_policies[0]", "window_minutes"),
    ("half_life_hours: 24", "half_life_hours: 0", "fair_share", "half_life_hours"),
])
def test_a_bad_rule_names_its_entry_and_key(old: str, new: str, where: str, key: str) -> None:
    with pytest.raises(TwinInputError) as caught:
        policy_read(RULES_FILE.replace(old, new), source="p.yaml")
    assert (caught.value.line, caught.value.field) == (where, key)


def test_a_start_off_a_five_minute_edge_is_refused() -> None:
    with pytest.raises(TwinInputError, match="start: must fall on a 5-minute edge"):
        policy_read("start: 2026-03-02T00:01:00Z\n" + RULES_FILE)


def test_a_recurring_window_gives_an_edge_at_each_begin_and_end_in_its_time_zone() -> None:
    policy = policy_read(RULES_FILE)
    steps = [(step.at / 3600, float(step.guaranteed)) for step in window_steps(policy, 3 * 86400.0) if step.department == 2]
    # 20:00 UTC begins_at is 21:00 in Berlin (winter): every day 21:00-23:00 local, 20:00-22:00 UTC
    assert steps == [(0, 6), (20, 4), (22, 6), (44, 4), (46, 6), (68, 4), (70, 6)]


def window_rules(**values: object) -> Policy:
    text = policy_write(RULES).replace("windows: []", "windows:\n  - " + json.dumps(
        {"department": "a", "kind": "temporary", "begins_at": "2026-03-02T00:00:50Z",
         "ends_at": "2026-03-02T00:02:30Z", **values}))
    return policy_read(text)


def test_a_window_that_lowers_a_limit_holds_a_request_until_it_fits() -> None:
    work = jobs({"submit_at": 0, "department": "a", "runtime_s": 100}, {"submit_at": 60, "department": "a", "runtime_s": 10})
    assert starts(replay(work, NODES, RULES, "borrow", horizon=200.0)) == [0.0, 60.0]  # borrows b's GPU
    lowered = replay(work, NODES, window_rules(limit=1), "borrow", horizon=200.0)
    assert starts(lowered) == [0.0, 100.0] and lowered.window_edges == 2
    raised = replay(work, NODES, window_rules(limit_delta=0), "borrow", horizon=200.0)
    assert starts(raised) == [0.0, 60.0]
    # static partitioning and the pool check no quota: no window changes them
    assert replay(work, NODES, window_rules(limit=1), "pool", horizon=200.0).window_edges == 0


def test_a_request_is_weighed_over_its_period_and_a_coming_shrink_holds_it_before_its_edge() -> None:
    """The window lowers a's limit to 1 from 50 s to 150 s. At 0, two GPUs for a period that ends at
    the edge start; the same two GPUs for a period that reaches into the shrink wait (admission
    weighs the whole period) until the shrink is over, when their period is clear of it."""
    lowered = window_rules(limit=1)
    before = jobs({"submit_at": 0, "department": "a", "quantity": 2, "runtime_s": 40, "requested_s": 50})
    assert starts(replay(before, NODES, lowered, "borrow", horizon=200.0)) == [0.0]
    into = jobs({"submit_at": 0, "department": "a", "quantity": 2, "runtime_s": 40, "requested_s": 60})
    for mode in ("borrow", "full"):
        assert starts(replay(into, NODES, lowered, mode, horizon=200.0)) == [150.0]
    assert starts(replay(into, NODES, RULES, "borrow", horizon=200.0)) == [0.0]  # without the window


def idle_rules(action: str) -> Policy:
    text = policy_write(RULES).replace("idle_policies: []", "idle_policies:\n  - " + json.dumps(
        {"name": "idle", "department": "a", "threshold": 0.05, "window_minutes": 15, "grace_minutes": 5, "action": action}))
    return policy_read(text)


def test_an_idle_grant_is_warned_then_reclaimed_after_its_notice_by_the_ladder() -> None:
    work = jobs({"submit_at": 0, "department": "a", "runtime_s": 36000, "busy": 0.0},
                {"submit_at": 0, "department": "a", "runtime_s": 36000, "busy": 0.5},
                {"submit_at": 0, "department": "b", "runtime_s": 100, "busy": 0.0})
    outcome = replay(work, NODES + [replace(NODES[0], name="n3")], idle_rules("reclaim"), "full", horizon=100.0)
    # buckets 0, 5, 10 min idle: warned at the 15-minute tick, acted at 20 (grace 5), gone after the 60 s notice
    assert [record.finish for record in outcome.records] == [1260.0, 36000.0, 100.0]
    assert (outcome.idle_warnings, outcome.idle_reclaims) == (1, 1)  # b has no idle policy; the busy grant is not idle
    assert [record.restarts for record in outcome.records] == [0, 0, 0]  # not queued again
    notified = replay(work, NODES + [replace(NODES[0], name="n3")], idle_rules("notify"), "full", horizon=100.0)
    assert ([record.finish for record in notified.records], notified.idle_warnings, notified.idle_reclaims) == (
        [36000.0, 36000.0, 100.0], 1, 0)
    borrow = replay(work, NODES + [replace(NODES[0], name="n3")], idle_rules("reclaim"), "borrow", horizon=100.0)
    assert borrow.idle_reclaims == 0  # idle policies are the full policy's


def test_fair_share_tries_the_least_served_department_first() -> None:
    nobody = Policy((Department("a", Decimal(0), Decimal(2)), Department("b", Decimal(0), Decimal(2))), RULES.classes)
    work = jobs({"submit_at": 0, "department": "a", "runtime_s": 1000}, {"submit_at": 0, "department": "a", "runtime_s": 2000},
                {"submit_at": 10, "department": "a", "runtime_s": 100}, {"submit_at": 20, "department": "b", "runtime_s": 100})
    assert starts(replay(work, NODES, nobody, "full", horizon=100.0)) == [0.0, 0.0, 1000.0, 1100.0]  # submission order
    fair = replace(nobody, fair_share_half_life_s=3600.0)
    assert starts(replay(work, NODES, fair, "full", horizon=100.0)) == [0.0, 0.0, 1100.0, 1000.0]  # b used nothing


def test_fair_share_ranks_a_team_inside_its_department_as_the_portal_ranks_it() -> None:
    """nlp's team asr held four GPUs for an hour, nlp's own projects none, vision one. Fair Tree ranks
    the top's accounts first: nlp's subtree used more than vision, so vision comes before nlp's own
    projects (ranked as siblings, nlp's own projects, having used nothing, would come first), and
    within nlp its own projects before asr: the portal's tree (``department_forest``)."""
    policy = replace(Policy((Department("nlp", Decimal(0), Decimal(8)), Department("vision", Decimal(0), Decimal(8)),
                             Department("asr", Decimal(0), Decimal(8), 1, "nlp")), RULES.classes),
                     fair_share_half_life_s=3600.0)
    clock = FairShareClock(policy, 3600.0)
    assert department_children(policy) == {None: [1, 2], 1: [3]}
    clock.advance(3600.0, {1: 0.0, 2: 1.0, 3: 4.0})  # GPU-equivalents held through the hour
    factors = clock.factors()
    assert factors[2] > factors[1] > factors[3]
    assert (factors[2], factors[1], factors[3]) == (1.0, 2 / 3, 1 / 3)  # three leaves: vision, nlp's own, asr


def test_rules_over_time_lay_over_a_policy_and_nothing_else_may() -> None:
    ruled = policy_with_rules(RULES, "fair_share: {half_life_hours: 2}\nwindows:\n  - {department: b, "
                                     "begins_at: 2026-03-02T01:00:00Z, ends_at: 2026-03-02T02:00:00Z, limit: 1}\n")
    assert ruled.departments == RULES.departments and ruled.fair_share_half_life_s == 7200
    assert [rule.department for rule in ruled.windows] == ["b"]
    with pytest.raises(TwinInputError, match="rules.yaml:departments: \\(section\\): only start, windows"):
        policy_with_rules(RULES, "departments: []\n", source="rules.yaml")
    with pytest.raises(TwinInputError, match="windows\\[0\\]: department: no department 'z'"):
        policy_with_rules(RULES, "windows:\n  - {department: z, begins_at: 2026-03-02T01:00:00Z, "
                                 "ends_at: 2026-03-02T02:00:00Z, limit: 1}\n")


OVER = PriorityClass("over", 50, False, Decimal(2), 60.0)  # checked against twice the limit


def shrink_rules(shrink_policy: str) -> Policy:
    """a's limit lowered from 2 to 1 from 50 s to 150 s; a's class ``over`` oversubscribes twice,
    so a may hold 2 GPUs across the shrink (the portal's rule: 2 ≤ 1 × 2)."""
    policy = replace(RULES, departments=(Department("a", Decimal(1), Decimal(2)), Department("b", Decimal(1), Decimal(4))),
                     classes={**RULES.classes, "over": OVER})
    text = policy_write(policy).replace("windows: []", "windows:\n  - " + json.dumps(
        {"department": "a", "kind": "temporary", "begins_at": "2026-03-02T00:00:50Z",
         "ends_at": "2026-03-02T00:02:30Z", "limit": 1, "shrink_policy": shrink_policy}))
    return policy_read(text)


def test_a_shrink_that_reclaims_takes_back_the_newest_grant_beyond_the_lower_limit() -> None:
    """At the edge (50 s) a holds 2 against a limit of 1: under ``reclaim`` its newest grant goes
    after its class's 60 s notice (its unit stays on its GPU until then: b's 3 GPUs, whose quota
    checks its class's factor lets pass at 60 s, start only at 110 s) and its run is queued again; under ``wait`` both run on, and b waits for the first to end."""
    work = jobs({"submit_at": 0, "department": "a", "runtime_s": 500, "requested_s": 1000, "priority_class": "over"},
                {"submit_at": 1, "department": "a", "runtime_s": 500, "requested_s": 1000, "priority_class": "over"},
                {"submit_at": 60, "department": "b", "quantity": 3, "runtime_s": 100, "priority_class": "over"})
    four = NODES + [replace(NODES[0], name="n3"), replace(NODES[0], name="n4")]
    reclaimed = replay(work, four, shrink_rules("reclaim"), "full", horizon=200.0)
    assert starts(reclaimed) == [0.0, 1.0, 500.0] and reclaimed.shrink_reclaims == 1
    assert [record.restarts for record in reclaimed.records] == [0, 1, 0]
    assert [record.finish for record in reclaimed.records] == [500.0, 610.0, 600.0]  # a's second ran again from 110 s
    assert [(run.record, run.start, run.end) for run in reclaimed.runs if run.lost] == [(1, 1.0, 110.0)]
    waited = replay(work, four, shrink_rules("wait"), "full", horizon=200.0)
    assert starts(waited) == [0.0, 1.0, 500.0] and waited.shrink_reclaims == 0
    assert [record.finish for record in waited.records] == [500.0, 501.0, 600.0]
    assert replay(work, four, shrink_rules("reclaim"), "borrow", horizon=200.0).shrink_reclaims == 1  # the portal's tick, whatever admission may reclaim


def test_a_shrink_policy_reads_writes_back_and_names_a_bad_value() -> None:
    policy = shrink_rules("reclaim")
    assert policy.windows[0].shrink_policy == "reclaim" and policy_read(policy_write(policy)) == policy
    assert shrink_rules("wait").windows[0].shrink_policy == "wait"
    with pytest.raises(TwinInputError) as caught:
        shrink_rules("evict")
    assert caught.value.field == "shrink_policy" and "wait, reclaim" in str(caught.value)


LOW = PriorityClass("low", 50, False, Decimal(1), 0.0)  # no notice: a reclaimed grant leaves at once


def share_rules(shrink_policy: str = "wait", **values: object) -> Policy:
    """a's guarantee 1 and limit 2 on 2 GPUs; a window on the share of class ``low`` of a's quota
    (limit 1 by default) from 50 s to 150 s."""
    policy = replace(RULES, classes={**RULES.classes, "low": LOW})
    text = policy_write(policy).replace("windows: []", "windows:\n  - " + json.dumps(
        {"department": "a", "priority_class": "low", "kind": "temporary", "begins_at": "2026-03-02T00:00:50Z",
         "ends_at": "2026-03-02T00:02:30Z", "shrink_policy": shrink_policy, **(values or {"limit": 1})}))
    return policy_read(text)


def test_a_class_share_window_reads_writes_back_and_steps_in_its_own_scope() -> None:
    policy = share_rules()
    rule = policy.windows[0]
    assert (rule.priority_class, rule.spec.priority_class_id) == ("low", 2)  # the policy's second class
    assert policy_read(policy_write(policy)) == policy
    assert [(step.at, step.priority_class, float(step.limit)) for step in window_steps(policy, 400.0)] == [
        (0.0, 2, 2.0), (50.0, 2, 1.0), (150.0, 2, 2.0)]  # the share: the department's limit outside the window


def test_a_class_share_holds_that_classs_requests_and_not_the_others() -> None:
    """From 50 s to 150 s ``low`` may hold 1 of a's 2 GPUs. The second ``low`` request (60 s,
    whose period meets the share) waits until the window is over; a ``std`` request at 70 s
    starts on the other GPU. Without the window the second ``low`` request starts at once."""
    work = jobs({"submit_at": 0, "department": "a", "runtime_s": 160, "priority_class": "low"},
                {"submit_at": 60, "department": "a", "runtime_s": 10, "priority_class": "low"},
                {"submit_at": 70, "department": "a", "runtime_s": 10})
    for mode in ("borrow", "full"):
        assert starts(replay(work, NODES, share_rules(), mode, horizon=300.0)) == [0.0, 150.0, 70.0]
        plain = replace(share_rules(), windows=())
        assert starts(replay(work, NODES, plain, mode, horizon=300.0)) == [0.0, 60.0, 70.0]
    # a request of the class whose period ends before the window is not held by it
    early = jobs({"submit_at": 0, "department": "a", "runtime_s": 40, "requested_s": 50, "priority_class": "low"},
                 {"submit_at": 0, "department": "a", "runtime_s": 40, "requested_s": 50, "priority_class": "low"})
    assert starts(replay(early, NODES, share_rules(), "borrow", horizon=300.0)) == [0.0, 0.0]


def test_a_class_share_is_weighed_over_the_whole_period_of_a_request_of_the_class() -> None:
    """A ``low`` request at 0 whose period meets a share of 0 waits until the window is over
    (150 s); the ``std`` one starts at once. The decision log's ``window`` lines name the share."""
    work = jobs({"submit_at": 0, "department": "a", "runtime_s": 100, "priority_class": "low"},
                {"submit_at": 0, "department": "a", "runtime_s": 100})
    assert starts(replay(work, NODES, share_rules(limit=0), "full", horizon=300.0)) == [150.0, 0.0]
    log, _ = replay_decisions(work, NODES, share_rules(limit=0), "full")
    assert [(d.at, d.share, d.quota and float(d.quota[2])) for d in log if d.kind == WINDOW] == [
        (50.0, "low", 0.0), (150.0, "low", 2.0)]


def test_a_class_share_that_shrinks_under_reclaim_takes_back_that_classs_newest_grant() -> None:
    """``low`` is checked against twice a limit (its factor) unless a window of its own sets the
    limit. From 50 s a window of the department lowers a's limit to 1 (``wait``) and one of the
    ``low`` share sets its guarantee (0) under ``reclaim``: the share's limit falls from 2 to 1 at
    50 s, so its edge takes back the newest of a's two ``low`` grants, admitted under the factor
    (a shrink ignores it), at once (no notice), and b's request, which arrives then, takes its
    GPU. Under ``wait`` b waits for a ``low`` grant to end."""
    policy = replace(RULES, classes={**RULES.classes, "low": replace(LOW, factor=Decimal(2))})
    department = {"department": "a", "kind": "temporary", "begins_at": "2026-03-02T00:00:50Z",
                  "ends_at": "2026-03-02T00:02:30Z"}
    work = jobs({"submit_at": 0, "department": "a", "runtime_s": 300, "priority_class": "low"},
                {"submit_at": 1, "department": "a", "runtime_s": 300, "priority_class": "low"},
                {"submit_at": 50, "department": "b", "runtime_s": 500})

    def shrinking(shrink_policy: str) -> Policy:
        rules = [{**department, "limit": 1}, {**department, "priority_class": "low", "guaranteed": 0,
                                              "shrink_policy": shrink_policy}]
        return policy_read(policy_write(policy).replace("windows: []", "windows:\n" + "".join(
            f"  - {json.dumps(rule)}\n" for rule in rules)))

    reclaimed = replay(work, NODES, shrinking("reclaim"), "borrow", horizon=400.0)
    assert reclaimed.shrink_reclaims == 1 and [record.restarts for record in reclaimed.records] == [0, 1, 0]
    assert starts(reclaimed) == [0.0, 1.0, 50.0] and [record.finish for record in reclaimed.records] == [300.0, 600.0, 550.0]
    waited = replay(work, NODES, shrinking("wait"), "borrow", horizon=400.0)
    assert waited.shrink_reclaims == 0 and starts(waited) == [0.0, 1.0, 300.0]


def flavor_rules() -> Policy:
    """a (guarantee 1, limit 2) may hold 1 unit of flavor ``one``; ``other`` has the same shape."""
    whole = Shape(1, 1000, frozenset({"X"}))
    return replace(RULES, flavors={"one": whole, "other": whole}, departments=(
        replace(RULES.departments[0], flavor_quotas=(FlavorQuota("one", Decimal(0), Decimal(1)),)), RULES.departments[1]))


def flavored(*rows: dict[str, object]) -> list[Job]:
    base = {"project": "p", "quantity": 1, "requested_s": 99999, "priority_class": "std", "busy": 0.5}
    return jobs_read("".join(json.dumps({**base, **row}) + "\n" for row in rows), flavors=flavor_rules().flavors)


def test_a_flavors_quota_holds_that_flavors_requests_and_not_the_others() -> None:
    """a's second ``one`` waits for its first to end (its flavor's quota: 1 unit); ``other``, of the
    same shape, starts beside it (a's own limit: 2). Without the flavor's quota both ``one`` start
    at once."""
    work = flavored({"submit_at": 0, "department": "a", "flavor": "one", "runtime_s": 100},
                    {"submit_at": 10, "department": "a", "flavor": "one", "runtime_s": 10},
                    {"submit_at": 20, "department": "a", "flavor": "other", "runtime_s": 10})
    for mode in ("borrow", "full"):
        assert starts(replay(work, NODES, flavor_rules(), mode, horizon=300.0)) == [0.0, 100.0, 20.0]
    plain = replace(flavor_rules(), departments=RULES.departments)
    assert starts(replay(work, NODES, plain, "borrow", horizon=300.0)) == [0.0, 10.0, 20.0]  # the second ends at 20
    _, binding = binding_replay(work, NODES, flavor_rules(), "borrow", horizon=300.0)
    assert binding.waiting == {"a": {("own", "a", "one"): 90.0}}  # a's quota of ``one`` held it back
    assert [(level.kind, level.flavor, level.gpu_h) for level in binding.levels("a")] == [
        ("own", "", 0.0), ("own", "one", 90 / 3600)]
    assert binding_of(binding, "a", 1.5)["words"] == (
        "a: waited 2 min at p95; a's quota of one bound 100 % of the GPU-hours waiting, a's own limit 0 %")


def test_a_flavors_quota_reads_writes_back_and_names_an_unknown_flavor() -> None:
    policy = flavor_rules()
    assert policy_read(policy_write(policy)) == policy
    text = policy_write(policy).replace("flavor_quotas:\n    one:", "flavor_quotas:\n    three:")
    with pytest.raises(TwinInputError) as caught:
        policy_read(text, source="p.yaml")
    assert (caught.value.line, caught.value.field) == ("departments[0]", "flavor_quotas.three")
    bad = policy_write(policy).replace("limit: 1.0\n", "limit: -1\n")
    with pytest.raises(TwinInputError) as caught:
        policy_read(bad, source="p.yaml")
    assert caught.value.field == "flavor_quotas.one.limit"


def test_a_window_on_a_flavors_quota_changes_that_quota_and_shrinks_in_it() -> None:
    """a's quota of ``one`` is 2 units, lowered to 1 from 50 s to 150 s under ``reclaim``. Two
    ``one`` grants of class ``over`` (checked against twice a limit) start at 0 over periods that
    meet the window (2 ≤ 1 × 2); at 50 s the edge takes the newer back (a shrink ignores the
    factor), and, without notice, it is queued and admitted again at once under the factor. The
    decision log's ``window`` lines name the flavor."""
    over = PriorityClass("over", 50, False, Decimal(2), 0.0)
    base = flavor_rules()
    policy = replace(base, classes={**base.classes, "over": over}, departments=(
        replace(base.departments[0], flavor_quotas=(FlavorQuota("one", Decimal(0), Decimal(2)),)), base.departments[1]))
    text = policy_write(policy).replace("windows: []", "windows:\n  - " + json.dumps(
        {"department": "a", "flavor": "one", "kind": "temporary", "begins_at": "2026-03-02T00:00:50Z",
         "ends_at": "2026-03-02T00:02:30Z", "limit": 1, "shrink_policy": "reclaim"}))
    policy = policy_read(text)
    assert policy.windows[0].flavor == "one" and policy_read(policy_write(policy)) == policy
    work = flavored({"submit_at": 0, "department": "a", "flavor": "one", "runtime_s": 300, "priority_class": "over"},
                    {"submit_at": 1, "department": "a", "flavor": "one", "runtime_s": 300, "priority_class": "over"})
    outcome = replay(work, NODES, policy, "full", horizon=400.0)
    assert outcome.shrink_reclaims == 1 and [record.restarts for record in outcome.records] == [0, 1]
    assert [record.finish for record in outcome.records] == [300.0, 350.0]
    log, _ = replay_decisions(work, NODES, policy, "full")
    assert [(d.at, d.flavor, d.quota and float(d.quota[2]), d.victims) for d in log if d.kind == WINDOW] == [
        (50.0, "one", 1.0, ((2, 1),)), (150.0, "one", 2.0, ())]
    with pytest.raises(TwinInputError) as caught:
        policy_read(text.replace('"flavor": "one"', '"flavor": "other"'), source="p.yaml")
    assert (caught.value.line, caught.value.field) == ("windows[0]", "flavor")  # a has no quota of ``other``


def test_a_shrink_that_a_leaving_grant_stands_in_the_way_of_waits_then_takes_it_back() -> None:
    """a borrows all 3 GPUs in one grant (class ``over3``: checked against 3 × its limit). At 10 s
    b asks 1 within its guarantee: a reclaim takes 1 of a's units (60 s notice). At 20 s a's limit
    drops to 1 under ``reclaim``; a's grant keeps 2 units, which may not be taken while its unit
    leaves: the shrink waits. At 70 s the unit has left and the shrink takes back one of the two
    (a ``shrink`` line of the decision log), which leaves after its notice, at 130 s."""
    over3 = PriorityClass("over3", 50, False, Decimal(3), 60.0)
    policy = replace(shrink_rules("reclaim"), departments=(Department("a", Decimal(0), Decimal(3)),
                                                            Department("b", Decimal(1), Decimal(3))),
                     classes={**RULES.classes, "over3": over3})
    policy = replace(policy, windows=(replace(policy.windows[0], spec=replace(
        policy.windows[0].spec, begins_at=policy.start + datetime.timedelta(seconds=20), limit=Decimal(1))),))
    work = jobs({"submit_at": 0, "department": "a", "quantity": 3, "runtime_s": 900, "requested_s": 1000,
                 "priority_class": "over3"},
                {"submit_at": 10, "department": "b", "runtime_s": 900})
    three = NODES + [replace(NODES[0], name="n3")]
    outcome = replay(work, three, policy, "full", horizon=200.0)
    assert outcome.reclaims == 1 and outcome.shrink_reclaims == 1
    assert [(run.record, run.start, run.end) for run in outcome.runs if run.lost] == [(0, 0.0, 70.0), (0, 0.0, 130.0)]
    log, _ = replay_decisions(work, three, policy, "full")
    assert [(d.at, d.kind, d.victims) for d in log if d.kind in (WINDOW, SHRINK)] == [
        (20.0, WINDOW, ()), (70.0, SHRINK, ((1, 1),)), (150.0, WINDOW, ())]


def test_a_request_the_pass_has_no_victim_search_left_for_writes_no_line() -> None:
    """The shrink case's first draw (40 lines on 2 nodes): at 78,536 s the pass has spent its 16
    victim searches before request 44. It waits untried, and the decision log says nothing of it
    (the portal is not asked); with searches enough, the same try reclaims. Its lines that ask a
    later start arrive at their start, as when this was found (``books_ahead`` off)."""
    case = fidelity_case(40, nodes=2, hours=18, windows=True, within=True, shrink_policy="reclaim",
                         factors={"gpu-standard": Decimal("1.5")}, seed=1)
    lines = {}
    for depth in (16, 10**6):
        replay_ = DecidingReplay(case.jobs, case.nodes, case.policy, "full")
        replay_.reclaim_depth, replay_.books_ahead = depth, False
        replay_.run()
        lines[depth] = [d.kind for d in replay_.log if d.at == 78536.0 and d.piece == 44]
    assert lines == {16: [], 10**6: ["reclaim"]}


def test_a_victim_without_notice_frees_its_room_for_the_rest_of_the_pass() -> None:
    """The first draw of the fidelity case of factors on several classes (60 lines on 3 nodes): at
    114,009 s a reclaim takes all three units of request 105, preemptible and so without notice,
    for one unit of request 146. They leave within the decision (as the portal's approval reclaims
    them), and request 151, refused for capacity earlier in the same pass, starts on the GPU one
    of them freed, as the portal places it; the pass does not remember its earlier refusal. Its
    lines that ask a later start arrive at their start, as when this was found (``books_ahead`` off)."""
    case = fidelity_case(60, nodes=3, hours=27, seed=1, factors=OVERSUBSCRIBING, limit_ratio=Decimal("1.2"))
    replay_ = DecidingReplay(case.jobs, case.nodes, case.policy, "full")
    replay_.books_ahead = False
    replay_.run()
    log = replay_.log
    instant = [(d.kind, d.piece, d.victims, tuple((u.node, u.gpus) for u in d.units))
               for d in log if d.at == 114009.0 and d.piece in (105, 146, 151)]
    assert ("reclaim", 146, ((105, 3), (143, 1)), (("node-00", (5,)),)) in instant
    assert instant[-1] == ("start", 151, (), (("node-02", (1,)),))
