from __future__ import annotations

from celery import shared_task

from clusters.drivers import DriverError
from clusters.services import cluster_sync_project


@shared_task(
    bind=True,
    autoretry_for=(DriverError,),
    retry_backoff=2,
    retry_backoff_max=300,
    retry_jitter=True,
    max_retries=8,
)
def cluster_sync_project_task(self: object, cluster_id: int, project_id: int) -> None:
    cluster_sync_project(cluster_id=cluster_id, project_id=project_id)
