"""Counters kept by the serving and worker processes: HTTP requests, Celery task outcomes and push lag.

Under gunicorn (several worker processes) and Celery's prefork pool, set
``PROMETHEUS_MULTIPROC_DIR`` to an empty folder shared by the processes of one pod: each process
then writes its counters to files there and ``/metrics`` (or the worker's metrics port) adds them
up (prometheus_client's multiprocess mode; gunicorn's ``child_exit`` hook in
``gpuportal/gunicorn_conf.py`` marks a dead worker's files). Without it (``make run``, one
process) the counters live in this process.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from typing import Any

from django.http import HttpRequest, HttpResponse
from prometheus_client import CollectorRegistry, Counter, Histogram, disable_created_metrics, multiprocess
from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from delivery.metrics import PUSH_LAG

# Buckets for request latencies (seconds): the API answers in milliseconds; approvals with
# placement can take a second.
_HTTP_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
_TASK_BUCKETS = (0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 15.0, 60.0, 300.0)

# No ``_created`` series: they double the output and nothing here reads them.
disable_created_metrics()  # type: ignore[no-untyped-call]  # prometheus_client leaves it unannotated

# Not registered in the default registry: /metrics builds its own registry per scrape.
HTTP_REQUESTS = Counter(
    "gpuportal_http_requests", "HTTP requests answered, by route (the URL pattern) and status.",
    ["method", "route", "status"], registry=None,
)  # fmt: skip
HTTP_DURATION = Histogram(
    "gpuportal_http_request_duration_seconds", "Time to answer an HTTP request, by route.",
    ["method", "route"], buckets=_HTTP_BUCKETS, registry=None,
)  # fmt: skip
CELERY_TASKS = Counter(
    "gpuportal_celery_tasks", "Celery tasks run, by task and outcome (succeeded, failed, retried).",
    ["task", "outcome"], registry=None,
)  # fmt: skip
CELERY_DURATION = Histogram(
    "gpuportal_celery_task_duration_seconds", "Time a Celery task ran, by task.", ["task"], buckets=_TASK_BUCKETS,
    registry=None,
)  # fmt: skip
PROCESS_METRICS = (HTTP_REQUESTS, HTTP_DURATION, CELERY_TASKS, CELERY_DURATION, PUSH_LAG)
METRICS_PATH = "/metrics"


def multiprocess_dir() -> str | None:
    return os.environ.get("PROMETHEUS_MULTIPROC_DIR") or None


class _ThisProcess(Collector):
    def collect(self) -> Iterator[Metric]:
        for metric in PROCESS_METRICS:
            yield from metric.collect()


def process_collectors_register(registry: CollectorRegistry) -> None:
    """The process counters, added up over the pod's processes in multiprocess mode."""
    if multiprocess_dir():
        multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
    else:
        registry.register(_ThisProcess())


def route_of(request: HttpRequest) -> str:
    """The URL pattern that answered (bounded cardinality), never the raw path."""
    match = getattr(request, "resolver_match", None)
    return match.route if match is not None and match.route else "unmatched"


class RequestMetricsMiddleware:
    """Counts every request and times it, except scrapes of ``/metrics`` itself."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if request.path == METRICS_PATH:
            return self.get_response(request)
        began = time.perf_counter()
        response = self.get_response(request)
        route = route_of(request)
        HTTP_REQUESTS.labels(request.method or "", route, str(response.status_code)).inc()
        HTTP_DURATION.labels(request.method or "", route).observe(time.perf_counter() - began)
        return response


_started: dict[str, float] = {}


def task_started(task_id: str | None = None, **_: Any) -> None:
    if task_id:
        _started[task_id] = time.perf_counter()


def task_finished(task_id: str | None = None, task: Any = None, **_: Any) -> None:
    began = _started.pop(task_id, None) if task_id else None
    if began is not None and task is not None:
        CELERY_DURATION.labels(task.name).observe(time.perf_counter() - began)


def task_succeeded(sender: Any = None, **_: Any) -> None:
    CELERY_TASKS.labels(getattr(sender, "name", "unknown"), "succeeded").inc()


def task_failed(sender: Any = None, **_: Any) -> None:
    CELERY_TASKS.labels(getattr(sender, "name", "unknown"), "failed").inc()


def task_retried(sender: Any = None, request: Any = None, **_: Any) -> None:
    name = getattr(sender, "name", None) or getattr(request, "task", None) or "unknown"
    CELERY_TASKS.labels(name, "retried").inc()


def celery_signals_connect() -> None:
    """Count task outcomes wherever tasks run (a worker, or in-process on the embedded default)."""
    from celery import signals

    signals.task_prerun.connect(task_started, weak=False)
    signals.task_postrun.connect(task_finished, weak=False)
    signals.task_success.connect(task_succeeded, weak=False)
    signals.task_failure.connect(task_failed, weak=False)
    signals.task_retry.connect(task_retried, weak=False)
    signals.worker_init.connect(worker_metrics_serve, weak=False)


def worker_metrics_serve(**_: Any) -> None:
    """A Celery worker's own metrics port (``GPUPORTAL_WORKER_METRICS_PORT``), started once in the
    worker's main process; it adds up the pool's processes through the multiprocess folder."""
    from observability import conf

    port = conf.worker_metrics_port()
    if not port:
        return
    from prometheus_client import start_http_server

    registry = CollectorRegistry()
    process_collectors_register(registry)
    start_http_server(port, addr=conf.worker_metrics_address(), registry=registry)
