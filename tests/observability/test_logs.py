"""Structured logs: every record is one JSON object with the time in UTC, level, logger, message,
request id and user; one access line per request; the format and level come from the settings."""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from django.http import HttpRequest, HttpResponse
from django.test import Client
from django.urls import path

from kernel.logs.config import logging_config
from kernel.request_context import RequestContext, request_context
from tenants.access_tokens import access_token_create
from tests.conftest import World
from tests.observability.log_capture import Captured, console_logs, json_logs

__all__ = ["console_logs", "json_logs"]  # the fixtures

ROOT = Path(__file__).resolve().parents[2]
UTC_MILLIS = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")


def test_a_record_is_one_json_object_with_utc_time_level_logger_message_and_extras(json_logs: Captured) -> None:
    logging.getLogger("gpuportal.test").warning("quota %s is at %d%%", "nlp", 95, extra={"department": "nlp"})
    (record,) = json_logs.of("gpuportal.test")
    assert UTC_MILLIS.match(record["timestamp"])
    assert record["level"] == "WARNING" and record["message"] == "quota nlp is at 95%"
    assert record["department"] == "nlp"
    assert record["request_id"] is None and record["user"] is None
    assert list(record)[:5] == ["timestamp", "level", "logger", "message", "request_id"]


def test_records_written_while_a_request_is_served_carry_its_request_id(json_logs: Captured) -> None:
    with request_context(RequestContext(request_id="req-77", source_ip=None, user_agent="")):
        logging.getLogger("gpuportal.test").info("inside")
    logging.getLogger("gpuportal.test").info("outside")
    inside, outside = json_logs.of("gpuportal.test")
    assert (inside["request_id"], outside["request_id"]) == ("req-77", None)


def test_an_exception_is_one_record_with_its_traceback_in_exc_info(json_logs: Captured) -> None:
    try:
        raise RuntimeError("the cluster did not answer")
    except RuntimeError:
        logging.getLogger("gpuportal.test").exception("push failed")
    (record,) = json_logs.of("gpuportal.test")
    assert "RuntimeError: the cluster did not answer" in record["exc_info"]
    assert len(json_logs.text.strip().splitlines()) == 1  # the traceback stays inside the line


@pytest.mark.django_db
def test_each_request_writes_one_access_line_with_method_path_status_duration_and_request_id(
    world: World, json_logs: Captured, settings: Any
) -> None:
    settings.GPUPORTAL_TRUSTED_PROXIES = 1  # the proxy in front passes its X-Request-ID
    token = access_token_create(actor=world.users["nlp_member"], name="logs", scope="read")
    response = Client().get("/api/v1/me/", HTTP_AUTHORIZATION=f"Token {token.key}", HTTP_X_REQUEST_ID="trace-me-1")
    assert response.status_code == 200
    (line,) = json_logs.of("gpuportal.access")
    assert line["message"].startswith("GET /api/v1/me/ 200 (")
    assert (line["method"], line["path"], line["status"], line["request_id"]) == ("GET", "/api/v1/me/", 200, "trace-me-1")
    assert line["user"] == "nlp_member" and line["user_id"] == world.users["nlp_member"].pk
    assert isinstance(line["duration_ms"], float) and line["client_ip"] == "127.0.0.1"
    assert line["level"] == "INFO" and "query" not in line


@pytest.mark.django_db
def test_a_callers_request_id_is_ignored_without_a_trusted_proxy(json_logs: Captured, settings: Any) -> None:
    """Reached directly, anyone could write any id into the logs and the audit log."""
    settings.GPUPORTAL_TRUSTED_PROXIES = 0
    response = Client().get("/api/v1/me/", HTTP_X_REQUEST_ID="forged-by-the-caller")
    (line,) = json_logs.of("gpuportal.access")
    assert line["request_id"] == response["X-Request-ID"] != "forged-by-the-caller"
    assert re.fullmatch(r"[0-9a-f]{32}", line["request_id"])


@pytest.mark.django_db
def test_a_generated_request_id_is_the_one_in_the_response_header(json_logs: Captured) -> None:
    response = Client().get("/api/v1/me/")
    (line,) = json_logs.of("gpuportal.access")
    assert response.status_code == 401
    assert line["request_id"] == response["X-Request-ID"] and re.fullmatch(r"[0-9a-f]{32}", line["request_id"])
    assert line["user"] is None


def boom_view(request: HttpRequest) -> HttpResponse:
    logging.getLogger("gpuportal.test").info("serving the page of %s", request.user.get_username())
    return HttpResponse("ok")


urlpatterns = [path("log-test/", boom_view)]


@pytest.mark.django_db
@pytest.mark.urls("tests.observability.test_logs")
def test_records_written_by_a_view_name_the_signed_in_user_of_a_session(
    world: World, json_logs: Captured, settings: Any
) -> None:
    settings.GPUPORTAL_TRUSTED_PROXIES = 1
    client = Client()
    client.force_login(world.users["vision_admin"])
    assert client.get("/log-test/", HTTP_X_REQUEST_ID="page-1").status_code == 200
    (record,) = json_logs.of("gpuportal.test")
    assert (record["user"], record["request_id"]) == ("vision_admin", "page-1")
    (line,) = json_logs.of("gpuportal.access")
    assert line["user"] == "vision_admin"


@pytest.mark.django_db
def test_probes_are_written_at_debug_so_that_info_hides_them(json_logs: Captured) -> None:
    Client().get("/livez")
    (line,) = json_logs.of("gpuportal.access")
    assert (line["path"], line["level"]) == ("/livez", "DEBUG")


def test_the_console_format_is_one_readable_line_with_request_id_and_user_fields(console_logs: Captured) -> None:
    with request_context(RequestContext(request_id="req-9", source_ip=None, user_agent="")):
        logging.getLogger("gpuportal.test").info("pushed %d objects", 3, extra={"cluster": "lab"})
    line = console_logs.text.strip()
    assert re.match(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z INFO    gpuportal\.test \[req req-9\] pushed 3 objects cluster=lab$", line)


def test_the_configuration_routes_django_gunicorn_and_celery_through_one_handler() -> None:
    config = logging_config(log_format="json", level="info")
    assert config["root"] == {"handlers": ["portal"], "level": "INFO"}
    for name in ("django", "gunicorn.error", "celery"):
        assert config["loggers"][name]["handlers"] == [] and config["loggers"][name]["propagate"] is True
    assert config["loggers"]["django.db.backends"]["level"] == "INFO"
    assert "gunicorn.access" not in config["loggers"]  # a gunicorn run with --access-logfile keeps its file
    assert logging_config(log_format="console", level="DEBUG")["loggers"]["django.db.backends"]["level"] == "INFO"
    with pytest.raises(ValueError, match="log format"):
        logging_config(log_format="xml", level="INFO")


def _settings_in_a_process(env: dict[str, str], code: str) -> subprocess.CompletedProcess[str]:
    environment = {key: value for key, value in os.environ.items() if not key.startswith(("GPUPORTAL_LOG", "OTEL_"))}
    environment.update({"DJANGO_SETTINGS_MODULE": "gpuportal.settings", "GPUPORTAL_DEBUG": "true", **env})
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=environment, capture_output=True, text=True,
                          timeout=120, check=False)


def test_a_process_writes_json_by_default_and_console_when_asked_and_refuses_other_formats() -> None:
    code = "import django, logging; django.setup(); logging.getLogger('gpuportal.test').warning('hello')"
    default = _settings_in_a_process({}, code)
    assert default.returncode == 0, default.stderr
    record: dict[str, Any] = json.loads(default.stderr.strip().splitlines()[-1])
    assert (record["logger"], record["message"]) == ("gpuportal.test", "hello")
    console = _settings_in_a_process({"GPUPORTAL_LOG_FORMAT": "console"}, code)
    assert re.search(r"WARNING gpuportal\.test \[-\] hello$", console.stderr.strip())
    wrong = _settings_in_a_process({"GPUPORTAL_LOG_FORMAT": "xml"}, code)
    assert wrong.returncode != 0 and "GPUPORTAL_LOG_FORMAT must be one of json, console" in wrong.stderr


@pytest.mark.django_db
def test_djangos_own_line_of_a_refused_request_carries_its_request_id(json_logs: Captured, settings: Any) -> None:
    settings.GPUPORTAL_TRUSTED_PROXIES = 1
    response = Client().get("/api/v1/me/", HTTP_X_REQUEST_ID="late-1")
    (line,) = json_logs.of("django.request")
    assert response.status_code == 401 and (line["level"], line["request_id"]) == ("WARNING", "late-1")
    assert "request" not in line  # Django's request object (its repr shows the query string) is dropped


def test_a_line_break_or_a_non_ascii_character_in_a_value_never_breaks_the_line(json_logs: Captured) -> None:
    logging.getLogger("gpuportal.test").info("first line\nforged: line", extra={"owner": "Jürgen\r\nlevel=ERROR"})
    (line,) = json_logs.text.strip().splitlines()
    assert line.isascii()
    (record,) = json_logs.of("gpuportal.test")
    assert (record["message"], record["owner"]) == ("first line\nforged: line", "Jürgen\r\nlevel=ERROR")
