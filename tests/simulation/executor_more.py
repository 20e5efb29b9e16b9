"""The actions that move the catalogue, the quota windows, the clock, the periodic tasks and the
inventory (requests and decisions: ``executor``)."""

from __future__ import annotations

import datetime
import functools
from collections.abc import Callable
from decimal import Decimal
from typing import Any

from django.db.models import Max

from accounting.idle.evaluation import idle_cases_evaluate
from accounting.rolling import usage_hours_roll_recent
from allocations.booking.defrag import defrag_apply
from allocations.fair_share.services import fair_share_shares_set, fair_share_tick
from allocations.grants import idle_ladder as ladder
from allocations.models import Allocation, PriorityClass, Quota, QuotaWindow
from allocations.rules import catalogue as catalog
from allocations.tasks import allocations_timeline_task
from allocations.windows import services as window_services
from allocations.windows.terms import WindowTerms
from clusters.inventory import GpuSpec, node_upsert
from clusters.models import ClusterPush, Gpu, Node, NodeSharing
from clusters.outbox import pushes_due
from delivery.node_settings import node_settings_update
from delivery.outbox import push_deliver
from kernel.clock import clock_now, clock_set
from telemetry.models import AllocationUsage, UsageSource
from tests.conftest import A100, H100
from tests.simulation import windows_eval
from tests.simulation.context import Context
from tests.simulation.executor import amount, attempt, pick
from tests.simulation.world import ADMIN_OF

SECOND = datetime.timedelta(seconds=1)
MINUTE = datetime.timedelta(minutes=1)
RULE_HOURS = (0, 6, 8, 12, 18, 20, 22)
LOOKBACK = datetime.timedelta(minutes=55)


def quota_edit(ctx: Context, n: tuple[float, ...]) -> str:
    quotas = list(Quota.objects.order_by("pk").values_list("pk", "guaranteed", "limit", "flavor_id"))
    quota_id, guaranteed, limit, _ = quotas[min(int(n[0] * len(quotas)), len(quotas) - 1)]
    numbers: dict[str, Any] = {}
    if n[1] < 0.7:
        numbers["limit"] = max(guaranteed, limit + amount(n[2], -3, 3))
    else:
        numbers["guaranteed"] = min(limit, max(Decimal(0), guaranteed + amount(n[2], -2, 2)))
    return attempt(ctx, "quota_update", lambda: catalog.quota_update(
        actor=ctx.world.users["platform"], quota_id=quota_id, **numbers))


def class_edit(ctx: Context, n: tuple[float, ...]) -> str:
    classes = list(PriorityClass.objects.order_by("pk").values_list("pk", "name", "oversubscription_factor"))
    class_id, name, factor = classes[min(int(n[0] * len(classes)), len(classes) - 1)]
    fields: dict[str, Any] = {"notice_minutes": int(n[2] * 30)} if n[1] < 0.6 else {}
    if not fields:
        fields = {"oversubscription_factor": Decimal("1.00") + amount(n[2], 0, 4) / 4} if factor > 1 else {
            "notice_minutes": 1 + int(n[2] * 20)}
    return attempt(ctx, "priority_class_update", lambda: catalog.priority_class_update(
        actor=ctx.world.users["platform"], priority_class_id=class_id, **fields))


def window_create(ctx: Context, n: tuple[float, ...]) -> str:
    rows = list(Quota.objects.order_by("pk").values_list("pk", "department__slug", "limit", "flavor_id"))
    quota_id, slug, limit, flavor_id = rows[min(int(n[0] * len(rows)), len(rows) - 1)]
    direct = n[1] < 0.5 or slug == "acme"
    actor = ctx.world.users["platform" if direct else ADMIN_OF["vision_member" if slug == "vision" else "nlp_member"]]
    now = clock_now()
    values: dict[str, Any] = {}
    if n[2] < 0.45:
        values["limit_delta"] = -amount(n[3], 1, 4)
    elif n[2] < 0.75:
        values["limit"] = max(Decimal(0), limit - amount(n[3], 0, 4))
    else:
        values["limit_delta"] = amount(n[3], 1, 4)
    if n[4] < 0.2:  # one class's share of the quota (the day/night split)
        values = {"limit": amount(n[3], 0, 3), "priority_class_id": ctx.world.classes[1 + int(n[5] * 3)].pk}
    policy = "reclaim" if n[6] < 0.5 else "wait"
    if n[7] < 0.6:
        begins = now + MINUTE * (1 + int(n[5] * 12 * 60))
        ends = begins + MINUTE * (30 + int(n[3] * 3 * 24 * 60))
        times: dict[str, Any] = {"kind": "temporary", "begins_at": begins, "ends_at": ends}
    else:
        hour = RULE_HOURS[int(n[5] * len(RULE_HOURS))]
        zone = "Europe/Berlin" if n[3] < 0.5 else "UTC"
        times = {"kind": "recurring", "begins_at": now, "rrule": f"FREQ=DAILY;BYHOUR={hour};BYMINUTE=0",
                 "timezone": zone, "duration_minutes": 30 + int(n[2] * 11.5 * 60)}
    urgent: dict[str, Any] = {}
    if direct and n[1] < 0.25:  # four-eyes holds: a platform admin's window is in force at once only as an emergency
        urgent = {"emergency": True, "reason": "simulated emergency"}
    return attempt(ctx, "quota_window_create", lambda: window_services.quota_window_create(
        actor=actor, quota_id=quota_id, terms=WindowTerms(shrink_policy=policy, **times, **values),
        justification="simulated window", **urgent))


def window_decide(ctx: Context, n: tuple[float, ...]) -> str:
    window_id = pick(list(QuotaWindow.objects.filter(state="pending").order_by("pk").values_list("pk", flat=True)), n[0])
    if window_id is None:
        return "skipped"
    platform = ctx.world.users["platform"]
    if QuotaWindow.objects.filter(pk=window_id, requested_by=platform).exists():
        platform = ctx.world.users["platform_second"]  # four-eyes: never the requester
    if n[1] < 0.85:
        return attempt(ctx, "quota_window_approve", lambda: window_services.quota_window_approve(
            actor=platform, window_id=window_id))
    return attempt(ctx, "quota_window_reject", lambda: window_services.quota_window_reject(
        actor=platform, window_id=window_id, comment="no"))


def window_cancel(ctx: Context, n: tuple[float, ...]) -> str:
    ids = list(QuotaWindow.objects.filter(state__in=["approved", "pending"]).order_by("pk").values_list("pk", flat=True))
    window_id = pick(ids, n[0])
    if window_id is None:
        return "skipped"
    now = clock_now()
    row = next(row for row in ctx.snapshot.windows if row.id == window_id)
    was_in_force = row.state == "approved" and windows_eval.in_force(row, now)
    outcome = attempt(ctx, "quota_window_cancel", lambda: window_services.quota_window_cancel(
        actor=ctx.world.users["platform"], window_id=window_id))
    if outcome == "ok":
        ctx.notes.cancelled.append((window_id, now, was_in_force))
    return outcome


def timeline_tick(ctx: Context) -> str:
    """The timeline task at the clock's instant; a completed one is an instant the invariants
    hold the timeline to."""
    now = clock_now()
    outcome = attempt(ctx, "allocations_timeline_task", lambda: allocations_timeline_task())
    if outcome == "ok":
        ctx.notes.ticks.append(now)
    return outcome


def _coming(ctx: Context, now: datetime.datetime) -> list[datetime.datetime]:
    """The instants ahead where the timeline has something to do."""
    found: set[datetime.datetime] = set()
    for grant in ctx.snapshot.grants.values():
        if grant.pending_reclaim and grant.deadline:
            found.add(grant.deadline)
        if grant.state == "scheduled":
            found.add(grant.starts_at)
        if grant.state not in ("pending", "rejected", "cancelled", "released", "expired", "reclaimed"):
            found.add(grant.ends_at)
    for row in ctx.snapshot.windows:
        if row.state == "approved":
            found.update(at for at, _ in windows_eval.edges(row, now, now + datetime.timedelta(days=3)))
    return sorted(moment for moment in found if moment > now)


def clock(ctx: Context, n: tuple[float, ...]) -> str:
    """Move the clock (a few seconds, to the next thing due, some minutes, or hours) as beat would
    see it: the timeline task runs at the end (one time in twelve it is late and does not run) and,
    on a jump longer than the tick's look-back, at the window edges on the way (at most four), so that
    they apply; then the push worker."""
    now = clock_now()
    coming = _coming(ctx, now)
    if n[0] < 0.3:
        target = now + SECOND * (10 + int(n[1] * 290))
    elif n[0] < 0.65 and coming:
        target = coming[min(int(n[1] * 4), len(coming) - 1)] + SECOND * int(n[2] * 45)
    elif n[0] < 0.9:
        target = now + MINUTE * (5 + int(n[1] * 85))
    else:
        target = now + MINUTE * (120 + int(n[1] * 600))
    edges = set() if target - now < LOOKBACK else {at for row in ctx.snapshot.windows if row.state == "approved"
                                                    for at, _ in windows_eval.edges(row, now, target)}
    stops = [moment + SECOND for moment in sorted(edges) if moment + SECOND < target][:4]
    for stop in stops:
        clock_set(stop)
        timeline_tick(ctx)
    clock_set(target)
    if n[3] < 1 / 12:
        return "ok:late"
    outcome = timeline_tick(ctx)
    push_sweep(ctx)
    return outcome


def tick(ctx: Context, n: tuple[float, ...]) -> str:
    del n
    return timeline_tick(ctx)


def idle_readings(ctx: Context, n: tuple[float, ...]) -> str:
    """Synthetic utilisation, as the telemetry would write it: for every active grant, from its last
    reading (or its start, at most three hours back) to the newest complete 5-minute bucket, idle
    (1 %) or busy (80 %), most of them idle; then the idle evaluation runs."""
    active = list(Allocation.objects.filter(state="active", cluster__isnull=False).order_by("pk")
                  .values_list("pk", "cluster_id", "project__department_id", "starts_at", "quantity",
                               "flavor__gpu_equivalents"))
    if not active:
        return "skipped"
    last = ladder.last_complete_bucket(clock_now())
    newest = dict(AllocationUsage.objects.filter(allocation_id__in=[row[0] for row in active])
                  .values("allocation_id").annotate(last=Max("bucket_start")).values_list("allocation_id", "last"))
    rows = []
    for index, (pk, cluster_id, department_id, starts_at, quantity, weight) in enumerate(active):
        at = max(ladder.bucket_floor(starts_at), last - datetime.timedelta(hours=3))
        if newest.get(pk) is not None:
            at = max(at, newest[pk] + ladder.BUCKET)
        activity = 0.01 if (index * 0.618 + n[1]) % 1 < 0.7 else 0.8
        granted = float(weight) * quantity
        while at <= last:
            rows.append(AllocationUsage(
                allocation_id=pk, cluster_id=cluster_id, department_id=department_id, bucket_start=at,
                source=UsageSource.DCGM, devices=quantity, coverage=1.0, activity=activity, granted_gpu_eq=granted,
                used_gpu_eq=activity * granted))
            at += ladder.BUCKET
    AllocationUsage.objects.bulk_create(rows, ignore_conflicts=True)
    return attempt(ctx, "idle_cases_evaluate", lambda: idle_cases_evaluate()) if rows else "skipped"


def idle_evaluate(ctx: Context, n: tuple[float, ...]) -> str:
    del n
    return attempt(ctx, "idle_cases_evaluate", lambda: idle_cases_evaluate())


def defrag(ctx: Context, n: tuple[float, ...]) -> str:
    del n
    return attempt(ctx, "defrag_apply", lambda: defrag_apply(cluster_id=ctx.world.cluster.pk))


def fair_share(ctx: Context, n: tuple[float, ...]) -> str:
    if n[0] < 0.8:
        return attempt(ctx, "fair_share_tick", lambda: fair_share_tick())
    department = list(ctx.world.departments.values())[int(n[1] * len(ctx.world.departments))]
    return attempt(ctx, "fair_share_shares_set", lambda: fair_share_shares_set(
        actor=ctx.world.users["platform"], department_id=department.pk, shares=1 + int(n[2] * 4)))


def inventory(ctx: Context, n: tuple[float, ...]) -> str:
    """A node cordoned or back, a GPU lost or back, or a node added."""
    nodes = list(Node.objects.filter(cluster=ctx.world.cluster).order_by("pk"))
    node = nodes[min(int(n[1] * len(nodes)), len(nodes) - 1)]
    platform = ctx.world.users["platform"]
    if n[0] < 0.35:
        return attempt(ctx, "node_settings_update", lambda: node_settings_update(
            actor=platform, node_id=node.pk, is_schedulable=not node.is_schedulable))
    gpus = list(Gpu.objects.filter(node=node).order_by("index"))
    if n[0] < 0.85 and gpus:
        model, capable = gpus[0].model, gpus[0].mig_capable
        indices = [gpu.index for gpu in gpus]
        if n[2] < 0.6 and len(indices) > 1:
            indices = indices[:-1]
        else:
            indices = sorted({*indices, max(indices) + 1})[: 8]
        specs = [GpuSpec(index=i, model=model, memory_mib=81920, mig_capable=capable) for i in indices]
        return attempt(ctx, "node_upsert", lambda: node_upsert(
            actor=None, cluster=ctx.world.cluster, name=node.name, cpu_millicores=node.cpu_millicores,
            memory_mib=node.memory_mib, gpus=specs))
    a100 = n[2] < 0.5
    name = f"extra-{len(nodes)}"
    specs = [GpuSpec(index=i, model=A100 if a100 else H100, memory_mib=81920, mig_capable=a100) for i in range(4)]

    def add() -> None:
        node_upsert(actor=None, cluster=ctx.world.cluster, name=name, cpu_millicores=64000, memory_mib=524288,
                    gpus=specs)
        if a100:
            Node.objects.filter(cluster=ctx.world.cluster, name=name).update(sharing=NodeSharing.MIG)

    return attempt(ctx, "node_upsert", add)


def usage_roll(ctx: Context, n: tuple[float, ...]) -> str:
    del n
    return attempt(ctx, "usage_hours_roll_recent", lambda: usage_hours_roll_recent())


def push_sweep(ctx: Context, n: tuple[float, ...] = ()) -> str:
    """The delivery worker: the newest due push of each scope (a cluster's shared objects, or one
    project's namespace), which renders the state every older pending push of that scope asked for
    and so finishes them too; a failed one is due again after its backoff, failed for good after
    its last attempt."""
    del n
    newest: dict[tuple[int, int | None], int] = {}
    for push_id, cluster_id, project_id in ClusterPush.objects.filter(pk__in=pushes_due()).order_by("pk").values_list(
            "pk", "cluster_id", "project_id"):
        newest[(cluster_id, project_id)] = push_id
    if not newest:
        return "skipped"
    outcomes = [attempt(ctx, "push_deliver", functools.partial(push_deliver, push_id=push_id))
                for push_id in sorted(newest.values())]
    return next((outcome for outcome in outcomes if outcome != "ok"), "ok")


MORE_HANDLERS: dict[str, Callable[[Context, tuple[float, ...]], str]] = {
    "quota_edit": quota_edit, "class_edit": class_edit, "window_create": window_create,
    "window_decide": window_decide, "window_cancel": window_cancel, "clock": clock, "tick": tick,
    "idle_readings": idle_readings, "idle_evaluate": idle_evaluate, "defrag": defrag, "fair_share": fair_share,
    "inventory": inventory, "usage_roll": usage_roll, "push_sweep": push_sweep,
}
