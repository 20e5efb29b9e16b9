"""Pushing desired state to clusters."""

from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from audit import actions
from audit.models import Outcome
from audit.services import audit_record
from clusters.drivers import ApplyResult, DriverError, driver_for
from clusters.models import Cluster
from clusters.rendering import render_project
from clusters.selectors import project_state_on_cluster
from tenants.models import Project


def cluster_sync_project(*, cluster_id: int, project_id: int) -> ApplyResult:
    """Bring one project's objects on one cluster to the database's desired state.

    The push happens outside any transaction (it is I/O on another system); its outcome is then
    recorded on the cluster and in the audit log. Raises ``DriverError`` when the push failed.
    """
    cluster = Cluster.objects.get(pk=cluster_id)
    project = Project.objects.select_related("department").get(pk=project_id)
    state = project_state_on_cluster(cluster=cluster, project=project)
    objects = render_project(state)
    try:
        result = driver_for(cluster).apply_project(namespace=state.namespace, objects=objects)
    except DriverError as error:
        _record_push(cluster=cluster, project=project, error=str(error), result=None)
        raise
    _record_push(cluster=cluster, project=project, error="", result=result)
    return result


@transaction.atomic
def _record_push(*, cluster: Cluster, project: Project, error: str, result: ApplyResult | None) -> None:
    Cluster.objects.filter(pk=cluster.pk).update(last_sync_at=timezone.now(), last_sync_error=error[:4000])
    if result is not None and result.applied == 0 and result.pruned == 0:
        return  # nothing changed on the cluster: nothing to record
    audit_record(
        actor=None,
        action=actions.CLUSTER_PUSH_FAILED if error else actions.CLUSTER_PUSHED,
        target=cluster,
        department_id=project.department_id,
        details={
            "project": project.slug,
            "namespace": project.slug,
            "error": error,
            "applied": result.applied if result else 0,
            "pruned": result.pruned if result else 0,
        },
        outcome=Outcome.FAILURE if error else Outcome.SUCCESS,
    )
