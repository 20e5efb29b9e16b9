"""``/livez`` and ``/readyz``: liveness touches nothing; readiness checks the database, the
migrations and Redis (when a broker is configured), answering 503 naming what is down, never a 500."""

from __future__ import annotations

import socket
from typing import Any

import pytest
from django.test import Client

from observability import health
from tests.clusters.test_worker_delivery import Redis, redis

__all__ = ["redis"]  # the fixture: a redis-server of this test's own

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def fresh_migration_state(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(health, "_migrated", False)


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_livez_answers_in_text_and_json_without_signing_in_and_is_not_cached() -> None:
    response = Client().get("/livez")
    assert response.status_code == 200 and response.content == b"ok\n"
    assert response["Cache-Control"] == "no-store"
    assert Client().get("/livez", HTTP_ACCEPT="application/json").json() == {"status": "ok", "checks": {}}


def test_readyz_is_ready_when_the_database_answers_and_every_migration_is_applied(settings: Any) -> None:
    settings.CELERY_BROKER_URL = None
    response = Client().get("/readyz?format=json")
    assert response.status_code == 200
    assert response.json() == {"status": "ok", "checks": {"database": "ok", "migrations": "ok", "redis": "not configured"}}
    assert Client().get("/readyz").content.decode().splitlines()[0] == "ok"


def test_readyz_is_unavailable_with_unapplied_migrations(monkeypatch: pytest.MonkeyPatch, settings: Any) -> None:
    settings.CELERY_BROKER_URL = None

    class Pending:
        def __init__(self, connection: Any) -> None:
            self.loader = type("Loader", (), {"graph": type("Graph", (), {"leaf_nodes": lambda self: []})()})()

        def migration_plan(self, targets: Any) -> list[Any]:
            return [("allocations", "0099_future"), ("clusters", "0099_future")]

    monkeypatch.setattr(health, "MigrationExecutor", Pending)
    response = Client().get("/readyz", HTTP_ACCEPT="application/json")
    assert response.status_code == 503
    assert response.json()["checks"]["migrations"] == "2 migration(s) not applied"


def test_readyz_is_unavailable_when_redis_does_not_answer(settings: Any) -> None:
    settings.CELERY_BROKER_URL = f"redis://127.0.0.1:{closed_port()}/0"
    response = Client().get("/readyz")
    assert response.status_code == 503
    assert response.content.decode().splitlines() == ["unavailable", "database: ok", "migrations: ok", "redis: unreachable"]


def test_readyz_is_unavailable_when_the_shared_cache_redis_does_not_answer(settings: Any) -> None:
    """The sign-in lockout's counts live in the shared cache: a portal without it is not ready."""
    settings.CELERY_BROKER_URL = None
    settings.CACHES = {**settings.CACHES, "default": {"BACKEND": "django.core.cache.backends.redis.RedisCache",
                                                      "LOCATION": f"redis://127.0.0.1:{closed_port()}/1"}}
    response = Client().get("/readyz", HTTP_ACCEPT="application/json")
    assert response.status_code == 503 and response.json()["checks"]["redis"] == "unreachable"


def test_readyz_is_unavailable_not_an_error_when_the_database_fails(monkeypatch: pytest.MonkeyPatch, settings: Any) -> None:
    settings.CELERY_BROKER_URL = None

    def broken() -> str | None:
        raise OSError("connection refused")

    monkeypatch.setitem(health.CHECKS, "database", broken)
    response = Client().get("/readyz", HTTP_ACCEPT="application/json")
    assert response.status_code == 503 and response.json()["checks"]["database"] == "unreachable"
    assert "connection refused" not in response.content.decode()


def test_readyz_is_ready_with_a_redis_that_answers(settings: Any, redis: Redis) -> None:
    settings.CELERY_BROKER_URL = redis.url
    settings.CACHES = {**settings.CACHES, "default": {"BACKEND": "django.core.cache.backends.redis.RedisCache",
                                                      "LOCATION": redis.url}}
    assert Client().get("/readyz", HTTP_ACCEPT="application/json").json()["checks"]["redis"] == "ok"
