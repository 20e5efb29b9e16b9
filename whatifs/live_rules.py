"""The portal's rules over time as the twin's policy reads them (docs/twin.md, "Sources"): the
approved quota windows, the active idle policies and the fair-share shares, and a what-if's
proposed windows and idle policies in the same form.

The twin reads each department's quota in GPU-equivalents (where it has none, the sum of its
flavors' quotas stands in) and its quotas of flavors (``whatifs.sources.policy_build``); a window
stays on the quota it is on, with its class where it is on a class's share
(``window_rules_of``).
"""

from __future__ import annotations

import datetime
from dataclasses import replace
from decimal import Decimal
from typing import Any

from accounting.idle_models import IdlePolicy
from allocations.fair_share.reads import half_life_seconds
from allocations.grants.idle_ladder import Rules
from allocations.models import PriorityClass
from allocations.models.fair_share import FairShare
from allocations.models.windows import QuotaWindow, ShrinkPolicy
from allocations.quotas.window_reading import approved_window_specs
from allocations.quotas.windows import WindowSpec
from twin.policy import Policy
from twin.policy_rules import IdleRule, WindowRule
from whatifs.sources import QuotaRow

IDLE_ACTION = {"warn": "notify", "release": "reclaim", "reclaim": "reclaim"}  # a change's action → the twin's
IDLE_GRACE_MINUTES = 60  # a proposed idle policy's grace (the portal's default)


def window_rules_of(spec: WindowSpec, row: QuotaRow, quotas: list[QuotaRow], *, shrink_policy: str,
                    priority_class: str | None) -> list[WindowRule]:
    """``spec`` (a window on ``row``) as the twin replays it: on the quota the twin reads for it
    (a department's quota in GPU-equivalents, or its quota of a flavor: ``Department.flavor_quotas``),
    on a class's share of it with ``priority_class``. A window on a flavor's quota of a department
    without a quota in GPU-equivalents is also moved onto the sum the twin stands in for that one
    (its numbers in GPU-equivalents: a delta times the flavor's GPU-equivalents; an absolute value
    as the delta from the quota's own value), so that the sum follows the flavor's quota; a class's
    share is not (no sum of shares is read)."""
    kept = WindowRule(row.department, spec, shrink_policy, priority_class, row.flavor)
    if row.flavor is None or priority_class is not None:
        return [kept]
    if any(other.department == row.department and other.flavor is None for other in quotas):
        return [kept]

    def moved(absolute: Decimal | None, delta: Decimal | None, base: Decimal) -> Decimal | None:
        change = absolute - base if absolute is not None else delta
        return None if change is None else change * row.equivalents

    summed = replace(spec, guaranteed=None, limit=None,
                     guaranteed_delta=moved(spec.guaranteed, spec.guaranteed_delta, row.guarantee),
                     limit_delta=moved(spec.limit, spec.limit_delta, row.limit))
    return [kept, WindowRule(row.department, summed, shrink_policy)]


def live_windows(quotas: list[QuotaRow]) -> list[WindowRule]:
    """The approved windows, each on the quota the twin reads for it (``window_rules_of``), with
    its shrink policy and class."""
    by_id = {row.id: row for row in quotas}
    specs_of = approved_window_specs(quota_ids=list(by_id))
    policies = dict(QuotaWindow.objects.filter(pk__in=[spec.id for specs in specs_of.values() for spec in specs])
                    .values_list("pk", "shrink_policy"))
    class_names = dict(PriorityClass.objects.values_list("pk", "name"))
    rules = []
    for quota_id, specs in sorted(specs_of.items()):
        for spec in specs:
            rules += window_rules_of(spec, by_id[quota_id], quotas, shrink_policy=str(policies[spec.id]),
                                     priority_class=class_names.get(spec.priority_class_id) if spec.priority_class_id else None)
    return rules


def live_idle_rules() -> list[IdleRule]:
    """The active idle policies (those of one cluster apply on it alone: left out)."""
    rows = (IdlePolicy.objects.filter(is_active=True, cluster__isnull=True)
            .select_related("department", "priority_class").order_by("id"))
    return [IdleRule(row.pk, row.name, row.department.slug if row.department else None,
                     row.priority_class.name if row.priority_class else None, row.threshold,
                     Rules(window_minutes=row.window_minutes, grace_minutes=row.grace_minutes), row.action)
            for row in rows]


def live_shares() -> dict[str, int]:
    return dict(FairShare.objects.values_list("department__slug", "shares"))


def policy_with_live_rules(policy: Policy, *, start: datetime.datetime, windows: list[WindowRule],
                           idle: list[IdleRule]) -> Policy:
    """``policy`` with its windows, idle policies and fair share (always on in the portal: its
    half-life from the settings, each department's shares from its row, else 1), virtual time 0
    standing for ``start``."""
    shares = live_shares()
    departments = tuple(replace(d, shares=shares.get(d.name, d.shares)) for d in policy.departments)
    return replace(policy, departments=departments, start=start, windows=tuple(windows), idle_policies=tuple(idle),
                   fair_share_half_life_s=half_life_seconds())


def proposed_window(change: dict[str, Any], *, row: QuotaRow, quotas: list[QuotaRow], window_id: int,
                    period: tuple[datetime.datetime, datetime.datetime | None],
                    class_number: int | None = None) -> list[WindowRule]:
    """A validated window change as the twin replays it (``window_id`` after the live ones';
    ``period``: its begin and, if temporary, end); with ``priority_class`` (its number in the
    policy: ``class_number``), on that class's share."""
    begins, ends = period
    def amount(key: str) -> Decimal | None:
        return Decimal(str(change[key])) if change.get(key) is not None else None

    recurring = bool(change.get("rrule"))
    spec = WindowSpec(
        id=window_id, kind="recurring" if recurring else "temporary", begins_at=begins.astimezone(datetime.UTC),
        ends_at=ends.astimezone(datetime.UTC) if ends is not None else None,
        rrule=str(change.get("rrule") or ""), timezone=str(change.get("timezone") or "UTC"),
        duration=datetime.timedelta(minutes=int(change["duration_minutes"])) if recurring else None,
        guaranteed_delta=amount("guarantee_delta"), limit_delta=amount("limit_delta"), priority_class_id=class_number)
    share = str(change["priority_class"]) if change.get("priority_class") else None
    return window_rules_of(spec, row, quotas, shrink_policy=str(change.get("shrink_policy") or ShrinkPolicy.WAIT),
                           priority_class=share)


def proposed_idle(change: dict[str, Any], policy_id: int) -> IdleRule:
    """A validated idle-policy change as the twin replays it: a new policy, the newest (so it wins
    over a live one of the same scope); ``release`` and ``reclaim`` both take the grant back."""
    department = change.get("department")
    return IdleRule(policy_id, f"proposed-{policy_id}", str(department) if department else None, None,
                    float(change["threshold"]),
                    Rules(window_minutes=int(change["window_minutes"]), grace_minutes=IDLE_GRACE_MINUTES),
                    IDLE_ACTION[str(change["action"])])
