"""``GET /livez`` and ``GET /readyz``: the process's liveness and readiness, for load balancers,
container health checks and Kubernetes probes.

* ``/livez``: the process answers (it touches nothing else, so a database outage never restarts it).
* ``/readyz``: the database answers, every migration is applied, and every Redis the portal is
  configured with answers (the broker, ``CELERY_BROKER_URL``, and the shared cache,
  ``GPUPORTAL_CACHE_URL``; "not configured" when there is none, as in the embedded default); 503
  with the failing checks otherwise.

Both answer in plain text, or JSON when asked (``Accept: application/json`` or ``?format=json``),
to anyone: they say nothing but "ok" or which dependency is down, never why in detail (errors are
logged, not returned). They are never cached.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from urllib.parse import urlsplit

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connections
from django.db.migrations.executor import MigrationExecutor
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.http import require_GET

log = logging.getLogger(__name__)

REDIS_TIMEOUT_SECONDS = 1.0
_migrated = False  # once every migration is applied it stays so for this process's code


def _database() -> str | None:
    with connections[DEFAULT_DB_ALIAS].cursor() as cursor:
        cursor.execute("SELECT 1")
        cursor.fetchone()
    return None


def _migrations() -> str | None:
    global _migrated
    if _migrated:
        return None
    connection = connections[DEFAULT_DB_ALIAS]
    executor = MigrationExecutor(connection)
    pending = executor.migration_plan(executor.loader.graph.leaf_nodes())
    if pending:
        return f"{len(pending)} migration(s) not applied"
    _migrated = True
    return None


NOT_CONFIGURED = "not configured"  # a state that is not a failure


def _redis_urls() -> list[str]:
    """The Redis servers this process depends on: the Celery broker and the shared cache."""
    urls = []
    broker = getattr(settings, "CELERY_BROKER_URL", None)
    if broker and urlsplit(broker).scheme in ("redis", "rediss"):
        urls.append(broker)
    cache = settings.CACHES.get("default", {})
    if cache.get("BACKEND", "").endswith("RedisCache"):
        urls.append(str(cache["LOCATION"]))
    return list(dict.fromkeys(urls))


def _redis() -> str | None:
    urls = _redis_urls()
    if not urls:
        return NOT_CONFIGURED
    import redis  # only where Redis is configured

    for url in urls:
        client = redis.Redis.from_url(url, socket_connect_timeout=REDIS_TIMEOUT_SECONDS,
                                      socket_timeout=REDIS_TIMEOUT_SECONDS)
        try:
            client.ping()
        finally:
            client.close()
    return None


CHECKS: dict[str, Callable[[], str | None]] = {"database": _database, "migrations": _migrations, "redis": _redis}


def _wants_json(request: HttpRequest) -> bool:
    return request.GET.get("format") == "json" or "application/json" in request.headers.get("Accept", "")


def _answer(request: HttpRequest, *, status: int, checks: dict[str, str]) -> HttpResponse:
    healthy = status == 200
    if _wants_json(request):
        response: HttpResponse = JsonResponse({"status": "ok" if healthy else "unavailable", "checks": checks}, status=status)
    else:
        lines = [f"{name}: {state}" for name, state in checks.items()]
        response = HttpResponse("\n".join(["ok" if healthy else "unavailable", *lines]) + "\n", status=status,
                                content_type="text/plain; charset=utf-8")
    response["Cache-Control"] = "no-store"
    return response


@require_GET
def livez_view(request: HttpRequest) -> HttpResponse:
    return _answer(request, status=200, checks={})


@require_GET
def readyz_view(request: HttpRequest) -> HttpResponse:
    checks: dict[str, str] = {}
    for name, check in CHECKS.items():
        started = time.monotonic()
        try:
            problem = check()
        except Exception:  # any failure of a dependency is "not ready", never a 500
            log.warning("readiness check %s failed", name, exc_info=True)
            problem = "unreachable"
        checks[name] = "ok" if problem is None else problem
        log.debug("readiness check %s took %.3f s", name, time.monotonic() - started)
    ready = all(state in ("ok", NOT_CONFIGURED) for state in checks.values())
    return _answer(request, status=200 if ready else 503, checks=checks)
