"""Keys claimed, answered, replayed and forgotten.

A POST with ``Idempotency-Key: K`` from user U first *claims* (U, K): one row, inserted and
committed before the view runs. The unique constraint on (user, key) lets exactly one of any number
of concurrent requests win the claim; the others find the row (locked ``FOR UPDATE`` while they
look) and answer from it:

- the same request (method, path and query, body: ``fingerprint``) already answered: its answer
  again (``Stored``), however many times;
- the same request still running: 409 ``idempotency_in_progress`` with ``Retry-After`` (the view
  runs once; the retry after it finished gets the answer);
- another request under the same key: 409 ``idempotency_key_reused``, naming the header.

When the view answers 2xx the row keeps the answer (``idempotency_finish``); any other answer, or an
exception, deletes the claim (``idempotency_release``), so that a retry runs the view again: an
error changed nothing and may not hold the next time (a quota freed, a typo fixed), and a 5xx must
not be replayed for a day.

A key is kept ``KEY_TTL`` after its claim, then forgotten: an expired row is taken over by a new
claim, and each claim deletes up to ``PURGE_BATCH`` expired rows of anyone, so the table holds about
a day of keys without a periodic task. A claim whose request never finished (its process died
between the view and ``idempotency_finish``) may be taken over after ``IN_PROGRESS_LEASE``, far
longer than a request may run (gunicorn's worker timeout).
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass

from django.db import IntegrityError, transaction
from django.db.models import QuerySet

from kernel.clock import clock_now
from kernel.errors import Conflict
from kernel.idempotency.models import IdempotencyKey, KeyState

HEADER = "Idempotency-Key"
KEY_TTL = datetime.timedelta(hours=24)
IN_PROGRESS_LEASE = datetime.timedelta(minutes=5)
PURGE_BATCH = 500
RETRY_IN_PROGRESS_SECONDS = 1


class KeyReused(Conflict):
    code = "idempotency_key_reused"

    def __init__(self) -> None:
        message = (f"This {HEADER} was sent with another request (method, path or body) within the last "
                   f"{int(KEY_TTL.total_seconds() // 3600)} hours; use a new key for a new request.")
        super().__init__(message, fields={HEADER: [message]})


class KeyInProgress(Conflict):
    code = "idempotency_in_progress"

    def __init__(self) -> None:
        message = (f"A request with this {HEADER} is still being processed; retry after "
                   f"{RETRY_IN_PROGRESS_SECONDS} second(s) to get its answer.")
        super().__init__(message, fields={HEADER: [message]})


@dataclass(frozen=True)
class Claimed:
    """The caller runs the view; ``key_id`` is its row, to finish or release, as long as it still
    holds it (claimed at ``claimed_at``: a taken-over claim is another's)."""

    key_id: int
    claimed_at: datetime.datetime


@dataclass(frozen=True)
class Stored:
    """The answer of the first request under the key."""

    status_code: int
    content_type: str
    location: str
    body: bytes


def idempotency_keys_purge(*, now: datetime.datetime, limit: int = PURGE_BATCH) -> int:
    """Delete up to ``limit`` keys that expired; the number deleted."""
    expired = list(IdempotencyKey.objects.filter(expires_at__lte=now).order_by("expires_at").values_list("pk", flat=True)[:limit])
    if not expired:
        return 0
    deleted, _ = IdempotencyKey.objects.filter(pk__in=expired, expires_at__lte=now).delete()
    return deleted


def idempotency_claim(*, user_id: int, key: str, fingerprint: str, method: str, path: str) -> Claimed | Stored:
    """Claim ``key`` for this request, or answer from the request that holds it (module docstring).
    Raises ``KeyReused`` or ``KeyInProgress`` (409)."""
    now = clock_now()
    idempotency_keys_purge(now=now)
    fields = {"fingerprint": fingerprint, "method": method[:8], "path": path[:2000], "state": KeyState.IN_PROGRESS,
              "claimed_at": now, "expires_at": now + KEY_TTL, "status_code": None, "content_type": "",
              "location": "", "body": b""}
    for _ in range(3):  # a claim released between the insert and the read: claim again
        try:
            with transaction.atomic():
                row = IdempotencyKey.objects.create(user_id=user_id, key=key, **fields)
            return Claimed(key_id=row.pk, claimed_at=now)
        except IntegrityError:
            pass
        with transaction.atomic():
            found = IdempotencyKey.objects.select_for_update().filter(user_id=user_id, key=key).first()
            if found is None:
                continue
            if found.expires_at <= now or (found.state == KeyState.IN_PROGRESS and found.claimed_at <= now - IN_PROGRESS_LEASE):
                IdempotencyKey.objects.filter(pk=found.pk).update(**fields)  # forgotten, or abandoned: taken over
                return Claimed(key_id=found.pk, claimed_at=now)
            if found.fingerprint != fingerprint:
                raise KeyReused()
            if found.state == KeyState.IN_PROGRESS:
                raise KeyInProgress()
            return Stored(status_code=int(found.status_code or 200), content_type=found.content_type,
                          location=found.location, body=bytes(found.body))
    raise KeyInProgress()


def idempotency_finish(*, claim: Claimed, status_code: int, content_type: str, location: str, body: bytes) -> None:
    """Keep the answer of the request that holds ``claim``, for its retries."""
    _held(claim).update(
        state=KeyState.DONE, status_code=status_code, content_type=content_type[:200], location=location[:2000], body=body,
    )


def idempotency_release(*, claim: Claimed) -> None:
    """Forget the claim of a request that did not succeed: a retry runs the view again."""
    _held(claim).delete()


def _held(claim: Claimed) -> QuerySet[IdempotencyKey]:
    return IdempotencyKey.objects.filter(pk=claim.key_id, state=KeyState.IN_PROGRESS, claimed_at=claim.claimed_at)
