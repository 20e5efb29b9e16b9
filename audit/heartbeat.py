"""The checkpoint heartbeat of the embedded default (in-process tasks, hence no Celery beat).

With a broker, beat's ``audit-checkpoint-publish`` entry publishes a checkpoint every
``GPUPORTAL_AUDIT_CHECKPOINT_INTERVAL_SECONDS``. Without one, nothing did, so the newest checkpoint
aged until ``AuditCheckpointStale`` fired. Here the serving process runs the same work on a daemon
thread at the same interval. Several serving processes (or a beat next to them) publish one
checkpoint per interval between them, not one each: ``checkpoint_heartbeat_publish`` checks, under
the checkpoint lock, whether another publisher made one less than ``DUE_FRACTION`` of an interval
ago, and then does nothing.
"""

from __future__ import annotations

import atexit
import logging
import threading

from celery import current_app
from django.core.exceptions import ImproperlyConfigured
from django.db import connection, connections, transaction

from audit.checkpoints import CHECKPOINT_LOCK_ID, AuditIntegrityError, checkpoint_backfill, checkpoint_publish
from audit.conf import audit_checkpoint_interval_seconds
from audit.models import AuditCheckpoint
from audit.services import chain_lock
from kernel.clock import clock_now
from kernel.periodic import PeriodicThread

log = logging.getLogger(__name__)

DUE_FRACTION = 0.9
"""A checkpoint is due when the newest one is at least this fraction of an interval old: a
publisher whose tick comes just before another's skips, and none skips two intervals running."""
STOP_TIMEOUT_SECONDS = 10.0
"""How long a stopping process waits for a publish under way to finish (it commits or rolls back
as a whole; a checkpoint committed but not yet in the external folder is written by the next
publish's backfill)."""


def checkpoint_heartbeat_publish(*, interval_seconds: float) -> AuditCheckpoint | None:
    """Publish a checkpoint (writing first any the external folder misses) unless one was made less
    than ``DUE_FRACTION`` of ``interval_seconds`` ago; returns the new one, or None when not due.

    The check and the publish run under the checkpoint lock, so concurrent publishers queue and the
    second sees the first one's checkpoint."""
    with transaction.atomic():
        chain_lock(connection, CHECKPOINT_LOCK_ID)
        newest = AuditCheckpoint.objects.order_by("-number").values_list("created_at", flat=True).first()
        if newest is not None and (clock_now() - newest).total_seconds() < interval_seconds * DUE_FRACTION:
            return None
        checkpoint_backfill()
        return checkpoint_publish()


class CheckpointHeartbeat(PeriodicThread):
    """``checkpoint_heartbeat_publish`` every ``interval`` seconds on a daemon thread. A failed run
    is logged (an integrity failure as an error: nothing was signed, someone must look) and the
    next run tries again; the thread closes its database connections after each run."""

    thread_name = "gpuportal-audit-heartbeat"

    def __init__(self, *, interval: float) -> None:
        super().__init__(interval=interval)

    def start(self) -> CheckpointHeartbeat:
        super().start()
        return self

    def run_once(self) -> AuditCheckpoint | None:
        try:
            return checkpoint_heartbeat_publish(interval_seconds=self.interval)
        except AuditIntegrityError as error:
            log.error("the audit checkpoint heartbeat refused to sign: %s", error)
        except ImproperlyConfigured as error:
            log.error("the audit checkpoint heartbeat cannot run: %s", error)
        except Exception:  # the next run tries again
            log.exception("the in-process audit checkpoint heartbeat failed")
        finally:
            connections.close_all()  # this thread's connections only
        return None


_heartbeat: CheckpointHeartbeat | None = None
_guard = threading.Lock()


def audit_heartbeat_start() -> CheckpointHeartbeat | None:
    """Start this process's checkpoint heartbeat when tasks run in-process (no broker, hence no
    beat); once per process, stopped when the process exits. With a broker, beat publishes and this
    does nothing."""
    global _heartbeat
    if not current_app.conf.task_always_eager:
        return None
    with _guard:
        if _heartbeat is None or not _heartbeat.running:
            _heartbeat = CheckpointHeartbeat(interval=float(audit_checkpoint_interval_seconds())).start()
            atexit.register(_heartbeat.stop, timeout=STOP_TIMEOUT_SECONDS)
        return _heartbeat
