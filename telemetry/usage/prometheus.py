"""A small client of Prometheus's HTTP API: instant queries only.

``POST /api/v1/query`` with the query form-encoded (long queries stay out of the URL), an explicit
evaluation ``time`` and the configured timeout. The answer's envelope is checked: anything but
``status: success`` with a vector result raises :class:`PrometheusError`, as do an unreachable
server, a timeout and a body that is not the API's JSON.

Warnings: Prometheus answers ``success`` with ``warnings`` when the result may be incomplete (a
remote-read endpoint or a shard that did not answer, a limit that cut series). Incomplete data
would look like gaps, and gaps are counted as missing samples, so :meth:`PrometheusClient.vector`
returns ``None`` for such an answer: the caller treats that query as having no data at all, never
as a partial answer.
"""

from __future__ import annotations

import datetime
import json
import math
from dataclasses import dataclass, field
from typing import Any

import requests


class PrometheusError(Exception):
    """A query that produced no usable answer; ``kind`` says why (unreachable, timeout, http,
    bad_response, or Prometheus's own ``errorType``: bad_data, execution, timeout, ...)."""

    def __init__(self, message: str, *, kind: str, status: int | None = None) -> None:
        super().__init__(message)
        self.kind = kind
        self.status = status


@dataclass(frozen=True)
class Sample:
    """One element of an instant vector: the series' labels (``__name__`` included when kept) and
    its value. NaN values are left out of a vector."""

    labels: dict[str, str]
    value: float


@dataclass(frozen=True)
class QueryAnswer:
    samples: list[Sample]
    warnings: tuple[str, ...] = ()


@dataclass
class PrometheusClient:
    """One Prometheus server; ``queries`` counts the queries sent (answered or not)."""

    base_url: str
    timeout: float
    session: requests.Session = field(default_factory=requests.Session)
    queries: int = 0

    def query(self, promql: str, *, at: datetime.datetime) -> QueryAnswer:
        """The instant vector ``promql`` evaluates to at ``at``."""
        url = self.base_url.rstrip("/") + "/api/v1/query"
        form = {"query": promql, "time": _timestamp(at), "timeout": f"{self.timeout:g}s"}
        self.queries += 1
        try:
            response = self.session.post(url, data=form, timeout=self.timeout)
        except requests.Timeout as exc:
            raise PrometheusError(
                f"Prometheus at {self.base_url} did not answer in {self.timeout:g} s", kind="timeout"
            ) from exc
        except requests.RequestException as exc:
            raise PrometheusError(f"Prometheus at {self.base_url} is unreachable: {exc}", kind="unreachable") from exc
        return parse_answer(response.status_code, response.text, source=self.base_url)

    def vector(self, promql: str, *, at: datetime.datetime) -> list[Sample] | None:
        """The samples of ``promql`` at ``at``, or ``None`` when Prometheus warned that the answer
        may be incomplete (treated as no data, see the module's docstring)."""
        answer = self.query(promql, at=at)
        return None if answer.warnings else answer.samples


def _timestamp(at: datetime.datetime) -> str:
    if at.tzinfo is None:
        raise ValueError("the evaluation time must be timezone-aware")
    return f"{at.timestamp():.3f}"


def parse_answer(status: int, body: str, *, source: str = "Prometheus") -> QueryAnswer:
    """The envelope ``{status, data: {resultType, result}, errorType, error, warnings}``."""
    try:
        envelope: Any = json.loads(body)
    except ValueError:
        raise PrometheusError(
            f"{source} answered HTTP {status} with a body that is not JSON",
            kind="http" if status >= 400 else "bad_response",
            status=status,
        ) from None
    if not isinstance(envelope, dict):
        raise PrometheusError(
            f"{source} answered with a JSON {type(envelope).__name__}", kind="bad_response", status=status
        )
    if envelope.get("status") != "success":
        kind = str(envelope.get("errorType") or "http")
        raise PrometheusError(
            f"{source}: {kind}: {envelope.get('error') or 'HTTP ' + str(status)}", kind=kind, status=status
        )
    data = envelope.get("data")
    if not isinstance(data, dict) or data.get("resultType") != "vector" or not isinstance(data.get("result"), list):
        raise PrometheusError(f"{source} did not answer with an instant vector", kind="bad_response", status=status)
    warnings = envelope.get("warnings") or []
    return QueryAnswer(samples=_samples(data["result"], source=source), warnings=tuple(str(text) for text in warnings))


def _samples(result: list[Any], *, source: str) -> list[Sample]:
    samples: list[Sample] = []
    for item in result:
        try:
            labels = item["metric"]
            value = float(item["value"][1])  # values are strings: "0.5", "NaN", "+Inf"
        except (KeyError, IndexError, TypeError, ValueError):
            raise PrometheusError(
                f"{source} answered a malformed sample: {str(item)[:200]}", kind="bad_response"
            ) from None
        if not isinstance(labels, dict):
            raise PrometheusError(f"{source} answered a malformed sample: {str(item)[:200]}", kind="bad_response")
        if math.isnan(value):
            continue
        samples.append(Sample(labels={str(key): str(text) for key, text in labels.items()}, value=value))
    return samples
