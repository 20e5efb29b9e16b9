"""A dependency that is down is a 503 with ``Retry-After``, never a 500.

When the database cannot be reached (the connection is refused, lost or closed, the server shuts
down or has no connection slot left), the broker refuses a message, or the Redis of the shared
cache does not answer, a request fails through no fault of its own and may succeed once the
dependency is back (a POST retried safely with the same ``Idempotency-Key``, docs/api.md): the answer is ``503 Service Unavailable`` with ``Retry-After: RETRY_AFTER_SECONDS``, under ``/api/``
as the API's JSON error envelope (code ``service_unavailable``, ``details.dependency`` naming what
is down, ``kernel.api.errors``), elsewhere as an HTML page (``503.html``). ``/readyz`` says the same
to load balancers.

Three places in ``kernel.api.errors`` answer so, between them every path an outage takes: the
API's exception handler (errors a DRF view raises), ``DependencyUnavailableMiddleware`` (errors any
other view raises, even with ``DEBUG`` on), and the 500 handler (errors raised in a middleware, such
as a session read).

Handing work to the broker never fails a request (``kernel.task_handover``: a row that was not
handed over waits for its dispatcher), so a change committed while only the broker is down is
answered as usual; the broker's own error is kept for any code that publishes without it.
"""

from __future__ import annotations

import logging
import sys

from django.contrib.auth.models import AnonymousUser
from django.db import InterfaceError, OperationalError
from django.http import HttpRequest, HttpResponse
from django.template import TemplateDoesNotExist, loader
from django.utils.functional import SimpleLazyObject, empty

log = logging.getLogger("gpuportal.unavailable")

RETRY_AFTER_SECONDS = 5
"""What ``Retry-After`` says: long enough for a restarted database or a failed-over Redis."""

DATABASE = "database"
BROKER = "broker"
CACHE = "cache"
_WHAT = {DATABASE: "The database", BROKER: "The message broker", CACHE: "The shared cache (Redis)"}

# SQLSTATEs of a server that cannot take the request now, rather than one refusing it: the
# connection exceptions (class 08), insufficient resources (class 53: too many connections, disk
# full, out of memory) and a server shutting down or starting (57P01, 57P02, 57P03).
_UNAVAILABLE_CLASSES = ("08", "53")
_UNAVAILABLE_STATES = frozenset({"57P01", "57P02", "57P03"})
# SQLite's words for a file another process holds or that cannot be opened.
_SQLITE_UNAVAILABLE = ("database is locked", "unable to open database file", "disk i/o error")


def _database_down(error: BaseException) -> bool:
    if isinstance(error, InterfaceError):  # the connection is closed (or was never made)
        return True
    if not isinstance(error, OperationalError):
        return False
    cause = error.__cause__
    if type(cause).__module__.startswith("sqlite3"):
        return any(words in str(cause).lower() for words in _SQLITE_UNAVAILABLE)
    code = getattr(cause, "sqlstate", None) or getattr(cause, "pgcode", None)
    if code is None:  # the driver's own failure: no server answered (refused, reset, timed out)
        return True
    return str(code).startswith(_UNAVAILABLE_CLASSES) or code in _UNAVAILABLE_STATES


def _cache_down(error: BaseException) -> bool:
    """A Redis connection error (Django's Redis cache); a library never imported cannot have raised
    it, so nothing is imported here."""
    redis_errors = sys.modules.get("redis.exceptions")
    return redis_errors is not None and isinstance(error, (redis_errors.ConnectionError, redis_errors.TimeoutError))


def _broker_down(error: BaseException) -> bool:
    """Celery's publishing failed to reach the broker (kombu's connection error)."""
    kombu_errors = sys.modules.get("kombu.exceptions")
    return kombu_errors is not None and isinstance(error, kombu_errors.OperationalError)


def dependency_unavailable(error: BaseException | None) -> str | None:
    """``"database"``, ``"broker"`` or ``"cache"`` when ``error`` (or an error it was raised from)
    says that dependency cannot be reached; ``None`` for any other error."""
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if _database_down(error):
            return DATABASE
        if _broker_down(error):
            return BROKER
        if _cache_down(error):
            return CACHE
        error = error.__cause__ or error.__context__
    return None


def unavailable_message(dependency: str) -> str:
    return f"{_WHAT.get(dependency, 'A service the portal needs')} is unavailable; try again in {RETRY_AFTER_SECONDS} seconds."


def unavailable_logged(request: HttpRequest, dependency: str, error: BaseException) -> None:
    """One warning line per refused request, without the traceback (an outage would flood the log)."""
    log.warning(
        "%s unavailable: %s %s answered 503: %s", dependency, request.method, request.path,
        str(error).splitlines()[0] if str(error) else type(error).__name__,
        extra={"dependency": dependency},
    )


def unavailable_settled(request: HttpRequest) -> None:
    """The rest of the answer's way reads nothing more from the database: a user not yet read from
    the session (``AuthenticationMiddleware``'s lazy user) is anonymous, so that a middleware that
    asks ``request.user.is_authenticated`` on the way out does not fail again, into a 500."""
    user = request.__dict__.get("user")
    if isinstance(user, SimpleLazyObject) and getattr(user, "_wrapped", None) is empty:
        request.user = AnonymousUser()


def unavailable_page(request: HttpRequest, dependency: str) -> HttpResponse:
    """The HTML answer outside ``/api/`` (a page that reads nothing from the database)."""
    try:
        body = loader.get_template("503.html").render({"retry_after": RETRY_AFTER_SECONDS})
    except TemplateDoesNotExist:
        body = f"<!doctype html><title>Unavailable</title><h1>Unavailable</h1><p>{unavailable_message(dependency)}</p>"
    response = HttpResponse(body, status=503, content_type="text/html; charset=utf-8")
    response["Retry-After"] = str(RETRY_AFTER_SECONDS)
    response["Cache-Control"] = "no-store"
    return response
