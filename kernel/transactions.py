"""Run a transaction again when PostgreSQL aborted it to break a deadlock or a serialization failure.

``retry_on_deadlock`` replaces ``@transaction.atomic`` on a service that opens its own transaction.
Called outside any transaction, it runs the function in ``transaction.atomic``; when PostgreSQL
aborts that transaction with ``deadlock_detected`` (40P01) or ``serialization_failure`` (40001),
the whole function runs again, from a fresh transaction, after a short jittered pause, at most
``attempts`` times in all. Everything the failed attempt did was rolled back with it, its
``on_commit`` callbacks included, so running again is safe as long as the function has no effect
outside the database before it returns (none of the services it wraps has).

Called inside an outer ``atomic`` block, it is only a nested ``atomic`` (a savepoint): the error
propagates, because the transaction it belongs to is already aborted and only its outermost
level can run again. The lock order that makes deadlocks rare is in :mod:`kernel.locks`; this
is the safety net for the ones that remain.
"""

from __future__ import annotations

import functools
import logging
import random
import time
from collections.abc import Callable
from typing import ParamSpec, TypeVar

from django.db import OperationalError, transaction

log = logging.getLogger(__name__)

P = ParamSpec("P")
R = TypeVar("R")

DEADLOCK_SQLSTATES = frozenset({"40P01", "40001"})
"""deadlock_detected, serialization_failure: the transaction was rolled back and may simply run again."""


def is_deadlock(error: BaseException) -> bool:
    """Whether Django's ``OperationalError`` wraps a driver error PostgreSQL raised to break a
    deadlock or a serialization conflict (psycopg 3 names the code ``sqlstate``, psycopg 2 ``pgcode``)."""
    cause = error.__cause__
    code = getattr(cause, "sqlstate", None) or getattr(cause, "pgcode", None)
    return code in DEADLOCK_SQLSTATES


def retry_on_deadlock(
    *, attempts: int = 3, base_delay: float = 0.05, using: str | None = None
) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Decorate a function that is one transaction: ``transaction.atomic`` plus the retry above.
    The pause before attempt n + 1 is uniform in [0, ``base_delay`` × 2^(n-1)] seconds."""
    if attempts < 1:
        raise ValueError("attempts must be at least 1")

    def decorate(function: Callable[P, R]) -> Callable[P, R]:
        @functools.wraps(function)
        def run(*args: P.args, **kwargs: P.kwargs) -> R:
            if transaction.get_connection(using).in_atomic_block:
                with transaction.atomic(using=using):  # not the outermost level: no retry here
                    return function(*args, **kwargs)
            attempt = 1
            while True:
                try:
                    with transaction.atomic(using=using):
                        return function(*args, **kwargs)
                except OperationalError as error:
                    if attempt >= attempts or not is_deadlock(error):
                        raise
                    log.warning(
                        "%s: %s (attempt %s of %s), running it again",
                        function.__qualname__, str(error).splitlines()[0] if str(error) else "deadlock",
                        attempt, attempts,
                    )
                time.sleep(random.uniform(0, base_delay * 2 ** (attempt - 1)))
                attempt += 1

        return run

    return decorate
