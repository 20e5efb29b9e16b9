"""The Celery application. Without ``CELERY_BROKER_URL`` tasks run eagerly in-process.

Logging: a worker and beat write through the portal's own configuration (``settings.LOGGING``,
``kernel.logs``) instead of Celery's; a task's records carry the request id of the request that
enqueued it (``kernel.logs.tasks``).
"""

from __future__ import annotations

import logging.config
import os
from typing import Any

from celery import Celery, signals

from kernel.logs.tasks import task_context_signals_connect

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gpuportal.settings")

app = Celery("gpuportal")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
task_context_signals_connect()


@app.on_after_configure.connect(weak=False)
def eager_broker_in_memory(sender: Celery, **_: Any) -> None:
    """Without a broker tasks run eagerly, yet Celery still takes a producer for each: an in-memory
    transport keeps kombu from reaching for an AMQP server on localhost (and from warning that no
    hostname was supplied, once per process)."""
    if sender.conf.task_always_eager and not sender.conf.broker_url:
        sender.conf.update(broker_url="memory://localhost/")


@signals.setup_logging.connect(weak=False)
def logging_setup(**_: Any) -> None:
    """Connected, it keeps Celery from configuring logging (and from redirecting standard output)."""
    from django.conf import settings

    logging.config.dictConfig(settings.LOGGING)


@signals.worker_process_init.connect(weak=False)
def placement_tables_build(**_: Any) -> None:
    """Each worker process builds the placement engine's MIG tables as it starts (in the background),
    not in its first approval."""
    from allocations.booking.reservations import placement_engine_warm_at_start

    placement_engine_warm_at_start()
