"""What every log record carries besides its message, read when the record is formatted.

- ``request_id``: the id of the request being served (``kernel.request_context``: a trusted proxy's
  valid ``X-Request-ID`` or a generated one, also the response's ``X-Request-ID`` and the audit
  events' ``request_id``); in a Celery task, the id of the request that enqueued it (``tasks``).
- ``user`` and ``user_id``: the signed-in user of that request, once authentication has run (the
  session's user, or the API token's); never looked up for the log's sake, so a log line costs no
  query.
- ``task_id`` and ``task_name`` in a Celery task.
- ``trace_id`` and ``span_id`` while an OpenTelemetry span is active (only when tracing is on:
  the module is never imported for the log's sake).
"""

from __future__ import annotations

import contextvars
import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from kernel.request_context import active_request_context

_http_request: contextvars.ContextVar[Any | None] = contextvars.ContextVar("gpuportal_log_http_request", default=None)
_task: contextvars.ContextVar[TaskRun | None] = contextvars.ContextVar("gpuportal_log_task", default=None)


@dataclass(frozen=True)
class TaskRun:
    task_id: str
    task_name: str


@contextmanager
def http_request_bound(request: Any) -> Iterator[None]:
    """Within this block records name the user of ``request`` (once it is known)."""
    token = _http_request.set(request)
    try:
        yield
    finally:
        _http_request.reset(token)


def task_run_enter(run: TaskRun) -> contextvars.Token[TaskRun | None]:
    return _task.set(run)


def task_run_leave(token: contextvars.Token[TaskRun | None]) -> None:
    _task.reset(token)


def user_of(request: Any) -> tuple[str | None, int | None]:
    """The username and id of ``request``'s user when authentication has already resolved one.

    Django's ``AuthenticationMiddleware`` puts a lazy object on the request, evaluated (a session
    read) the first time a view asks; DRF replaces it with the authenticated user. Neither is forced
    here."""
    if request is None:
        return None, None
    user = getattr(request, "__dict__", {}).get("user")
    if user is None:
        return None, None
    wrapped = getattr(user, "_wrapped", user)  # a SimpleLazyObject not yet evaluated holds a sentinel
    if not hasattr(wrapped, "is_authenticated") or not wrapped.is_authenticated:
        return None, None
    username = wrapped.get_username() if hasattr(wrapped, "get_username") else None
    return username, getattr(wrapped, "pk", None)


def _trace_ids() -> tuple[str | None, str | None]:
    trace = sys.modules.get("opentelemetry.trace")
    if trace is None:
        return None, None
    context = trace.get_current_span().get_span_context()
    if not context.is_valid:
        return None, None
    return format(context.trace_id, "032x"), format(context.span_id, "016x")


def record_context(record: logging.LogRecord | None = None) -> dict[str, Any]:
    """The context fields of a record formatted now, ``None`` where unknown (``request_id`` and
    ``user`` are always present; the task and trace fields only where they apply).

    Django writes its ``django.request`` line of a 4xx or 5xx answer after the middleware is done,
    with the request as the record's ``request``: its id and user are read from there."""
    request_context = active_request_context()
    request_id = request_context.request_id if request_context is not None else None
    http_request = _http_request.get()
    if request_id is None and record is not None:
        late = getattr(record, "request", None)
        late_id = getattr(late, "request_id", None)  # set by RequestContextMiddleware
        if isinstance(late_id, str):
            request_id, http_request = late_id, late
    username, user_id = user_of(http_request)
    fields: dict[str, Any] = {"request_id": request_id, "user": username, "user_id": user_id}
    run = _task.get()
    if run is not None:
        fields["task_id"] = run.task_id
        fields["task_name"] = run.task_name
    trace_id, span_id = _trace_ids()
    if trace_id is not None:
        fields["trace_id"] = trace_id
        fields["span_id"] = span_id
    return fields
