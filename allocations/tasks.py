"""Thin tasks: load by id, call a service, retry with exponential backoff."""

from __future__ import annotations

from typing import Any

from celery import Task, shared_task

from allocations.services import (
    allocation_provision_failed,
    allocation_provision_start,
    allocation_provision_succeeded,
    allocations_expire,
)
from clusters.drivers import DriverError
from clusters.services import cluster_sync_project

PROVISION_MAX_RETRIES = 6


class ProvisionTask(Task):  # type: ignore[type-arg]
    def on_failure(self, exc: BaseException, task_id: str, args: tuple[Any, ...], kwargs: dict[str, Any], einfo: Any) -> None:
        allocation_provision_failed(allocation_id=int(args[0]), reason=str(exc) or exc.__class__.__name__)


@shared_task(
    bind=True,
    base=ProvisionTask,
    autoretry_for=(DriverError,),
    retry_backoff=2,
    retry_backoff_max=300,
    retry_jitter=True,
    max_retries=PROVISION_MAX_RETRIES,
)
def allocation_provision_task(self: Task, allocation_id: int) -> None:  # type: ignore[type-arg]
    allocation = allocation_provision_start(allocation_id=allocation_id)
    if allocation is None or allocation.cluster_id is None:
        return
    cluster_sync_project(cluster_id=allocation.cluster_id, project_id=allocation.project_id)
    allocation_provision_succeeded(allocation_id=allocation_id)


@shared_task
def allocations_expire_task() -> int:
    return allocations_expire()
