"""Pushing desired state to clusters and repairing drift.

A push happens outside any transaction (it is I/O on another system); its outcome is then
recorded on the cluster and in the audit log, in a transaction of its own: the cluster row first,
the audit chain lock last (the global order of :mod:`kernel.locks`), run again if PostgreSQL picks
it as a deadlock's victim.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any

from django.contrib.auth.models import User
from django.db import transaction
from django.db.models import Case, F, TextField, Value, When

from audit import actions
from audit.models import Outcome
from audit.services import audit_record
from clusters.models import AppliedObject, Cluster, ClusterDrift
from clusters.outbox import push_enqueue
from clusters.selectors import MISSING_PREREQUISITE
from delivery import conf, selectors
from delivery.applied import applied_digests, applied_forget, applied_record, shared_push_lock
from delivery.drivers import ApplyResult, ClusterDriver, DriverError, Plan, Scope, driver_for
from delivery.eviction_records import pods_evicted_details, pods_evicted_record
from delivery.rendering import LimitDefaults, render_project
from delivery.shared_objects import (
    DesiredObject,
    SharedDelta,
    object_key,
    objects_render,
    shared_delta,
    shared_objects_desired,
)
from delivery.volcano import VOLCANO_NAMESPACE, is_scheduler_config
from kernel.clock import clock_now
from kernel.transactions import retry_on_deadlock
from tenants.access import require_platform_admin
from tenants.models import Project


def project_scopes(*, cluster: Cluster, project_ids: Iterable[int]) -> list[Scope]:
    """The projects' desired objects. The retain-namespace policy keeps an idle namespace only for
    a project that has been on the cluster, not for one whose booking has not started yet."""
    ids = sorted(set(project_ids))
    defaults = LimitDefaults(cpu=conf.limitrange_default_cpu(), memory=conf.limitrange_default_memory())
    retained: set[str] = set()
    if conf.prune_policy() == conf.PRUNE_RETAIN_NAMESPACE:
        on_cluster = selectors.cluster_project_ids(cluster=cluster, among=ids)
        retained = set(Project.objects.filter(pk__in=on_cluster).values_list("slug", flat=True))
    return [
        Scope(
            namespace=state.namespace,
            objects=render_project(state, limit_defaults=defaults, retain_namespace=state.project in retained),
            managed_resources=state.idle_resources,
        )
        for state in selectors.project_states_on_cluster(cluster=cluster, project_ids=ids)
    ]


def cluster_scope(*, cluster: Cluster) -> Scope:
    """PriorityClasses, the tenant pools' admission policies (``delivery.pinning``), Volcano Queues (where
    used), the alert rules (where the cluster runs the Prometheus Operator: ``prometheus_rule_namespace``)
    and the per-node GPU configurations (with the tenant pool labels), all rendered."""
    return Scope(namespace=None, objects=objects_render(cluster, shared_objects_desired(cluster=cluster)))


def _is_node_config(*, kind: str, namespace: str, cluster: Cluster) -> bool:
    """The per-node GPU configurations: the ConfigMaps in the GPU operator's namespace and the
    node labels that select their keys."""
    return kind == "Node" or (kind == "ConfigMap" and namespace == cluster.gpu_operator_namespace)


def missing_prerequisite(*, cluster: Cluster, driver: ClusterDriver, scope: Scope) -> str:
    """Why the node configurations of the cluster-wide ``scope`` cannot be pushed now, or "".

    They go into the GPU operator's namespace, which the operator creates and owns: the portal
    never creates it (it would have to own it, and what the portal owns it prunes), so a cluster
    without it is told, not repaired. It only matters when there are configurations to put there:
    then one read of the Namespace (a manifests folder never lacks it).
    """
    namespace = cluster.gpu_operator_namespace
    wanted = any(obj["kind"] == "ConfigMap" and obj["metadata"].get("namespace") == namespace for obj in scope.objects)
    if not wanted or driver.namespace_exists(namespace):
        return ""
    return (
        f"{MISSING_PREREQUISITE}namespace {namespace} does not exist on cluster {cluster.name}. Install the GPU "
        f"operator (it creates the namespace), or create it, or set the cluster's GPU operator namespace to the "
        f"one the operator runs in. Until then the device-plugin and MIG-manager configurations (and the node "
        f"labels that select them) are withheld; everything else is pushed."
    )


def _without_node_configs(scope: Scope, *, cluster: Cluster) -> Scope:
    """The scope with its node configurations withheld (their namespace is missing). Nodes and
    the GPU operator's namespace are never pruned, so withholding deletes nothing."""
    kept = [
        obj for obj in scope.objects
        if not _is_node_config(kind=obj["kind"], namespace=obj["metadata"].get("namespace", ""), cluster=cluster)
    ]  # fmt: skip
    return dataclasses.replace(scope, objects=kept)


def _shared_scope(*, cluster: Cluster, driver: ClusterDriver, scope: Scope) -> tuple[Scope, str]:
    """The cluster-wide scope as it can be pushed now, and the missing prerequisite ("" if none)."""
    scope, volcano_missing = _volcano_withheld(cluster=cluster, driver=driver, scope=scope)
    missing = missing_prerequisite(cluster=cluster, driver=driver, scope=scope)
    return (_without_node_configs(scope, cluster=cluster), missing) if missing else (scope, volcano_missing)


def _volcano_withheld(*, cluster: Cluster, driver: ClusterDriver, scope: Scope) -> tuple[Scope, str]:
    """The scope without the volcano-scheduler configuration when Volcano's namespace is missing
    (Volcano creates and owns it, as the GPU operator does its own), and why; else unchanged."""
    if not any(is_scheduler_config(obj) for obj in scope.objects) or driver.namespace_exists(VOLCANO_NAMESPACE):
        return scope, ""
    kept = [obj for obj in scope.objects if not is_scheduler_config(obj)]
    return dataclasses.replace(scope, objects=kept), (
        f"{MISSING_PREREQUISITE}namespace {VOLCANO_NAMESPACE} does not exist on cluster {cluster.name}. Install "
        f"Volcano there (its chart creates the namespace) or clear the cluster's use of Volcano. Until then the "
        f"volcano-scheduler configuration is withheld; everything else is pushed."
    )


def cluster_desired_scopes(*, cluster: Cluster) -> list[Scope]:
    """Everything the cluster should hold: the cluster-wide objects, then every project."""
    return [cluster_scope(cluster=cluster), *project_scopes(cluster=cluster, project_ids=selectors.cluster_project_ids(cluster=cluster))]


def _push(cluster: Cluster, scopes: list[Scope], *, project: Project | None) -> ApplyResult:
    try:
        driver = driver_for(cluster)
    except DriverError as error:
        _record_push(cluster=cluster, project=project, error=str(error), result=None)
        raise
    try:
        result = driver.apply(driver.plan(scopes))
        result += driver.enforce_quotas(scopes)  # after the lowered quotas are in place
    except DriverError as error:
        _record_push(cluster=cluster, project=project, error=str(error), result=None)
        raise
    finally:
        driver.close()
    _record_push(cluster=cluster, project=project, error="", result=result)
    return result


def cluster_sync_project(*, cluster_id: int, project_id: int) -> ApplyResult:
    """Bring one project's objects on one cluster to the database's desired state.
    Raises ``DriverError`` when the push failed."""
    cluster = Cluster.objects.get(pk=cluster_id)
    project = Project.objects.select_related("department").get(pk=project_id)
    try:
        scopes = project_scopes(cluster=cluster, project_ids=[project.pk])
    except DriverError as error:
        _record_push(cluster=cluster, project=project, error=str(error), result=None)
        raise
    return _push(cluster, scopes, project=project)


def cluster_sync_shared(*, cluster_id: int) -> ApplyResult:
    """Bring the cluster-wide objects (priority classes, queues, node configs) up to date,
    rendering and applying only those whose inputs changed since they were last applied
    (``delivery.applied``, ``delivery.shared_objects``): a push that changes nothing sends no
    request. A missing GPU operator namespace withholds the node configs and is reported on the
    cluster (``missing_prerequisite``); the push itself succeeds with the rest."""
    cluster = Cluster.objects.get(pk=cluster_id)
    with shared_push_lock(cluster_id=cluster.pk):
        try:
            desired = shared_objects_desired(cluster=cluster)
        except DriverError as error:
            _record_push(cluster=cluster, project=None, error=str(error), result=None)
            raise
        delta = shared_delta(desired, applied_digests(cluster_id=cluster.pk))
        if delta.is_empty:
            result = ApplyResult(applied=0, pruned=0, unchanged=len(desired))
            _record_push(cluster=cluster, project=None, error="", result=result)
            return result
        return _push_shared(cluster, delta)


def _push_shared(cluster: Cluster, delta: SharedDelta) -> ApplyResult:
    try:
        driver = driver_for(cluster)
    except DriverError as error:
        _record_push(cluster=cluster, project=None, error=str(error), result=None)
        raise
    try:
        objects = objects_render(cluster, delta.render)
        scope = Scope(namespace=None, objects=objects, kept=delta.kept, prune=delta.prune)
        scope, missing = _shared_scope(cluster=cluster, driver=driver, scope=scope)
        applied_forget(cluster_id=cluster.pk, keys=[item.key for item in delta.render])
        plan = driver.plan([scope])
        result = driver.apply(plan) + ApplyResult(applied=0, pruned=0, unchanged=len(delta.kept))
    except DriverError as error:
        _record_push(cluster=cluster, project=None, error=str(error), result=None)
        raise
    finally:
        driver.close()
    _applied_record(cluster, delta.render, scope, plan, complete=False)
    if delta.prune:
        applied_forget(cluster_id=cluster.pk, keys=delta.stale)
    _record_push(cluster=cluster, project=None, error="", result=result, missing=missing)
    return result


def _applied_record(cluster: Cluster, desired: list[DesiredObject], pushed: Scope, plan: Plan, *, complete: bool) -> None:
    """Remember the hashes of the objects ``pushed`` carried (not those withheld for a missing
    prerequisite, nor Nodes the cluster does not have yet), now that the push succeeded."""
    carried = {object_key(obj) for obj in pushed.objects} - plan.absent
    digests = {item.key: item.digest for item in desired if item.key in carried}
    applied_record(cluster_id=cluster.pk, digests=digests, complete=complete)


def cluster_plan(*, cluster_id: int) -> Plan:
    """What a full sync would change (``cluster_sync --dry-run``); writes nothing."""
    cluster = Cluster.objects.get(pk=cluster_id)
    driver = driver_for(cluster)
    try:
        shared, *projects = cluster_desired_scopes(cluster=cluster)
        return driver.plan([_shared_scope(cluster=cluster, driver=driver, scope=shared)[0], *projects])
    finally:
        driver.close()


def cluster_sync(*, cluster_id: int, repair_drift: bool = False) -> tuple[Plan, ApplyResult]:
    """Bring everything on the cluster to the desired state in one pass, comparing every object
    with the cluster (whatever ``delivery.applied`` remembers), and rewrite what it remembers.

    With ``repair_drift`` (the periodic check), differences in scopes that have no push pending
    are drift: recorded (a ClusterDrift row each and one audit event) and repaired. Then the
    pods beyond each project's GPU quotas are evicted, as after a project's push.
    """
    cluster = Cluster.objects.get(pk=cluster_id)
    with shared_push_lock(cluster_id=cluster.pk):
        plan, result, missing = _sync_all(cluster)
    if repair_drift:
        withheld = cluster.last_sync_error.startswith(MISSING_PREREQUISITE)  # delivered now, not changed by hand
        drifted = [
            change for change in plan.changes
            if not (withheld and _is_node_config(kind=change.kind, namespace=change.namespace, cluster=cluster))
        ]  # fmt: skip
        _record_drift(cluster=cluster, plan=Plan(changes=drifted, unchanged=plan.unchanged))
    _record_push(cluster=cluster, project=None, error="", result=result, missing=missing, audit_held_back=not repair_drift)
    return plan, result


def _sync_all(cluster: Cluster) -> tuple[Plan, ApplyResult, str]:
    """The whole cluster compared and applied: the plan, what was done, the missing prerequisite."""
    try:
        driver = driver_for(cluster)
    except DriverError as error:
        _record_push(cluster=cluster, project=None, error=str(error), result=None)
        raise
    try:
        desired = shared_objects_desired(cluster=cluster)
        projects = project_scopes(cluster=cluster, project_ids=selectors.cluster_project_ids(cluster=cluster))
        shared, missing = _shared_scope(
            cluster=cluster, driver=driver, scope=Scope(namespace=None, objects=objects_render(cluster, desired))
        )
        plan = driver.plan([shared, *projects])
        if plan.is_empty:
            result = ApplyResult(applied=0, pruned=0, unchanged=plan.unchanged)
        else:
            changed = [(c.kind, c.namespace, c.name) for c in plan.changes if c.scope == shared.label]
            applied_forget(cluster_id=cluster.pk, keys=changed)
            result = driver.apply(plan)
        result += driver.enforce_quotas(projects)
    except DriverError as error:
        _record_push(cluster=cluster, project=None, error=str(error), result=None)
        raise
    finally:
        driver.close()
    _applied_record(cluster, desired, shared, plan, complete=True)
    return plan, result, missing


DRIFT_KINDS = {"create": "missing", "update": "changed", "delete": "unexpected"}


@retry_on_deadlock()
def _record_drift(*, cluster: Cluster, plan: Plan) -> None:
    """Differences in scopes with no push pending were made by hand (an object edited, deleted,
    or left behind): record each, and the repair, in one audit event."""
    pending = selectors.pending_push_project_ids(cluster=cluster)
    busy = {Scope(namespace=None, objects=[]).label} if None in pending else set()
    slugs = Project.objects.filter(pk__in=[pid for pid in pending if pid is not None]).values_list("slug", flat=True)
    busy |= {Scope(namespace=slug, objects=[]).label for slug in slugs}
    drifted = [change for change in plan.changes if change.scope not in busy]
    Cluster.objects.filter(pk=cluster.pk).update(last_drift_at=clock_now())
    if not drifted:
        return
    ClusterDrift.objects.bulk_create(
        ClusterDrift(cluster=cluster, kind=c.kind, namespace=c.namespace, name=c.name, change=DRIFT_KINDS[c.action],
                     fields=list(c.fields))
        for c in drifted
    )
    audit_record(
        actor=None,
        action=actions.CLUSTER_DRIFT_REPAIRED,
        target=cluster,
        details={
            "count": len(drifted),
            "objects": [{"object": c.ref, "change": DRIFT_KINDS[c.action], "fields": list(c.fields)[:20]} for c in drifted[:100]],
        },
    )


@retry_on_deadlock()
def _record_push(
    *, cluster: Cluster, project: Project | None, error: str, result: ApplyResult | None, missing: str = "",
    audit_held_back: bool = True,
) -> None:
    """The outcome on the cluster (``last_sync_error``) and in the audit log. ``missing``: the
    prerequisite a cluster-wide push that pushed everything else found missing; it stays on the
    cluster until a cluster-wide push finds it there (a project's push does not clear it) and is
    audited (``cluster.push_failed``) when first reported, not again at every push. Pods the push
    evicted are audited after the push (``delivery.eviction_records``; ``audit_held_back``: also
    when it only held pods back)."""
    evictions = pods_evicted_details(cluster=cluster, result=result, with_held_back=audit_held_back) if result else []
    sync_error: Any = error[:4000] or missing
    if project is not None and not error:
        kept = When(last_sync_error__startswith=MISSING_PREREQUISITE, then=F("last_sync_error"))
        sync_error = Case(kept, default=Value(""), output_field=TextField())
    newly_missing = bool(missing) and missing != cluster.last_sync_error
    failures = F("push_failures") + 1 if error else F("push_failures")
    Cluster.objects.filter(pk=cluster.pk).update(
        last_sync_at=clock_now(), last_sync_error=sync_error, push_failures=failures
    )
    if newly_missing or result is None or result.applied or result.pruned:  # else nothing changed: nothing to record
        _audit_push(cluster=cluster, project=project, error=error or (missing if newly_missing else ""), result=result)
    pods_evicted_record(cluster=cluster, events=evictions)


def _audit_push(*, cluster: Cluster, project: Project | None, error: str, result: ApplyResult | None) -> None:
    audit_record(
        actor=None,
        action=actions.CLUSTER_PUSH_FAILED if error else actions.CLUSTER_PUSHED,
        target=cluster,
        department_id=project.department_id if project else None,
        details={
            "project": project.slug if project else None,
            "namespace": project.slug if project else None,
            "error": error,
            "applied": result.applied if result else 0,
            "pruned": result.pruned if result else 0,
        },
        outcome=Outcome.FAILURE if error else Outcome.SUCCESS,
    )


@transaction.atomic
def cluster_sync_request(*, actor: User | None, cluster_id: int) -> int:
    """Queue a push of everything on the cluster (the API's and the admin's "sync now"), comparing
    every object with the cluster; returns how many pushes were queued."""
    if actor is not None:
        require_platform_admin(actor, to="sync a cluster")
    cluster = Cluster.objects.get(pk=cluster_id)
    # Compare every cluster-wide object with the cluster, not only those whose inputs changed:
    # "sync now" is also how someone puts right what was changed by hand.
    AppliedObject.objects.filter(cluster=cluster).delete()
    push_enqueue(cluster_id=cluster.pk, project_id=None)
    project_ids = selectors.cluster_project_ids(cluster=cluster)
    for project_id in project_ids:
        push_enqueue(cluster_id=cluster.pk, project_id=project_id)
    return 1 + len(project_ids)
