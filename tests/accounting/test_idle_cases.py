"""Idle grants end to end on the database (SQLite and PostgreSQL): the periodic evaluation opens,
warns, clears and acts on cases from the utilisation rows; owners keep, admins exempt, either
releases; every move is audited; a case follows its grant's visibility; a keep racing the
evaluation's reclaim on PostgreSQL leaves exactly one of them."""

from __future__ import annotations

import datetime
from typing import Any

import pytest
from django.utils import timezone

from accounting.idle.cases import idle_case_exempt, idle_case_keep, idle_case_release
from accounting.idle.evaluation import idle_cases_evaluate
from accounting.idle_models import IdleAction, IdleCase, IdlePolicy, IdleState
from allocations.grants import idle_ladder as ladder
from allocations.grants.services import allocation_release
from allocations.models import Allocation, AllocationState
from audit.models import AuditEvent
from kernel.errors import ApplicationError, FourEyes, NotAllowed
from tests.conftest import World, requires_postgres
from tests.telemetry.usage_history import FIVE, fill, grant
from tests.threads import all_at_once

HOUR = datetime.timedelta(hours=1)
POSTGRES: pytest.MarkDecorator = requires_postgres()


def moment() -> datetime.datetime:
    """Half a minute into the current 5-minute bucket: the newest complete one ended just before."""
    return ladder.bucket_floor(timezone.now()) + datetime.timedelta(seconds=30)


def active_grant(world: World, *, since: datetime.datetime, project: str = "llm", **kwargs: Any) -> Allocation:
    allocation = grant(world, since=since, project=project, **kwargs)
    Allocation.objects.filter(pk=allocation.pk).update(state=AllocationState.ACTIVE)
    allocation.refresh_from_db()
    return allocation


def policy(**fields: Any) -> IdlePolicy:
    values: dict[str, Any] = {"name": "default", "window_minutes": 60, "grace_minutes": 30, "action": IdleAction.RECLAIM}
    return IdlePolicy.objects.create(**{**values, **fields})


def actions_of(case: IdleCase) -> list[str]:
    return list(AuditEvent.objects.filter(target_type="accounting.idlecase", target_id=str(case.pk))
                .order_by("seq").values_list("action", flat=True))  # fmt: skip


def busy_then_idle(allocation: Allocation, *, now: datetime.datetime, idle: datetime.timedelta) -> None:
    """Busy until ``idle`` before the newest complete bucket's end, idle since."""
    end = ladder.last_complete_bucket(now) + FIVE
    fill(allocation, start=end - idle - 2 * HOUR, end=end - idle, activity=0.7)
    fill(allocation, start=end - idle, end=end, activity=0.01)


@pytest.mark.django_db
def test_an_idle_grant_is_observed_then_warned_then_reclaimed_through_the_reclaim_path(world: World) -> None:
    now = moment()
    held = active_grant(world, since=now - 4 * HOUR)
    policy(window_minutes=60, grace_minutes=30)
    busy_then_idle(held, now=now, idle=35 * 60 * datetime.timedelta(seconds=1))

    idle_cases_evaluate(now=now)
    case = IdleCase.objects.get(allocation=held)
    assert case.state == IdleState.OBSERVING and case.idle_minutes == 35

    end = ladder.last_complete_bucket(now) + FIVE
    fill(held, start=end, end=end + 25 * datetime.timedelta(minutes=1), activity=0.02)  # 60 known idle minutes
    later = now + 25 * datetime.timedelta(minutes=1)
    idle_cases_evaluate(now=later)
    case.refresh_from_db()
    assert case.state == IdleState.WARNED and case.warned_at == later
    assert case.action_due_at == later + datetime.timedelta(minutes=30)
    assert case.evidence["policy"]["window_minutes"] == 60 and case.evidence["idle_minutes"] == 60

    fill(held, start=end + 25 * datetime.timedelta(minutes=1), end=end + 55 * datetime.timedelta(minutes=1), activity=0.0)
    idle_cases_evaluate(now=later + datetime.timedelta(minutes=30))
    case.refresh_from_db()
    held.refresh_from_db()
    assert case.state == IdleState.RECLAIMED
    assert held.state == AllocationState.RECLAIMING  # gpu-standard's notice: it runs 15 more minutes
    assert case.closed_at is not None
    assert held.reclaim_deadline == case.closed_at + datetime.timedelta(minutes=world.standard.notice)
    assert f"idle case #{case.pk}" in held.reclaim_reason
    assert actions_of(case) == ["idle_case.opened", "idle_case.warned", "idle_case.reclaimed"]
    reclaiming = AuditEvent.objects.get(action="allocation.reclaiming", target_id=str(held.pk))
    assert reclaiming.details["why"] == "idle" and reclaiming.details["idle_case"] == case.pk
    assert reclaiming.department_id == world.nlp.pk


@pytest.mark.django_db
def test_a_preemptible_grant_is_reclaimed_at_once_and_its_bookings_freed(world: World) -> None:
    now = moment()
    held = active_grant(world, since=now - 4 * HOUR)
    world.preemptible.preemptible = True  # no notice
    world.preemptible.save()
    Allocation.objects.filter(pk=held.pk).update(priority_class=world.preemptible)
    policy(window_minutes=15, grace_minutes=5)
    busy_then_idle(held, now=now - 5 * FIVE, idle=datetime.timedelta(minutes=15))
    idle_cases_evaluate(now=now - 5 * FIVE)
    fill(held, start=ladder.last_complete_bucket(now - 5 * FIVE) + FIVE, end=ladder.last_complete_bucket(now) + FIVE,
         activity=0.0)  # fmt: skip
    idle_cases_evaluate(now=now)
    held.refresh_from_db()
    assert held.state == AllocationState.RECLAIMED
    assert not held.reservations.filter(released_at__isnull=True).exists()


@pytest.mark.django_db
def test_a_notify_policy_warns_and_takes_nothing(world: World) -> None:
    now = moment()
    held = active_grant(world, since=now - 6 * HOUR)
    policy(action=IdleAction.NOTIFY, window_minutes=30, grace_minutes=10)
    busy_then_idle(held, now=now, idle=3 * HOUR)
    idle_cases_evaluate(now=now)
    idle_cases_evaluate(now=now + HOUR)
    held.refresh_from_db()
    case = IdleCase.objects.get(allocation=held)
    assert case.state == IdleState.WARNED and held.state == AllocationState.ACTIVE


@pytest.mark.django_db
def test_a_busy_bucket_clears_the_case_and_unknown_data_never_reclaims(world: World) -> None:
    now = moment()
    cleared = active_grant(world, since=now - 6 * HOUR)
    blind = active_grant(world, since=now - 6 * HOUR)
    policy(window_minutes=30, grace_minutes=10)
    for held in (cleared, blind):
        busy_then_idle(held, now=now, idle=HOUR)
    idle_cases_evaluate(now=now)
    assert set(IdleCase.objects.values_list("state", flat=True)) == {IdleState.WARNED}

    end = ladder.last_complete_bucket(now) + FIVE
    fill(cleared, start=end, end=end + 3 * FIVE, activity=0.8)
    fill(blind, start=end, end=end + 12 * FIVE, activity=None)  # the exporter went quiet: unknown
    idle_cases_evaluate(now=now + 12 * FIVE)
    assert IdleCase.objects.get(allocation=cleared).state == IdleState.CLEARED
    blind_case = IdleCase.objects.get(allocation=blind)
    assert blind_case.state == IdleState.WARNED  # the deadline passed, but nothing known since the warning
    blind.refresh_from_db()
    assert blind.state == AllocationState.ACTIVE
    assert blind_case.evidence["unknown_buckets"] >= 12


@pytest.mark.django_db
def test_owners_keep_a_limited_number_of_times_and_the_keep_holds_the_grant_off(world: World) -> None:
    now = moment()
    held = active_grant(world, since=now - 6 * HOUR)
    policy(window_minutes=30, grace_minutes=10, max_keeps=1, keep_hours=1)
    busy_then_idle(held, now=now, idle=HOUR)
    idle_cases_evaluate(now=now)
    case = IdleCase.objects.get(allocation=held)

    with pytest.raises(ApplicationError) as blank:
        idle_case_keep(actor=world.users["nlp_member"], case_id=case.pk, reason="  ")
    assert blank.value.fields == {"reason": ["Say why, in a few words."]}
    with pytest.raises(NotAllowed):
        idle_case_keep(actor=world.users["auditor"], case_id=case.pk, reason="mine")
    kept = idle_case_keep(actor=world.users["nlp_member"], case_id=case.pk, reason="data loading overnight", now=now)
    assert kept.state == IdleState.KEPT and kept.rearm_at == now + HOUR
    assert actions_of(case)[-1] == "idle_case.kept"

    idle_cases_evaluate(now=now + 30 * datetime.timedelta(minutes=1))
    assert IdleCase.objects.filter(allocation=held).count() == 1  # held off: no new case

    end = ladder.last_complete_bucket(now) + FIVE
    fill(held, start=end, end=end + 2 * HOUR, activity=0.0)
    after = now + HOUR + 35 * datetime.timedelta(minutes=1)
    idle_cases_evaluate(now=after)
    second = IdleCase.objects.get(allocation=held, state__in=[IdleState.OBSERVING, IdleState.WARNED])
    assert second.idle_since >= kept.rearm_at - FIVE  # counted from the keep's end, not before
    with pytest.raises(ApplicationError) as exhausted:
        idle_case_keep(actor=world.users["nlp_member"], case_id=second.pk, reason="again", now=after)
    assert exhausted.value.code == "keeps_exhausted"
    assert f"grant #{held.pk} was kept 1 time in the last 7 days" in exhausted.value.message  # never "1 times"


@pytest.mark.django_db
def test_admins_exempt_until_a_date_but_never_their_own_grant(world: World) -> None:
    now = moment()
    theirs = active_grant(world, since=now - 6 * HOUR)
    policy(window_minutes=30, grace_minutes=10)
    busy_then_idle(theirs, now=now, idle=HOUR)
    idle_cases_evaluate(now=now)
    case = IdleCase.objects.get(allocation=theirs)
    with pytest.raises(NotAllowed):
        idle_case_exempt(actor=world.users["nlp_member"], case_id=case.pk, until=now + HOUR, reason="x")
    with pytest.raises(ApplicationError) as late:
        idle_case_exempt(actor=world.users["nlp_admin"], case_id=case.pk, until=now + datetime.timedelta(days=400),
                         reason="inference service")  # fmt: skip
    assert list(late.value.fields) == ["until"]
    Allocation.objects.filter(pk=theirs.pk).update(requested_by=world.users["nlp_admin"])
    with pytest.raises(FourEyes):
        idle_case_exempt(actor=world.users["nlp_admin"], case_id=case.pk, until=now + HOUR, reason="mine")
    exempted = idle_case_exempt(actor=world.users["platform"], case_id=case.pk, until=timezone.now() + 2 * HOUR,
                                reason="serves the demo")  # fmt: skip
    assert exempted.state == IdleState.EXEMPTED and exempted.decided_by == world.users["platform"]
    idle_cases_evaluate(now=now + HOUR)
    assert IdleCase.objects.filter(allocation=theirs).count() == 1


@pytest.mark.django_db
def test_release_ends_the_grant_and_the_case_and_a_grant_released_elsewhere_closes_its_case(world: World) -> None:
    now = moment()
    one = active_grant(world, since=now - 6 * HOUR)
    two = active_grant(world, since=now - 6 * HOUR)
    policy(window_minutes=30, grace_minutes=10)
    for held in (one, two):
        busy_then_idle(held, now=now, idle=HOUR)
    idle_cases_evaluate(now=now)
    first = IdleCase.objects.get(allocation=one)
    released = idle_case_release(actor=world.users["nlp_admin"], case_id=first.pk)
    one.refresh_from_db()
    assert released.state == IdleState.RELEASED and one.state == AllocationState.RELEASED
    with pytest.raises(ApplicationError) as again:
        idle_case_keep(actor=world.users["nlp_member"], case_id=first.pk, reason="too late")
    assert again.value.status == 409

    allocation_release(actor=world.users["nlp_member"], allocation_id=two.pk)
    outcome = idle_cases_evaluate(now=now + FIVE)
    assert outcome.moves["closed"] == 1
    assert IdleCase.objects.get(allocation=two).state == IdleState.RELEASED


@pytest.mark.django_db
def test_the_most_specific_policy_applies_and_a_retired_policy_closes_its_cases(world: World) -> None:
    now = moment()
    held = active_grant(world, since=now - 6 * HOUR)
    busy_then_idle(held, now=now, idle=40 * datetime.timedelta(minutes=1))
    everywhere = policy(name="everywhere", window_minutes=120)
    nlp = policy(name="nlp", department=world.nlp, window_minutes=30)
    policy(name="vision", department=world.vision, window_minutes=15)
    idle_cases_evaluate(now=now)
    case = IdleCase.objects.get(allocation=held)
    assert case.policy == nlp and case.state == IdleState.WARNED
    IdlePolicy.objects.filter(pk__in=[everywhere.pk, nlp.pk]).update(is_active=False)
    IdlePolicy.objects.filter(name="vision").update(is_active=False)
    idle_cases_evaluate(now=now + FIVE)
    case.refresh_from_db()
    assert case.state == IdleState.CLEARED and "no active idle policy" in case.reason.lower()


@POSTGRES
@pytest.mark.django_db(transaction=True)
def test_a_keep_racing_the_reclaim_leaves_exactly_one_of_them(world: World) -> None:
    now = moment()
    held = active_grant(world, since=now - 6 * HOUR)
    policy(window_minutes=30, grace_minutes=10)
    busy_then_idle(held, now=now - 4 * FIVE, idle=HOUR)
    idle_cases_evaluate(now=now - 4 * FIVE)
    case = IdleCase.objects.get(allocation=held)
    fill(held, start=ladder.last_complete_bucket(now - 4 * FIVE) + FIVE, end=ladder.last_complete_bucket(now) + FIVE,
         activity=0.0)  # fmt: skip

    def evaluate() -> str:
        return "evaluated: " + ",".join(sorted(idle_cases_evaluate(now=now).moves))

    def keep() -> str:
        try:
            idle_case_keep(actor=world.users["nlp_member"], case_id=case.pk, reason="still needed")
        except ApplicationError as error:
            return f"keep refused: {error.code}"
        return "kept"

    outcomes = all_at_once([evaluate, keep])
    case.refresh_from_db()
    held.refresh_from_db()
    assert not [outcome for outcome in outcomes if outcome.startswith("error")], outcomes
    if case.state == IdleState.KEPT:
        assert held.state == AllocationState.ACTIVE and outcomes["kept"] == 1
    else:
        assert case.state == IdleState.RECLAIMED and held.state == AllocationState.RECLAIMING
        assert outcomes["keep refused: transition_not_allowed"] == 1
    assert AuditEvent.objects.filter(target_id=str(case.pk), action__in=["idle_case.kept", "idle_case.reclaimed"]).count() == 1

