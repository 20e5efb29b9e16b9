"""The notification of a push that failed for good (docs/notifications.md): to platform admins,
written in the transaction that marks the push failed."""

from __future__ import annotations

from clusters.models import Cluster, ClusterPush
from notifications import events
from notifications.outbox import notification_enqueue
from notifications.recipients import platform_admins
from tenants.models import Project


def push_failed_notify(*, push: ClusterPush, reason: str) -> None:
    cluster = Cluster.objects.only("name").get(pk=push.cluster_id)
    project = Project.objects.only("slug", "department_id").filter(pk=push.project_id).first() if push.project_id else None
    notification_enqueue(
        event=events.PUSH_FAILED, recipients=platform_admins(),
        department_id=project.department_id if project is not None else None, subject=f"cluster:{push.cluster_id}",
        payload={"cluster": cluster.name, "cluster_id": push.cluster_id, "project": project.slug if project else None,
                 "allocation": push.allocation_id, "push": push.pk, "attempts": push.attempts, "error": reason[:1000]},
    )
