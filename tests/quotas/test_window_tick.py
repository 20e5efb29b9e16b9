"""The tick applies each quota window edge once: its numbers before and after audited, a change
pushed to the clusters, a lower limit followed by the window's shrink policy (``wait`` takes
nothing, ``reclaim`` takes the grants beyond it with their notice); a late tick applies what it
missed in order; a window cancelled in force ends then; coming shrinks are announced once."""

from __future__ import annotations

import datetime
from decimal import Decimal
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from allocations.grants.reclaims import allocations_reclaim_due
from allocations.models import AllocationState
from allocations.models.windows import QuotaWindow, QuotaWindowEdge, ShrinkPolicy, WindowState
from allocations.tasks import allocations_timeline_task
from allocations.windows.tick import quota_window_shrinks_coming, quota_windows_tick
from audit.models import AuditEvent
from clusters.models import ClusterPush
from delivery.selectors import department_queues
from kernel.errors import QuotaExceeded
from tests.conftest import World
from tests.quotas.windowing import DAY, HOUR, approve, ask, audit_head, audit_since, granted, held, quota, window

pytestmark = pytest.mark.django_db(transaction=True)

MINUTE = datetime.timedelta(minutes=1)


def edges(target: QuotaWindow) -> list[tuple[str, str, str]]:
    return [(row.kind, row.before["limit"], row.after["limit"]) for row in QuotaWindowEdge.objects.filter(window=target)]


@pytest.fixture
def head() -> int:
    return audit_head()


def audited(action: str, since: int) -> list[AuditEvent]:
    return audit_since(since, action)


def cluster_pushes() -> int:
    return ClusterPush.objects.filter(project__isnull=True).count()


def test_a_festival_begins_and_ends_once_each_audited_with_its_numbers_and_pushed(world: World, head: int) -> None:
    now = timezone.now()
    festival = window(world, quota(world, "nlp"), begins_at=now - 5 * MINUTE, ends_at=now + HOUR, limit_delta="4")
    pushes = cluster_pushes()

    first = quota_windows_tick(now=now)

    assert [(edge.window_id, edge.kind, edge.before["limit"], edge.after["limit"]) for edge in first.applied] == [
        (festival.pk, "begin", "10", "14")
    ]
    assert first.applied[0].pushes == 1 and cluster_pushes() == pushes + 1
    assert quota_windows_tick(now=now).applied == []  # again: nothing
    assert quota_windows_tick(now=now + 10 * MINUTE).applied == []
    assert edges(festival) == [("begin", "10", "14")]

    last = quota_windows_tick(now=now + HOUR + MINUTE)
    assert [(edge.kind, edge.before["limit"], edge.after["limit"]) for edge in last.applied] == [("end", "14", "10")]
    assert edges(festival) == [("begin", "10", "14"), ("end", "14", "10")]
    assert cluster_pushes() == pushes + 2
    events = audited("quota_window.edge", head)
    assert [(event.before["limit"], event.after["limit"], event.details["kind"]) for event in events] == [
        ("10", "14", "begin"), ("14", "10", "end"),
    ]
    assert {(event.target_id, event.department_id, event.actor_username) for event in events} == {
        (str(festival.pk), world.nlp.pk, "")
    }
    assert events[0].after["limit_by"] == festival.pk and events[1].after["limit_by"] is None


def test_a_late_tick_applies_every_missed_edge_in_order_once_and_not_those_before_its_lookback(world: World) -> None:
    now = timezone.now().replace(second=0, microsecond=0)
    every_20 = window(world, quota(world, "nlp"), begins_at=now - 2 * HOUR, rrule="FREQ=MINUTELY;INTERVAL=20",
                      timezone="UTC", duration_minutes=10, limit="4")

    late = quota_windows_tick(now=now, lookback=HOUR)

    applied = [(edge.at, edge.kind) for edge in late.applied]
    expected = sorted({(now - HOUR + step * 10 * MINUTE, "begin" if step % 2 == 0 else "end") for step in range(1, 7)})
    assert applied == expected
    assert [(edge.before["limit"], edge.after["limit"]) for edge in late.applied][:2] == [("4", "10"), ("10", "4")]
    assert quota_windows_tick(now=now, lookback=3 * HOUR).applied[0].at == now - 2 * HOUR  # older: only when asked
    assert quota_windows_tick(now=now, lookback=3 * HOUR).applied == []
    assert QuotaWindowEdge.objects.filter(window=every_20).count() == 6 + 7


def test_a_shrink_with_wait_takes_nothing_and_admission_refuses_above_the_new_value(world: World) -> None:
    running = granted(world, quantity=6)
    now = timezone.now()
    window(world, quota(world, "nlp"), begins_at=now - MINUTE, ends_at=now + DAY, limit="4")

    [edge] = quota_windows_tick(now=now).applied

    assert (edge.after["limit"], edge.reclaimed) == ("4", ())
    running.refresh_from_db()
    assert running.state in (AllocationState.APPROVED, AllocationState.PROVISIONING, AllocationState.ACTIVE)
    with pytest.raises(QuotaExceeded) as refusal:
        approve(world, ask(world, quantity=1, length=HOUR))
    assert (refusal.value.details["limit"], refusal.value.details["in_use"]) == ("4", "6")


def test_a_shrink_with_reclaim_takes_the_lowest_priority_and_newest_with_their_notice_no_more_than_must_go(world: World, head: int) -> None:
    world.preemptible.preemptible = True  # reclaimed without notice
    world.preemptible.save(update_fields=["preemptible"])
    oldest = granted(world, quantity=3)
    cheap = granted(world, quantity=2, priority="preemptible")
    newest = granted(world, quantity=2)
    now = timezone.now()
    shrink = window(world, quota(world, "nlp"), begins_at=now - MINUTE, ends_at=now + DAY, limit="4",
                    shrink_policy=ShrinkPolicy.RECLAIM)

    [edge] = quota_windows_tick(now=now).applied

    assert edge.reclaimed == (cheap.pk, newest.pk)
    assert QuotaWindowEdge.objects.get(window=shrink).reclaimed == [cheap.pk, newest.pk]
    for row in (oldest, cheap, newest):
        row.refresh_from_db()
    # 3 must go: both units of the preemptible grant at once, then one of the newest's two (only
    # the part that must go), with its notice.
    assert (cheap.state, newest.reclaim_units) == (AllocationState.RECLAIMED, 1)
    assert oldest.state not in (AllocationState.RECLAIMING, AllocationState.RECLAIMED) and oldest.reclaim_units is None
    assert newest.reclaim_deadline == now + 15 * MINUTE and newest.reclaimed_for_id is None
    assert f"quota window #{shrink.pk}" in newest.reclaim_reason and "from 10 to 4" in newest.reclaim_reason
    assert newest.reclaim_reason.endswith("1 of its 2 units go.")
    [event] = [e for e in audited("allocation.reclaiming", head) if e.target_id == str(newest.pk)]
    assert (event.details["window"], event.details["for"], event.details["notice_minutes"]) == (shrink.pk, None, 15)
    assert held({world.nlp.pk, world.speech.pk}, now) == 4  # within the new limit once the notice runs out
    assert allocations_reclaim_due(now=now + 16 * MINUTE) == 1
    newest.refresh_from_db()
    assert newest.quantity == 1 and newest.reclaim_units is None
    assert quota_windows_tick(now=now + MINUTE).applied == []


def test_a_class_share_shrink_with_reclaim_takes_only_that_class(world: World) -> None:
    world.preemptible.preemptible = True
    world.preemptible.save(update_fields=["preemptible"])
    standard = granted(world, quantity=5)
    training = [granted(world, quantity=1, priority="preemptible", project="speech_project", persona="speech_member")
                for _ in range(3)]
    now = timezone.now()
    window(world, quota(world, "nlp"), begins_at=now - MINUTE, ends_at=now + HOUR, limit="1",
           priority_class=world.preemptible, shrink_policy=ShrinkPolicy.RECLAIM)

    [edge] = quota_windows_tick(now=now).applied

    assert edge.scope == "gpu-preemptible's share of GPU-equivalents"
    assert (edge.before["limit"], edge.after["limit"]) == ("10", "1")
    assert edge.reclaimed == (training[2].pk, training[1].pk)  # the newest first, down to the share
    standard.refresh_from_db()
    assert standard.state != AllocationState.RECLAIMING


def test_a_window_cancelled_in_force_ends_when_it_is_cancelled(world: World) -> None:
    now = timezone.now()
    festival = window(world, quota(world, "nlp"), begins_at=now - 5 * MINUTE, ends_at=now + DAY, limit_delta="4")
    quota_windows_tick(now=now)
    cancelled_at = now + 10 * MINUTE
    QuotaWindow.objects.filter(pk=festival.pk).update(state=WindowState.CANCELLED, decided_at=cancelled_at)

    [edge] = quota_windows_tick(now=now + 11 * MINUTE).applied

    assert (edge.at, edge.kind, edge.cancelled, edge.before["limit"], edge.after["limit"]) == (
        cancelled_at, "end", True, "14", "10")
    assert "ends (cancelled)" in edge.line()
    assert edge.line().startswith(f"{cancelled_at:%Y-%m-%d %H:%M} UTC window #{festival.pk} ")  # for people, not ISO
    assert quota_windows_tick(now=now + 12 * MINUTE).applied == []
    assert quota_windows_tick(now=now + DAY + MINUTE).applied == []  # its planned end never comes


def test_a_window_changing_a_guarantee_moves_the_volcano_queue_with_it(world: World) -> None:
    granted(world, quantity=2)
    now = timezone.now()
    flavored = quota(world, "nlp", "a100")
    [queue] = department_queues(cluster=world.cluster)
    assert dict(queue.guaranteed)["nvidia.com/gpu"] == 0
    window(world, flavored, begins_at=now - MINUTE, ends_at=now + HOUR, guaranteed="2")
    [queue] = department_queues(cluster=world.cluster)
    assert dict(queue.guaranteed)["nvidia.com/gpu"] == 2
    [edge] = quota_windows_tick(now=now).applied
    assert (edge.before["guaranteed"], edge.after["guaranteed"], edge.pushes) == ("0", "2", 1)


def test_coming_shrinks_name_the_grants_they_hit_and_their_owners_and_are_announced_once(world: World, head: int) -> None:
    world.llm.members.add(world.users["nlp_admin"])
    hit = granted(world, quantity=6)
    now = timezone.now()
    shrink = window(world, quota(world, "nlp"), begins_at=now + 20 * MINUTE, ends_at=now + DAY, limit="4")
    window(world, quota(world, "vision"), begins_at=now + 40 * MINUTE, ends_at=now + DAY, limit="1")

    [coming] = quota_window_shrinks_coming(now=now)

    assert (coming.window.pk, coming.kind, coming.at, coming.after.limit) == (shrink.pk, "begin", now + 20 * MINUTE, Decimal(4))
    assert [grant.victim.allocation_id for grant in coming.grants] == [hit.pk]
    assert coming.owners == ["nlp_admin", "nlp_member"]
    assert len(quota_window_shrinks_coming(now=now, within=HOUR)) == 2
    assert quota_window_shrinks_coming(now=now, department_ids=[world.vision.pk]) == []

    assert quota_windows_tick(now=now).warned == 1
    assert quota_windows_tick(now=now + MINUTE).warned == 0
    [event] = audited("quota_window.shrink_warned", head)
    assert (event.target_id, event.details["at"], event.details["owners"]) == (
        str(shrink.pk), (now + 20 * MINUTE).isoformat(), ["nlp_admin", "nlp_member"])
    assert [grant["allocation"] for grant in event.details["grants"]] == [hit.pk]


def test_the_timeline_task_applies_the_edges_first(world: World) -> None:
    now = timezone.now()
    window(world, quota(world, "nlp"), begins_at=now - MINUTE, ends_at=now + HOUR, limit_delta="1")
    assert allocations_timeline_task.apply().get() == {"window_edges": 1, "expired": 0, "reclaimed": 0, "started": 0}
    assert allocations_timeline_task.apply().get()["window_edges"] == 0


def test_the_command_prints_each_edge_applied_or_nothing_due(world: World) -> None:
    begins = timezone.now().replace(microsecond=0) - 5 * MINUTE
    festival = window(world, quota(world, "vision"), begins_at=begins, ends_at=begins + HOUR, limit_delta="4")

    out = StringIO()
    call_command("quota_windows_tick", "--at", (begins + MINUTE).isoformat(), stdout=out)
    assert f"window #{festival.pk} begins" in out.getvalue() and "limit 10 → 14" in out.getvalue()
    assert "vision, GPU-equivalents" in out.getvalue()

    again = StringIO()
    call_command("quota_windows_tick", "--at", (begins + MINUTE).isoformat(), stdout=again)
    assert again.getvalue().strip() == "nothing due"

    later = StringIO()
    call_command("quota_windows_tick", "--at", (begins + HOUR).strftime("%Y-%m-%dT%H:%M:%S"), "--lookback", "5",
                 stdout=later)
    assert f"window #{festival.pk} ends" in later.getvalue() and "limit 14 → 10" in later.getvalue()
    with pytest.raises(CommandError):
        call_command("quota_windows_tick", "--at", "yesterday")


def test_an_edge_that_changes_no_number_is_recorded_without_a_push(world: World) -> None:
    now = timezone.now()
    window(world, quota(world, "nlp"), begins_at=now - HOUR, ends_at=now + HOUR, limit="6")
    nightly = window(world, quota(world, "nlp"), begins_at=now - MINUTE, rrule="FREQ=DAILY", timezone="UTC",
                     duration_minutes=30, limit_delta="2")

    [edge] = quota_windows_tick(now=now).applied  # the temporary window wins over the recurring one

    assert (edge.window_id, edge.before["limit"], edge.after["limit"], edge.pushes) == (nightly.pk, "6", "6", 0)
