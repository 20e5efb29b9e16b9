"""A Celery task's records carry the request id of the request that enqueued it: through a real
broker and worker (the id travels as a message header), and in-process (the request's own
context); a task nobody's request sent gets an id of its own, shared by everything it writes."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest
from celery import Celery
from celery.contrib.testing.worker import start_worker

from kernel.logs.tasks import HEADER, task_headers_add
from kernel.request_context import RequestContext, active_request_context, current_request_context, request_context
from tests.observability.log_capture import Captured, json_logs

__all__ = ["json_logs"]  # the fixture

log = logging.getLogger("gpuportal.test")


def origin(request_id: str) -> Any:
    return request_context(RequestContext(request_id=request_id, source_ip="192.0.2.1", user_agent="pytest"))


app = Celery("logs-test", broker="memory://", backend="cache+memory://", set_as_current=False)
app.conf.task_eager_propagates = True


@app.task(name="tests.logs.note")
def note(label: str) -> str:
    log.info("task %s ran", label)
    log.info("task %s ended", label)
    return current_request_context().request_id


@pytest.fixture
def worker_app() -> Iterator[Celery]:
    app.conf.task_always_eager = False
    with start_worker(app, pool="solo", perform_ping_check=False, shutdown_timeout=10):
        yield app


@pytest.fixture
def eager_app() -> Iterator[Celery]:
    app.conf.task_always_eager = True
    yield app
    app.conf.task_always_eager = False


def test_a_task_sent_through_a_broker_logs_the_request_id_of_the_request_that_sent_it(
    worker_app: Celery, json_logs: Captured
) -> None:
    note = worker_app.tasks["tests.logs.note"]
    with origin("origin-42"):
        result = note.delay("sent")
    assert result.get(timeout=20) == "origin-42"  # the run's context: what its audit events record too
    ran, ended = [record for record in json_logs.of("gpuportal.test") if "sent" in record["message"]]
    assert ran["request_id"] == ended["request_id"] == "origin-42"
    assert ran["task_name"] == "tests.logs.note" and ran["task_id"] == result.id


def test_a_task_no_request_sent_gets_one_fresh_id_per_run(
    worker_app: Celery, json_logs: Captured
) -> None:
    note = worker_app.tasks["tests.logs.note"]
    first, second = note.delay("one").get(timeout=20), note.delay("two").get(timeout=20)
    records = json_logs.of("gpuportal.test")
    ids = {record["message"].split()[1]: record["request_id"] for record in records}
    assert ids["one"] == first and ids["two"] == second and first != second
    assert [record["request_id"] for record in records if "one" in record["message"]] == [first, first]


def test_an_in_process_task_keeps_the_context_of_the_request_it_runs_in(eager_app: Celery, json_logs: Captured) -> None:
    note = eager_app.tasks["tests.logs.note"]
    with origin("page-7"):
        assert note.delay("eager").get() == "page-7"
        assert active_request_context() is not None and active_request_context().request_id == "page-7"  # type: ignore[union-attr]
    assert active_request_context() is None
    records = json_logs.of("gpuportal.test")
    assert {record["request_id"] for record in records} == {"page-7"}
    assert all(record["task_name"] == "tests.logs.note" for record in records)


def test_the_header_is_added_only_inside_a_request_and_never_overrides_one_already_set() -> None:
    headers: dict[str, Any] = {}
    task_headers_add(headers=headers)
    assert headers == {}
    with origin("r-1"):
        task_headers_add(headers=headers)
    assert headers == {HEADER: "r-1"}
    preset = {HEADER: "kept"}
    with origin("r-2"):
        task_headers_add(headers=preset)
    assert preset == {HEADER: "kept"}
