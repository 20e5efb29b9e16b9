"""Handing work to Celery by task name, after the transaction that recorded it committed.

Tasks are looked up in the app's registry rather than sent with ``send_task`` so that the embedded
default (no broker: tasks run eagerly in-process) still runs them. A process that is not a worker,
a management command such as ``seed_demo`` for instance, has not imported the apps' task modules:
Celery's autodiscovery runs on the loader's ``import_default_modules``, so a name not yet
registered triggers it once instead of failing with ``NotRegistered``.
"""

from __future__ import annotations

import logging
from typing import Any

from celery import current_app

log = logging.getLogger(__name__)


def task_registered(name: str) -> Any:
    """The Celery task called ``name``, importing the apps' task modules first when needed."""
    if name not in current_app.tasks:
        current_app.loader.import_default_modules()
    return current_app.tasks[name]


def task_hand_over(name: str, object_id: int, *, countdown: float | None = None) -> bool:
    """Queue ``name(object_id)``; False (the row waits for its dispatcher) when the broker cannot be
    reached. Never raises: a broker outage must not fail the request."""
    try:
        task = task_registered(name)
        if countdown is None:
            task.apply_async((object_id,), retry=False)
        else:
            task.apply_async((object_id,), countdown=countdown, retry=False)
    except Exception:
        log.warning("could not hand %s(%s) to the broker; the dispatcher will retry", name, object_id, exc_info=True)
        return False
    return True
