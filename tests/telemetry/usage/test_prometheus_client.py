"""The Prometheus client: what it sends, the envelope it accepts, errors as PrometheusError and
warnings as no data."""

from __future__ import annotations

import datetime
import json
from typing import Any

import pytest
import requests

from telemetry.usage.prometheus import PrometheusClient, PrometheusError, parse_answer
from tests.telemetry.usage.scene import BUCKET, uuid

AT = datetime.datetime(2024, 1, 1, 10, 35, tzinfo=datetime.UTC)


class FakeResponse:
    def __init__(self, status: int, body: Any) -> None:
        self.status_code = status
        self.text = body if isinstance(body, str) else json.dumps(body)


class FakeSession(requests.Session):
    def __init__(self, answer: FakeResponse | Exception) -> None:
        super().__init__()
        self.answer = answer
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def post(self, url: str | bytes, data: Any = None, json: Any = None, **kwargs: Any) -> Any:  # noqa: A002
        self.calls.append((str(url), {"data": data, **kwargs}))
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


def vector(*samples: tuple[dict[str, str], str], warnings: list[str] | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {
        "status": "success",
        "data": {
            "resultType": "vector",
            "result": [{"metric": labels, "value": [1704105300, value]} for labels, value in samples],
        },
    }
    if warnings:
        body["warnings"] = warnings
    return body


def test_it_posts_the_query_form_encoded_with_the_evaluation_time_and_timeout() -> None:
    session = FakeSession(FakeResponse(200, vector(({"UUID": "GPU-1"}, "0.5"), ({"UUID": "GPU-2"}, "NaN"))))
    client = PrometheusClient("http://prometheus.monitoring:9090/", timeout=7, session=session)
    answer = client.query("up", at=AT)
    url, sent = session.calls[0]
    assert url == "http://prometheus.monitoring:9090/api/v1/query"
    assert sent["data"] == {"query": "up", "time": "1704105300.000", "timeout": "7s"} and sent["timeout"] == 7
    assert [(sample.labels, sample.value) for sample in answer.samples] == [({"UUID": "GPU-1"}, 0.5)]  # NaN left out
    assert client.queries == 1


def test_an_answer_with_warnings_is_no_data() -> None:
    session = FakeSession(FakeResponse(200, vector(({"UUID": "GPU-1"}, "0.5"), warnings=["a shard did not answer"])))
    client = PrometheusClient("http://p:9090", timeout=1, session=session)
    assert client.vector("up", at=AT) is None
    assert client.query("up", at=AT).warnings == ("a shard did not answer",)


@pytest.mark.parametrize(
    ("status", "body", "kind"),
    [
        (400, {"status": "error", "errorType": "bad_data", "error": "parse error"}, "bad_data"),
        (503, {"status": "error", "errorType": "unavailable", "error": "not ready"}, "unavailable"),
        (502, "<html>Bad Gateway</html>", "http"),
        (200, "not json", "bad_response"),
        (200, [1, 2], "bad_response"),
        (200, {"status": "success", "data": {"resultType": "matrix", "result": []}}, "bad_response"),
        (200, {"status": "success", "data": {"resultType": "vector", "result": [{"metric": {}}]}}, "bad_response"),
    ],
)
def test_anything_but_a_vector_raises_a_prometheus_error(status: int, body: Any, kind: str) -> None:
    with pytest.raises(PrometheusError) as raised:
        parse_answer(status, body if isinstance(body, str) else json.dumps(body))
    assert raised.value.kind == kind


@pytest.mark.parametrize(("failure", "kind"), [(requests.ConnectTimeout("slow"), "timeout"),
                                               (requests.ConnectionError("refused"), "unreachable")])  # fmt: skip
def test_an_unreachable_or_slow_server_raises_a_prometheus_error(failure: Exception, kind: str) -> None:
    client = PrometheusClient("http://p:9090", timeout=1, session=FakeSession(failure))
    with pytest.raises(PrometheusError) as raised:
        client.query("up", at=AT)
    assert raised.value.kind == kind and client.queries == 1


def test_a_naive_evaluation_time_is_refused() -> None:
    client = PrometheusClient("http://p:9090", timeout=1, session=FakeSession(FakeResponse(200, vector())))
    with pytest.raises(ValueError, match="timezone-aware"):
        client.query("up", at=AT.replace(tzinfo=None))


def test_the_real_server_answers_a_range_function_at_the_bucket_end(prometheus_url: str) -> None:
    client = PrometheusClient(prometheus_url, timeout=10)
    end = BUCKET + datetime.timedelta(minutes=5)
    samples = client.vector(f'count_over_time(DCGM_FI_PROF_GR_ENGINE_ACTIVE{{UUID="{uuid(2)}"}}[300s])', at=end)
    assert samples is not None and [sample.value for sample in samples] == [20.0]  # a scrape every 15 s


def test_the_real_server_refuses_a_bad_query_as_bad_data(prometheus_url: str) -> None:
    with pytest.raises(PrometheusError) as raised:
        PrometheusClient(prometheus_url, timeout=10).query("max by (", at=AT)
    assert raised.value.kind == "bad_data" and raised.value.status == 400
