"""Quota windows through their life: requested by a department admin or a platform admin, approved
or rejected by another platform admin (four-eyes), or created in force at once by a platform admin
as an emergency with its reason (or always, with four-eyes off); cancelled by their requester or a
platform admin. Read within reach: everyone with a role that reads a quota's
department reads its windows; others get 404.

The numbers in force at an instant come from the pure :mod:`allocations.quotas.windows` over the
approved windows (:func:`allocations.quotas.window_reading.approved_window_specs`): a window whose
values would put the guarantee above the limit is not refused here, the effective numbers are
clamped (the guarantee never above the limit, neither below 0). The tick (someone else's
transaction) applies the edges; a window approved or cancelled while in force also queues the push
of the cluster-wide objects at once, before its audit event (:mod:`kernel.locks`).

Validation guards the pure function too: a recurring rule is at most daily and has an occurrence
within :data:`FIRST_OCCURRENCE_WITHIN` of its start (dateutil searches for the next occurrence of a
rule that never matches, such as February 30th, until the year 9999: seconds of work), and every
time lies within :data:`HORIZON` of now. A rule also keeps the bounds of
:mod:`allocations.quotas.rrule_bounds` (length, the least time between occurrences, edges a year),
and lists read each window with a page's budget (``windows.PAGE_BUDGET``).
"""

from __future__ import annotations

import datetime
from dataclasses import replace
from decimal import Decimal
from functools import lru_cache
from typing import Any
from zoneinfo import ZoneInfo, available_timezones

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser, AnonymousUser, User
from django.db import transaction
from django.db.models import QuerySet
from django.http import Http404
from django.utils import timezone as django_timezone

from allocations.models import PriorityClass, Quota
from allocations.models.windows import QuotaWindow, ShrinkPolicy, WindowKind, WindowState
from allocations.quotas import windows
from allocations.quotas.rrule_bounds import rrule_density_check, rrule_length_check
from allocations.quotas.window_reading import approved_window_specs, window_spec
from allocations.rules.catalogue import cluster_objects_enqueue
from allocations.rules.changes import rule_change_needs_second, rule_emergency_record, rule_proposal_notify
from allocations.windows.terms import WindowTerms
from audit import actions
from audit.services import audit_record
from kernel.clock import clock_now
from kernel.errors import Conflict, FieldError, FourEyes, NotAllowed, TransitionNotAllowed
from kernel.limits import TEXT_LIMIT
from kernel.numbers import plain
from kernel.times import minute_utc
from kernel.transactions import retry_on_deadlock
from tenants.access import access_for

HORIZON = datetime.timedelta(days=5 * 366)
"""Every time of a window (and every instant asked about) lies within this of now."""
PAST = datetime.timedelta(days=366)
"""A window may begin at most this long ago (its rule is counted from its start)."""
FIRST_OCCURRENCE_WITHIN = datetime.timedelta(days=4 * 366)
MAX_DURATION_MINUTES = 366 * 24 * 60
FREQUENCIES = ("DAILY", "WEEKLY", "MONTHLY", "YEARLY")
MAX_INTERVAL = 1000
VALUE_FIELDS = ("guaranteed_delta", "limit_delta", "guaranteed", "limit")
GREGORIAN_CYCLE_YEARS = 400  # the calendar, weekdays included, repeats every 400 years (146097 days)


@lru_cache(maxsize=1)
def time_zones() -> frozenset[str]:
    return frozenset(available_timezones())


def _number(value: Decimal | None) -> str | None:
    return None if value is None else plain(value)


def _calendar_twin(year: int, years: int) -> int:
    """A year just far enough before the year 9999 whose next ``years`` years have the same calendar
    (weekdays and leap days) as those from ``year``: in a span without a century that skips its leap
    day, the same leap status and the same weekday on January 1st; else 400 years later, or a
    multiple of it (the Gregorian calendar repeats every 400 years, 146097 days)."""
    last = datetime.MAXYEAR - years - 1

    def regular(first: int) -> bool:
        return not any(y % 100 == 0 and y % 400 != 0 for y in range(first, first + years + 1))

    if regular(year):
        weekday = datetime.date(year, 1, 1).weekday()
        for candidate in range(last, last - 28, -1):
            if candidate % 4 == year % 4 and datetime.date(candidate, 1, 1).weekday() == weekday and regular(candidate):
                return candidate
    return year + (last - year) // GREGORIAN_CYCLE_YEARS * GREGORIAN_CYCLE_YEARS


def _first_occurrence_near(text: str, *, zone: str, begins_at: datetime.datetime) -> bool:
    """Whether the rule's pattern has an occurrence within ``FIRST_OCCURRENCE_WITHIN`` of its start,
    decided in bounded time: the rule (without COUNT and UNTIL) started on the same day of a year
    with the same calendar just before the year 9999, where dateutil's search stops by itself."""
    rule = windows.parse_rrule(text, zone=zone, begins_at=begins_at)
    local = begins_at.astimezone(ZoneInfo(zone)).replace(tzinfo=None, microsecond=0)
    start = local.replace(year=_calendar_twin(local.year, FIRST_OCCURRENCE_WITHIN.days // 365 + 1))
    found = rule.replace(dtstart=start, count=None, until=None).after(start, inc=True)
    return found is not None and found - start <= FIRST_OCCURRENCE_WITHIN


def rrule_check(text: str, *, zone: str, begins_at: datetime.datetime) -> None:
    """Raise a ``FieldError`` on ``rrule`` unless it is one readable RRULE, at most daily, with an
    occurrence (within ``FIRST_OCCURRENCE_WITHIN`` of ``begins_at``), within the bounds of
    :mod:`allocations.quotas.rrule_bounds`."""
    rrule_length_check(text)
    parts = {part.split("=", 1)[0].strip().upper(): part for part in text.upper().removeprefix("RRULE:").split(";")}
    frequency = parts.get("FREQ", "").partition("=")[2].strip()
    if frequency not in FREQUENCIES:
        raise FieldError("rrule", f"FREQ must be one of {', '.join(FREQUENCIES)}.")
    interval = parts.get("INTERVAL", "INTERVAL=1").partition("=")[2].strip()
    if not interval.isdigit() or not 1 <= int(interval) <= MAX_INTERVAL:
        raise FieldError("rrule", f"INTERVAL must be a whole number from 1 to {MAX_INTERVAL}.")
    try:
        if not _first_occurrence_near(text, zone=zone, begins_at=begins_at):
            raise FieldError("rrule", f"The rule has no occurrence within {FIRST_OCCURRENCE_WITHIN.days} days of begins_at.")
        rule = windows.parse_rrule(text, zone=zone, begins_at=begins_at)
        local = begins_at.astimezone(ZoneInfo(zone)).replace(tzinfo=None, microsecond=0)
        if rule.after(local, inc=True) is None:  # bounded: the pattern occurs (above)
            raise FieldError("rrule", "The rule has no occurrence (its COUNT or UNTIL ends it before it starts).")
    except FieldError:
        raise
    except Exception as error:  # noqa: BLE001 - dateutil raises ValueError, TypeError, KeyError, OverflowError... on garbage
        raise FieldError("rrule", f"Not a valid RRULE: {error}") from None
    rrule_density_check(text, zone=zone, begins_at=begins_at)


def _check_times(terms: WindowTerms, *, now: datetime.datetime) -> None:
    begins_at, ends_at = terms.begins_at, terms.ends_at
    for name, value in (("begins_at", begins_at), ("ends_at", ends_at)):
        if value is not None and (not isinstance(value, datetime.datetime) or django_timezone.is_naive(value)):
            raise FieldError(name, "A date and time with its offset (ISO 8601) is expected.")
        if value is not None and not now - PAST <= value <= now + HORIZON:
            raise FieldError(name, f"Must lie between {PAST.days} days ago and {HORIZON.days} days ahead.")
    if ends_at is not None and ends_at <= begins_at:
        raise FieldError("ends_at", "The end must be after begins_at.")
    if ends_at is not None and ends_at <= now:
        raise FieldError("ends_at", "The end must be in the future.")
    if terms.kind == WindowKind.TEMPORARY:
        extra: dict[str, object] = {"rrule": terms.rrule, "timezone": terms.timezone, "duration": terms.duration_minutes}
        for field, given in extra.items():
            if given:
                raise FieldError(field, "Only a recurring window has one.")
        if ends_at is None:
            raise FieldError("ends_at", "A temporary window needs its end.")
        return
    _check_recurrence(terms)


def _check_recurrence(terms: WindowTerms) -> None:
    """A recurring window's time zone, duration and rule."""
    zone, duration_minutes, rrule = terms.timezone, terms.duration_minutes, terms.rrule
    if not zone:
        raise FieldError("timezone", "A recurring window needs its IANA time zone, e.g. Asia/Shanghai.")
    if len(zone) > 64 or zone not in time_zones():
        raise FieldError("timezone", "Not a known IANA time zone.")
    if duration_minutes is None:
        raise FieldError("duration", "A recurring window needs the duration of each occurrence, e.g. PT12H.")
    if isinstance(duration_minutes, bool) or not 1 <= duration_minutes <= MAX_DURATION_MINUTES:
        raise FieldError("duration", "From one minute to 366 days.")
    if not rrule.strip():
        raise FieldError("rrule", "A recurring window needs its RRULE, e.g. FREQ=DAILY;BYHOUR=20;BYMINUTE=0.")
    if len(rrule) > 500:
        raise FieldError("rrule", "At most 500 characters.")
    rrule_check(rrule, zone=zone, begins_at=terms.begins_at)


def _check_values(*, quota: Quota, values: dict[str, Decimal | None]) -> None:
    if all(value is None for value in values.values()):
        raise FieldError("limit_delta", "Give at least one of guaranteed_delta, limit_delta, guaranteed and limit.")
    for name in ("guaranteed", "limit"):
        if values[name] is not None and values[f"{name}_delta"] is not None:
            raise FieldError(name, f"Give {name} (an absolute value) or {name}_delta, not both.")
    for name, value in values.items():
        if value is None:
            continue
        if not isinstance(value, Decimal) or not value.is_finite():
            raise FieldError(name, "A decimal number is expected.")
        if not name.endswith("_delta") and value < 0:
            raise FieldError(name, "Must be at least 0.")
        if quota.flavor_id is not None and value != value.to_integral_value():
            raise FieldError(name, "A flavor quota counts whole units.")


def snapshot(window: QuotaWindow) -> dict[str, Any]:
    """The window's terms as the audit log keeps them."""
    return {
        "quota": window.quota_id, "kind": window.kind, "state": window.state, "begins_at": window.begins_at.isoformat(),
        "ends_at": window.ends_at.isoformat() if window.ends_at else None, "rrule": window.rrule,
        "timezone": window.timezone, "duration_minutes": window.duration_minutes,
        **{name: _number(getattr(window, name)) for name in VALUE_FIELDS},
        "priority_class": window.priority_class.name if window.priority_class else None,
        "shrink_policy": window.shrink_policy,
    }


def window_in_force(window: QuotaWindow, at: datetime.datetime, *, budget: int = windows.BUDGET) -> bool:
    """Whether the window is approved and in force at ``at`` (lists pass ``windows.PAGE_BUDGET``)."""
    return window.state == WindowState.APPROVED and windows.in_force(window_spec(window), at, budget=budget)


def window_next_edges(window: QuotaWindow, now: datetime.datetime, count: int = 3) -> list[windows.Edge]:
    """The next ``count`` edges from ``now`` (a pending window's: those it would have once approved),
    looked for over growing spans so that an hourly rule does not list a year of edges, with a
    page's budget (``windows.PAGE_BUDGET``): never more than that of its occurrences, whatever its
    rule (one stored before the bounds may give fewer edges than asked)."""
    if window.state not in (WindowState.PENDING, WindowState.APPROVED):
        return []
    return windows.next_edges(window_spec(window), now, count=count, within=HORIZON)


# --------------------------------------------------------------------------------- services


@transaction.atomic
def quota_window_create(
    *, actor: User, quota_id: int, terms: WindowTerms, justification: str = "", emergency: bool = False,
    reason: str = "",
) -> QuotaWindow:
    """Ask for a window on a quota with its ``terms`` (an admin of its department or of one above:
    ``pending``, for a platform admin to decide). A platform admin's own window waits for another
    platform admin too while four-eyes holds (``allocations.rules.changes.rule_change_needs_second``),
    unless it is an emergency with its ``reason``: then it is in force at once (``approved``, audited
    as an emergency); with four-eyes off, a platform admin's window is in force at once. 400 naming
    the field on bad terms."""
    quota = Quota.objects.select_related("flavor").filter(pk=quota_id).first()
    access = access_for(actor)
    if quota is None or not access.can_read_department(quota.department_id):
        raise FieldError("quota", "No such quota within your reach.")
    if not access.can_administer_department(quota.department_id):
        raise NotAllowed("Only the department's admins and platform admins may ask for a quota window.")
    now = clock_now()
    terms = _checked(terms, quota=quota, justification=justification, now=now)
    priority_class = None
    if terms.priority_class_id is not None:
        priority_class = PriorityClass.objects.filter(pk=terms.priority_class_id).first()
        if priority_class is None:
            raise FieldError("priority_class", "No such priority class.")
    direct = access.is_platform_admin and not rule_change_needs_second(emergency=emergency, reason=reason)
    window = QuotaWindow(
        quota=quota, priority_class=priority_class, kind=terms.kind, begins_at=terms.begins_at, ends_at=terms.ends_at,
        rrule=terms.rrule.strip() if terms.kind == WindowKind.RECURRING else "", timezone=terms.timezone,
        duration_minutes=terms.duration_minutes, shrink_policy=terms.shrink_policy, justification=justification,
        requested_by=actor, state=WindowState.APPROVED if direct else WindowState.PENDING,
        decided_by=actor if direct else None, decided_at=now if direct else None, **terms.values(),
    )
    window.full_clean()
    window.save()
    if direct:
        _approved_at_once(actor=actor, window=window, now=now, emergency=emergency, reason=reason)
    else:
        rule_proposal_notify(actor=actor, what=f"quota_window:{window.pk}", department_id=quota.department_id,
                             payload={"quota_window": window.pk, "quota": quota.pk})
        audit_record(actor=actor, action=actions.QUOTA_WINDOW_REQUESTED, target=window,
                     department_id=quota.department_id, after=snapshot(window))
    return window


def _checked(terms: WindowTerms, *, quota: Quota, justification: str, now: datetime.datetime) -> WindowTerms:
    """The terms checked (a 400 naming the field otherwise), a recurring window's start on its
    whole minute (occurrences start on whole minutes)."""
    if terms.kind not in WindowKind.values:
        raise FieldError("kind", f"One of {', '.join(WindowKind.values)}.")
    if terms.shrink_policy not in ShrinkPolicy.values:
        raise FieldError("shrink_policy", f"One of {', '.join(ShrinkPolicy.values)}.")
    if len(justification) > TEXT_LIMIT:
        raise FieldError("justification", f"At most {TEXT_LIMIT} characters.")
    if terms.kind == WindowKind.RECURRING and isinstance(terms.begins_at, datetime.datetime):
        terms = replace(terms, begins_at=terms.begins_at.replace(second=0, microsecond=0))
    _check_times(terms, now=now)
    _check_values(quota=quota, values=terms.values())
    return terms


def _approved_at_once(*, actor: User, window: QuotaWindow, now: datetime.datetime, emergency: bool,
                      reason: str) -> None:
    """Push a window in force at its creation and audit it (an emergency as one, while four-eyes
    holds)."""
    department_id = window.quota.department_id
    details = _pushed(window, now=now)
    urgent = {"emergency": True, "reason": reason} if emergency and settings.GPUPORTAL_FOUR_EYES else {}
    audit_record(actor=actor, action=actions.QUOTA_WINDOW_APPROVED, target=window, department_id=department_id,
                 after=snapshot(window), details={"direct": True, **urgent, **details})
    if urgent:
        rule_emergency_record(actor=actor, target=window, what=f"quota_window:{window.pk}", reason=reason,
                              department_id=department_id, details={"quota_window": window.pk, "quota": window.quota.pk})


def _pushed(window: QuotaWindow, *, now: datetime.datetime) -> dict[str, Any]:
    """Queue the cluster-wide push when the window is in force now (call before the audit event)."""
    in_force = windows.in_force(window_spec(window), now)
    return {"in_force": in_force, "pushes": cluster_objects_enqueue() if in_force else 0}


def _window_lock(window_id: int) -> QuotaWindow:
    return (QuotaWindow.objects.select_for_update(of=("self",))
            .select_related("quota", "priority_class", "requested_by").get(pk=window_id))


def _require_decider(*, actor: User, window: QuotaWindow) -> None:
    if not access_for(actor).is_platform_admin:
        raise NotAllowed("Only platform admins decide on quota windows.")
    if settings.GPUPORTAL_FOUR_EYES and window.requested_by_id == actor.pk:
        raise FourEyes("Nobody decides on their own quota window: another platform admin must.",
                       details={"requested_by": actor.get_username()})


def _require_state(window: QuotaWindow, *states: str) -> None:
    if window.state not in states:
        raise TransitionNotAllowed(
            f"Quota window #{window.pk} is {window.state}; this needs it {' or '.join(states)}.",
            details={"state": window.state},
        )


def _decide(window: QuotaWindow, *, actor: User, state: str, comment: str, now: datetime.datetime) -> None:
    window.state = state
    window.decided_by = actor
    window.decided_at = now
    window.decision_comment = comment
    window.save(update_fields=["state", "decided_by", "decided_at", "decision_comment"])


@retry_on_deadlock()
def quota_window_approve(*, actor: User, window_id: int, comment: str = "") -> QuotaWindow:
    window = _window_lock(window_id)
    _require_decider(actor=actor, window=window)
    _require_state(window, WindowState.PENDING)
    now = clock_now()
    if window.ends_at is not None and window.ends_at <= now:
        raise Conflict(f"Quota window #{window.pk} ended at {minute_utc(window.ends_at)}; there is nothing to approve.",
                       details={"ends_at": window.ends_at.isoformat()})
    _decide(window, actor=actor, state=WindowState.APPROVED, comment=comment, now=now)
    details = _pushed(window, now=now)
    audit_record(actor=actor, action=actions.QUOTA_WINDOW_APPROVED, target=window,
                 department_id=window.quota.department_id, after=snapshot(window),
                 details={"direct": False, "requested_by": window.requested_by.get_username(), "comment": comment,
                          **details})
    return window


@retry_on_deadlock()
def quota_window_reject(*, actor: User, window_id: int, comment: str) -> QuotaWindow:
    window = _window_lock(window_id)
    _require_decider(actor=actor, window=window)
    _require_state(window, WindowState.PENDING)
    if not comment.strip():
        raise FieldError("comment", "A rejection needs a comment for the requester.")
    _decide(window, actor=actor, state=WindowState.REJECTED, comment=comment, now=clock_now())
    audit_record(actor=actor, action=actions.QUOTA_WINDOW_REJECTED, target=window,
                 department_id=window.quota.department_id, before={"state": WindowState.PENDING},
                 after={"state": window.state},
                 details={"requested_by": window.requested_by.get_username(), "comment": comment})
    return window


@retry_on_deadlock()
def quota_window_cancel(*, actor: User, window_id: int) -> QuotaWindow:
    """Withdraw a pending window or end an approved one (its requester or a platform admin);
    ``decided_by`` records who cancelled it. An approved window in force ends now: the push is
    queued here, and the tick applies the end edge (its before/after numbers) on its next run."""
    window = _window_lock(window_id)
    if window.requested_by_id != actor.pk and not access_for(actor).is_platform_admin:
        raise NotAllowed("Only the window's requester or a platform admin may cancel it.")
    _require_state(window, WindowState.PENDING, WindowState.APPROVED)
    was = window.state
    now = clock_now()
    in_force = window_in_force(window, now)
    _decide(window, actor=actor, state=WindowState.CANCELLED, comment="", now=now)
    details: dict[str, Any] = {"was": was, "in_force": in_force, "pushes": cluster_objects_enqueue() if in_force else 0}
    if in_force:
        details["ends_now"] = "cancelled while in force: the next tick applies its end edge"
    audit_record(actor=actor, action=actions.QUOTA_WINDOW_CANCELLED, target=window,
                 department_id=window.quota.department_id, before={"state": was}, after={"state": window.state},
                 details={"requested_by": window.requested_by.get_username(), **details})
    return window


# -------------------------------------------------------------------------------- selectors


def quota_window_list(
    *, user: AbstractBaseUser | AnonymousUser, quota_id: int | None = None, department_id: int | None = None,
    state: str | None = None,
) -> QuerySet[QuotaWindow]:
    """The windows of the quotas ``user`` may read, newest first."""
    access = access_for(user)
    queryset = QuotaWindow.objects.select_related(
        "quota__department", "quota__flavor", "priority_class", "requested_by", "decided_by"
    )
    if not access.reads_everything:
        queryset = queryset.filter(quota__department_id__in=access.readable)
    if quota_id is not None:
        queryset = queryset.filter(quota_id=quota_id)
    if department_id is not None:
        queryset = queryset.filter(quota__department_id=department_id)
    if state:
        queryset = queryset.filter(state=state)
    return queryset.order_by("-created_at", "-id")


def quota_window_get(*, user: AbstractBaseUser | AnonymousUser, window_id: int) -> QuotaWindow:
    try:
        return quota_window_list(user=user).get(pk=window_id)
    except QuotaWindow.DoesNotExist:
        raise Http404("No such quota window.") from None


def quota_effective(*, quota: Quota, at: datetime.datetime, priority_class_id: int | None = None) -> windows.Effective:
    """The quota's numbers in force at ``at`` under its approved windows (for one priority class's
    share when given)."""
    specs = approved_window_specs(quota_ids=[quota.pk]).get(quota.pk, [])
    return windows.effective(guaranteed=quota.guaranteed, limit=quota.limit, windows=specs, at=at,
                             priority_class_id=priority_class_id)


def quota_timeline(
    *, quota: Quota, start: datetime.datetime, end: datetime.datetime, priority_class_id: int | None = None
) -> list[windows.Step]:
    """The step function of the quota's numbers over ``[start, end)``."""
    specs = approved_window_specs(quota_ids=[quota.pk]).get(quota.pk, [])
    return windows.timeline(guaranteed=quota.guaranteed, limit=quota.limit, windows=specs, span=(start, end),
                            priority_class_id=priority_class_id)
