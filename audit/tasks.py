"""Celery tasks of the audit log. Beat runs ``audit_checkpoint_publish_task`` every minute."""

from __future__ import annotations

from celery import shared_task

from audit.checkpoints import checkpoint_backfill, checkpoint_publish


@shared_task(name="audit.tasks.audit_checkpoint_publish_task")
def audit_checkpoint_publish_task() -> int:
    """Publish a checkpoint (a heartbeat when nothing changed); returns its number.

    An ``AuditIntegrityError`` is not retried: it means the log or its checkpoints were tampered
    with, and must page someone. A failed external write is retried by the next run's backfill.
    """
    checkpoint_backfill()
    return checkpoint_publish().number
