"""What one idle evaluation reads: the active grants, the policy each falls under, their open
cases, where each may be watched from, and their 5-minute readings (a fixed number of queries).

A grant is watched while it is ``active`` (on its cluster): from its start, or from the end of its
last keep or exemption (``IdleCase.rearm_at``), and at most its policy's look-back
(``ladder.look_back``) before the newest complete bucket. Its readings are the utilisation rows
that count (``telemetry.utilisation_reads.chosen_usage``: one per bucket, a known reading first);
a bucket without one is unknown. A grant held off by a keep or an exemption that has not ended yet
is not watched at all.
"""

from __future__ import annotations

import datetime
from collections import defaultdict
from dataclasses import dataclass, field

from django.db.models import Max

from accounting.idle_models import OPEN_STATES, IdleCase, IdlePolicy
from allocations.grants import idle_ladder as ladder
from allocations.grants.idle_matching import PolicyScope, policy_for
from allocations.models import Allocation, AllocationState
from telemetry.utilisation_reads import chosen_usage
from tenants.access import department_ancestor_ids, department_parent_map

HELD_OFF_HORIZON = datetime.timedelta(days=8)
"""Keeps and exemptions that ended longer ago than the longest look-back no longer bound a watch."""


@dataclass
class Watch:
    """One active grant under a policy: its open case (if any) and its readings since ``since``."""

    allocation_id: int
    department_id: int
    policy: IdlePolicy
    case: IdleCase | None
    since: datetime.datetime
    buckets: list[ladder.Bucket] = field(default_factory=list)

    @property
    def rules(self) -> ladder.Rules:
        return rules_of(self.policy)


@dataclass
class Reading:
    watches: list[Watch]
    orphans: list[tuple[IdleCase, str]]  # open cases to close, and why
    held_off: int  # active grants a keep or an exemption still holds off


def rules_of(policy: IdlePolicy) -> ladder.Rules:
    return ladder.Rules(window_minutes=int(policy.window_minutes), grace_minutes=int(policy.grace_minutes))


def idle_watches_read(*, now: datetime.datetime, last_bucket: datetime.datetime) -> Reading:
    policies = {policy.pk: policy for policy in IdlePolicy.objects.filter(is_active=True)}
    scopes = [PolicyScope(p.pk, p.department_id, p.cluster_id, p.priority_class_id) for p in policies.values()]
    open_cases = {case.allocation_id: case for case in IdleCase.objects.filter(state__in=OPEN_STATES).select_related("policy")}
    active = list(
        Allocation.objects.filter(state=AllocationState.ACTIVE, cluster__isnull=False).values_list(
            "pk", "project__department_id", "cluster_id", "priority_class_id", "starts_at"
        )
    )
    active_ids = {row[0] for row in active}
    orphans = [(case, "the grant is no longer active") for allocation_id, case in open_cases.items()
               if allocation_id not in active_ids]  # fmt: skip
    rearm = dict(
        IdleCase.objects.filter(allocation_id__in=active_ids, rearm_at__gt=now - HELD_OFF_HORIZON)
        .values("allocation_id").annotate(last=Max("rearm_at")).values_list("allocation_id", "last")
    )  # fmt: skip
    parents = department_parent_map() if scopes else {}
    chains: dict[int, list[int]] = {}
    watches: list[Watch] = []
    held_off = 0
    for allocation_id, department_id, cluster_id, priority_class_id, starts_at in active:
        if department_id not in chains:
            chains[department_id] = department_ancestor_ids(department_id=department_id, parents=parents)
        chosen = policy_for(scopes, chain=chains[department_id], cluster_id=cluster_id, priority_class_id=priority_class_id)
        case = open_cases.get(allocation_id)
        if chosen is None:
            if case is not None:
                orphans.append((case, "no active idle policy applies to the grant any more"))
            continue
        held_until = rearm.get(allocation_id)
        if case is None and held_until is not None and held_until > now:
            held_off += 1
            continue
        policy = policies[chosen]
        since = max(starts_at, last_bucket - ladder.look_back(rules_of(policy)) + ladder.BUCKET)
        if held_until is not None:
            since = max(since, held_until)
        watches.append(Watch(allocation_id, department_id, policy, case, since))
    _buckets_read(watches, last_bucket=last_bucket)
    return Reading(watches=watches, orphans=orphans, held_off=held_off)


def _buckets_read(watches: list[Watch], *, last_bucket: datetime.datetime) -> None:
    """Each watch's readings from its ``since`` to ``last_bucket``, in one query."""
    if not watches:
        return
    by_id = {watch.allocation_id: watch for watch in watches}
    rows = chosen_usage().filter(
        allocation_id__in=sorted(by_id), bucket_start__gte=min(watch.since for watch in watches),
        bucket_start__lte=last_bucket,
    )  # fmt: skip
    found: dict[int, list[ladder.Bucket]] = defaultdict(list)
    for allocation_id, bucket_start, activity in rows.values_list("allocation_id", "bucket_start", "activity"):
        watch = by_id[allocation_id]
        if bucket_start < watch.since:
            continue
        reading = ladder.reading_of(activity, threshold=float(watch.policy.threshold))
        found[allocation_id].append(ladder.Bucket(start=bucket_start, reading=reading, activity=activity))
    for allocation_id, buckets in found.items():
        by_id[allocation_id].buckets = sorted(buckets, key=lambda bucket: bucket.start)
