"""Thin periodic task (gpuportal/periodic.py)."""

from __future__ import annotations

from celery import shared_task

from custody.anchors import custody_anchor


@shared_task
def custody_anchor_task() -> int | None:
    """Anchor the moved chain heads in the audit log; the audit event's sequence number, if any."""
    event = custody_anchor()
    return event.seq if event is not None else None
