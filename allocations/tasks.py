"""Thin tasks: load by id, call a service. Provisioning is delivered through the cluster push
outbox (``clusters.outbox``): approval writes the push row, a worker applies it."""

from __future__ import annotations

from celery import shared_task

from allocations.services import allocations_expire


@shared_task
def allocations_expire_task() -> int:
    return allocations_expire()
