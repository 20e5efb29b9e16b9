"""A database outage is a 503 with ``Retry-After``, not a 500 (issue 35: 900 requests answered 500
during 8 s): the API's JSON error envelope under ``/api/``, an HTML page elsewhere; so is a shared
cache that does not answer. A broker that is down fails no request: the change is committed and its
work waits in the outbox for the dispatcher (``kernel.task_handover``)."""

from __future__ import annotations

import datetime
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from unittest import mock

import pytest
from django.db import DatabaseError, IntegrityError, InterfaceError, OperationalError, connection, connections
from django.test import Client, RequestFactory
from django.utils import timezone

from allocations.models import Quota, QuotaWindow
from kernel.api.errors import api_server_error
from kernel.unavailable import RETRY_AFTER_SECONDS, dependency_unavailable
from tests.conftest import World

WINDOWS = "/api/v1/quota-windows/"


class _Sqlstate(Exception):
    def __init__(self, sqlstate: str | None) -> None:
        super().__init__(f"sqlstate {sqlstate}")
        self.sqlstate = sqlstate


def _wrapped(kind: type[DatabaseError], cause: BaseException) -> DatabaseError:
    try:
        raise kind(str(cause)) from cause
    except DatabaseError as error:
        return error


@pytest.mark.parametrize(("error", "expected"), [
    (_wrapped(OperationalError, _Sqlstate(None)), "database"),  # the driver's: connection refused, reset
    (_wrapped(OperationalError, _Sqlstate("08006")), "database"),  # connection_failure
    (_wrapped(OperationalError, _Sqlstate("57P01")), "database"),  # admin_shutdown
    (_wrapped(OperationalError, _Sqlstate("53300")), "database"),  # too_many_connections
    (InterfaceError("connection already closed"), "database"),
    (_wrapped(OperationalError, sqlite3.OperationalError("database is locked")), "database"),
    (_wrapped(OperationalError, _Sqlstate("40P01")), None),  # a deadlock: the caller's to retry or answer
    (_wrapped(OperationalError, _Sqlstate("55P03")), None),  # lock_not_available (NOWAIT)
    (_wrapped(OperationalError, sqlite3.OperationalError("no such table: x")), None),
    (_wrapped(IntegrityError, _Sqlstate("23505")), None),
    (RuntimeError("boom"), None),
])  # fmt: skip
def test_which_errors_say_a_dependency_is_down(error: BaseException, expected: str | None) -> None:
    assert dependency_unavailable(error) == expected


def test_a_redis_or_broker_connection_error_is_a_dependency_down() -> None:
    import kombu.exceptions
    import redis.exceptions

    assert dependency_unavailable(redis.exceptions.ConnectionError("refused")) == "cache"
    assert dependency_unavailable(redis.exceptions.TimeoutError("timed out")) == "cache"
    assert dependency_unavailable(kombu.exceptions.OperationalError("refused")) == "broker"
    try:
        try:
            raise redis.exceptions.ConnectionError("refused")
        except redis.exceptions.ConnectionError as inner:
            raise RuntimeError("while reading the lockout") from inner
    except RuntimeError as outer:
        assert dependency_unavailable(outer) == "cache"  # the cause is followed
    assert dependency_unavailable(redis.exceptions.ResponseError("WRONGTYPE")) is None


@contextmanager
def database_down() -> Iterator[None]:
    """No database answers: on PostgreSQL the default connection points at a closed port (the next
    query fails to connect); SQLite's test database lives in memory and cannot be closed, so each
    cursor fails as a file that cannot be opened does."""
    if connection.vendor != "postgresql":
        unopenable = sqlite3.OperationalError("unable to open database file")
        with mock.patch.object(type(connections["default"]), "create_cursor", side_effect=unopenable):
            yield
        return
    settings = connection.settings_dict
    saved = {name: settings.get(name) for name in ("HOST", "PORT")}
    connection.close()
    settings.update(HOST="127.0.0.1", PORT="1")
    try:
        yield
    finally:
        connection.close()
        settings.update(saved)


def check_503(response: Any) -> None:
    assert response.status_code == 503, response.content[:500]
    assert response["Retry-After"] == str(RETRY_AFTER_SECONDS)


@pytest.mark.django_db(transaction=True)
def test_an_api_request_during_a_database_outage_is_a_503_with_retry_after(world: World) -> None:
    client = world.client("nlp_admin")  # authenticated without the database
    client.raise_request_exception = False
    quota = Quota.objects.get(department=world.nlp, flavor__isnull=True)
    start = timezone.now()
    body = {"quota": quota.pk, "kind": "temporary", "begins_at": start.isoformat(),
            "ends_at": (start + datetime.timedelta(days=1)).isoformat(), "limit_delta": "4"}
    with database_down():
        listed = client.get(WINDOWS)
        created = client.post(WINDOWS, body, format="json")
        keyed = client.post(WINDOWS, body, format="json", headers={"Idempotency-Key": "k-outage"})
    for response in (listed, created, keyed):
        check_503(response)
        assert response["Content-Type"].startswith("application/json")
        answer = response.json()
        assert answer["error"]["code"] == "service_unavailable"
        assert answer["error"]["details"] == {"dependency": "database"}
        assert "try again" in answer["error"]["message"]
        assert answer["request_id"]
    assert QuotaWindow.objects.count() == 0
    assert client.post(WINDOWS, body, format="json", headers={"Idempotency-Key": "k-outage"}).status_code == 201


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("debug", [False, True])
def test_a_page_during_a_database_outage_is_an_html_503_with_retry_after(world: World, settings: Any, debug: bool) -> None:
    """With ``DEBUG`` on (``make run``) too: the session cannot be read, and the middleware that asks
    whether the user is signed in on the way out must not turn the 503 into Django's debug 500."""
    settings.DEBUG = debug
    client = Client(raise_request_exception=False)
    client.force_login(world.users["nlp_member"])
    assert client.get("/").status_code == 200
    with database_down():
        page = client.get("/")
    check_503(page)
    assert page["Content-Type"].startswith("text/html")
    assert b"temporarily unavailable" in page.content


def test_the_500_handler_answers_503_for_an_outage_raised_in_a_middleware() -> None:
    factory = RequestFactory()
    try:
        raise _wrapped(OperationalError, _Sqlstate(None))
    except OperationalError:
        api = api_server_error(factory.get("/api/v1/me/"))
        page = api_server_error(factory.get("/"))
    check_503(api)
    assert api["Content-Type"] == "application/json"
    check_503(page)
    assert page["Content-Type"].startswith("text/html")
    try:
        raise RuntimeError("a bug")
    except RuntimeError:
        assert api_server_error(factory.get("/api/v1/me/")).status_code == 500


def test_a_shared_cache_that_does_not_answer_is_a_503_naming_it(world: World, settings: Any) -> None:
    settings.CACHES = {"default": {"BACKEND": "django.core.cache.backends.redis.RedisCache",
                                   "LOCATION": "redis://127.0.0.1:1/0",
                                   "OPTIONS": {"socket_connect_timeout": 0.5, "socket_timeout": 0.5}}}
    # (the settings fixture's change gives the cache handler the new settings: Django's setting_changed)
    response = Client(raise_request_exception=False).post(
        "/api/v1/auth/token/", {"username": "nlp_admin", "password": "pw-nlp_admin"}, content_type="application/json")
    check_503(response)
    assert response.json()["error"]["details"] == {"dependency": "cache"}


def test_a_broker_that_is_down_fails_no_request_the_outbox_keeps_the_work(
    world: World, django_capture_on_commit_callbacks: Any
) -> None:
    import kombu.exceptions
    from celery.app.task import Task

    from notifications.models import Notification

    quota = Quota.objects.get(department=world.nlp, flavor__isnull=True)
    start = timezone.now()
    body = {"quota": quota.pk, "kind": "temporary", "begins_at": start.isoformat(),
            "ends_at": (start + datetime.timedelta(days=1)).isoformat(), "limit_delta": "4"}
    refused = kombu.exceptions.OperationalError("Error 111 connecting to 127.0.0.1:6379. Connection refused.")
    with mock.patch.object(Task, "apply_async", side_effect=refused) as publish, \
            django_capture_on_commit_callbacks(execute=True):
        response = world.client("nlp_admin").post(WINDOWS, body, format="json")
    assert response.status_code == 201, response.content
    assert publish.called  # the hand-over was tried, and failed
    assert QuotaWindow.objects.count() == 1
    assert Notification.objects.exists()  # the outbox holds the notice for the dispatcher's next pass
