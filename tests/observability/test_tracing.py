"""Tracing: with an OTLP endpoint, requests become spans exported over OTLP/HTTP to a real
receiver, and log records written inside them carry their trace id; without one nothing of
OpenTelemetry is imported; with one but without the packages, a warning and no failure."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import requires_postgres

ROOT = Path(__file__).resolve().parents[2]
POSTGRES: pytest.MarkDecorator = requires_postgres()

# Serves /livez and an unknown API path (neither needs a database), then flushes the buffered spans.
SERVE = """
import django, json, sys
django.setup()
from django.test import Client
from observability.tracing import tracing_flush
client = Client()
print(json.dumps({
    "livez": client.get("/livez").status_code,
    "api": client.get("/api/v1/no-such-thing/").status_code,
    "flushed": tracing_flush(),
    "otel": sorted(name for name in sys.modules if name.startswith("opentelemetry")),
}))
"""


class Collector(BaseHTTPRequestHandler):
    """A minimal OTLP/HTTP receiver: keeps the body of each ``POST /v1/traces``."""

    bodies: list[bytes]

    def do_POST(self) -> None:  # noqa: N802 - the http.server interface
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        if self.path == "/v1/traces":
            self.server.bodies.append(body)  # type: ignore[attr-defined]
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def collector() -> Iterator[ThreadingHTTPServer]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Collector)
    server.bodies = []  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def serve(tmp_path: Path, env: dict[str, str], prelude: str = "", code: str = SERVE) -> tuple[dict[str, Any], str]:
    environment = {key: value for key, value in os.environ.items() if not key.startswith(("OTEL_", "GPUPORTAL_LOG"))}
    environment.update({
        "DJANGO_SETTINGS_MODULE": "gpuportal.settings", "GPUPORTAL_DEBUG": "true", "GPUPORTAL_LOG_LEVEL": "DEBUG",
        "GPUPORTAL_ALLOWED_HOSTS": "testserver",
        "DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite3'}", "GPUPORTAL_VAR_DIR": str(tmp_path), **env,
    })
    done = subprocess.run([sys.executable, "-c", prelude + code], cwd=ROOT, env=environment, capture_output=True,
                          text=True, timeout=180, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1]), done.stderr


def test_without_an_endpoint_nothing_of_opentelemetry_is_imported(tmp_path: Path) -> None:
    answer, _ = serve(tmp_path, {})
    assert (answer["livez"], answer["api"]) == (200, 404)
    assert answer["otel"] == []


def test_with_an_endpoint_requests_and_queries_are_exported_as_spans_and_logs_carry_the_trace_id(
    tmp_path: Path, collector: ThreadingHTTPServer
) -> None:
    pytest.importorskip("opentelemetry.sdk")
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    endpoint = f"http://127.0.0.1:{collector.server_address[1]}"
    answer, stderr = serve(tmp_path, {"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, "OTEL_SERVICE_NAME": "portal-under-test"})
    assert answer["flushed"] is True and (answer["livez"], answer["api"]) == (200, 404)
    spans = []
    for body in collector.bodies:  # type: ignore[attr-defined]
        request = ExportTraceServiceRequest.FromString(body)
        for resource_spans in request.resource_spans:
            service = {a.key: a.value.string_value for a in resource_spans.resource.attributes}["service.name"]
            assert service == "portal-under-test"
            spans += [span for scope in resource_spans.scope_spans for span in scope.spans]
    by_name = {span.name: span for span in spans}
    # an unknown API path is answered by the API's catch-all route (its JSON 404, docs/api.md)
    assert "GET livez" in by_name and "GET ^api/" in by_name, sorted(by_name)
    records = [json.loads(line) for line in stderr.splitlines() if line.startswith("{")]
    access = {record["path"]: record for record in records if record["logger"] == "gpuportal.access"}
    assert access["/api/v1/no-such-thing/"]["trace_id"] == by_name["GET ^api/"].trace_id.hex()
    assert access["/livez"]["trace_id"] == by_name["GET livez"].trace_id.hex()
    (started,) = [record for record in records if record["message"].startswith("tracing on")]
    assert started["message"].endswith("(django, celery, psycopg)")


def test_an_endpoint_without_the_packages_is_a_warning_not_a_failure(tmp_path: Path) -> None:
    blocked = "import sys\nsys.modules['opentelemetry'] = None\n"  # as if the otel extra were not installed
    answer, stderr = serve(tmp_path, {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9"}, prelude=blocked)
    assert (answer["livez"], answer["api"]) == (200, 404)
    warnings = [json.loads(line) for line in stderr.splitlines() if line.startswith("{") and "OpenTelemetry is not installed" in line]
    assert warnings and warnings[0]["level"] == "WARNING" and "gpuportal[otel]" in warnings[0]["message"]


QUERY = """
import django, json
django.setup()
from django.db import connection
from observability.tracing import tracing_flush
with connection.cursor() as cursor:
    cursor.execute("SELECT 41 + 1")
    answer = cursor.fetchone()[0]
print(json.dumps({"answer": answer, "flushed": tracing_flush()}))
"""


@POSTGRES
def test_sql_statements_on_postgresql_are_spans_too(tmp_path: Path, collector: ThreadingHTTPServer) -> None:
    pytest.importorskip("opentelemetry.sdk")
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    endpoint = f"http://127.0.0.1:{collector.server_address[1]}"
    answer, _ = serve(tmp_path, {"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, "DATABASE_URL": os.environ["DATABASE_URL"]},
                      code=QUERY)
    assert answer == {"answer": 42, "flushed": True}
    statements = [
        {attribute.key: attribute.value.string_value for attribute in span.attributes}
        for body in collector.bodies  # type: ignore[attr-defined]
        for resource_spans in ExportTraceServiceRequest.FromString(body).resource_spans
        for scope in resource_spans.scope_spans for span in scope.spans if span.name == "SELECT"
    ]
    assert any(statement.get("db.statement") == "SELECT 41 + 1" for statement in statements), statements
