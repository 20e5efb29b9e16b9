"""The request id travels from the request that enqueues a Celery task into the task's run.

- ``before_task_publish``: while a request (or a task run) is being served, its id goes into the
  message as the header ``gpuportal_request_id``.
- ``task_prerun``: the run takes that id as its request context, so its log lines and the audit
  events it writes carry the id of the request that caused them; a run without one (Celery beat's,
  or a task sent from a shell) gets a fresh id of its own, shared by everything it writes. A task
  run in-process (no broker) keeps the context of the request it runs in.
- ``task_postrun``: the worker's context is restored (it is sent after a failure too).

The task's id and name are added to its records (``kernel.logs.context``).
"""

from __future__ import annotations

import uuid
from contextlib import ExitStack
from typing import Any

from kernel.logs.context import TaskRun, task_run_enter, task_run_leave
from kernel.request_context import RequestContext, active_request_context, request_context, request_id_valid

HEADER = "gpuportal_request_id"

_runs: dict[str, ExitStack] = {}


def task_headers_add(headers: dict[str, Any] | None = None, **_: Any) -> None:
    context = active_request_context()
    if context is not None and headers is not None:
        headers.setdefault(HEADER, context.request_id)


def _header_of(task: Any) -> str | None:
    request = getattr(task, "request", None)
    if request is None:
        return None
    supplied = getattr(request, HEADER, None)
    if supplied is None:
        supplied = (getattr(request, "headers", None) or {}).get(HEADER)
    return str(supplied) if request_id_valid(supplied) else None


def task_context_enter(task_id: str | None = None, task: Any = None, **_: Any) -> None:
    if task_id is None:
        return
    stack = ExitStack()
    supplied = _header_of(task)
    if supplied is not None:
        stack.enter_context(request_context(RequestContext(request_id=supplied, source_ip=None, user_agent="")))
    elif active_request_context() is None:
        stack.enter_context(request_context(RequestContext(request_id=uuid.uuid4().hex, source_ip=None, user_agent="")))
    token = task_run_enter(TaskRun(task_id=task_id, task_name=str(getattr(task, "name", "") or "")))
    stack.callback(task_run_leave, token)
    _runs[task_id] = stack


def task_context_leave(task_id: str | None = None, **_: Any) -> None:
    stack = _runs.pop(task_id, None) if task_id is not None else None
    if stack is not None:
        stack.close()


def task_context_signals_connect() -> None:
    """Connect the three receivers (idempotent: Celery keys them by ``dispatch_uid``)."""
    from celery import signals

    signals.before_task_publish.connect(task_headers_add, weak=False, dispatch_uid="gpuportal.logs.headers")
    signals.task_prerun.connect(task_context_enter, weak=False, dispatch_uid="gpuportal.logs.enter")
    signals.task_postrun.connect(task_context_leave, weak=False, dispatch_uid="gpuportal.logs.leave")
