"""Writing audit events. Call ``audit_record`` inside the service's transaction, after the change
and preferably last: the event and the change commit or roll back together, and the chain lock
taken here is held until that commit.

Each event gets the next ``seq`` and its department's next ``department_seq``, the hashes of the
previous events (globally and in its department), and a time never earlier than its predecessor's,
all assigned under one lock (a transaction-scoped advisory lock on PostgreSQL; SQLite's write
transaction on SQLite), so concurrent writers can neither fork nor gap the chain.

That lock is the last of the global lock order (:mod:`kernel.locks`): before taking it,
``audit_record`` runs the foreign-key checks PostgreSQL would otherwise run at COMMIT, so that their
waits for other transactions' row locks come before the chain lock, never while holding it.
"""

from __future__ import annotations

import datetime
import secrets
from typing import Any

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db import models, transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django.utils import timezone

from audit.actions import AuditAction, get_action
from audit.integrity.canonical import GENESIS_HASH, TIME_FORMAT, canonical_json, leaf_hash, record_fields
from audit.models import AuditEvent, Outcome
from audit.redaction import escape_text, scrub
from kernel.locks import deferred_checks_run
from kernel.request_context import current_request_context

CHAIN_LOCK_ID = 0x6770_7561_7564_0001  # pg_advisory_xact_lock key of the event chain


class AuditOutsideTransaction(RuntimeError):
    """``audit_record`` was called outside ``transaction.atomic``: the event could commit without
    the change it records, or the change without its event."""


def audit_time_format(moment: datetime.datetime) -> str:
    return moment.astimezone(datetime.UTC).strftime(TIME_FORMAT)


def chain_lock(connection: BaseDatabaseWrapper, lock_id: int = CHAIN_LOCK_ID) -> None:
    """Serialise writers until the transaction ends. SQLite needs nothing: its write transaction
    (``BEGIN IMMEDIATE`` in our settings) already excludes every other writer."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [lock_id])


_LAST_EVENTS = """
    SELECT e.seq, e.hash, e.occurred_at, d.department_seq, d.hash
    FROM (SELECT seq, hash, occurred_at FROM audit_event ORDER BY seq DESC LIMIT 1) AS e
    LEFT JOIN LATERAL (
        SELECT department_seq, hash FROM audit_event WHERE department_id = %s ORDER BY seq DESC LIMIT 1
    ) AS d ON true
"""


def _chain_heads(
    connection: BaseDatabaseWrapper, department_id: int | None
) -> tuple[tuple[int, str, datetime.datetime] | None, tuple[int, str] | None]:
    """The latest event, and the department's latest event, read under the chain lock."""
    if connection.vendor == "postgresql":  # one round trip while the lock is held
        with connection.cursor() as cursor:
            cursor.execute(_LAST_EVENTS, [department_id])
            row = cursor.fetchone()
        if row is None:
            return None, None
        return (row[0], row[1], row[2]), ((row[3], row[4]) if row[3] is not None else None)
    last = AuditEvent.objects.order_by("-seq").values_list("seq", "hash", "occurred_at").first()
    department_last = None
    if department_id is not None:
        found = (AuditEvent.objects.filter(department_id=department_id).order_by("-seq")
                 .values_list("department_seq", "hash").first())
        department_last = (int(found[0] or 0), found[1]) if found else None
    return last, department_last


def _actor_fields(actor: AbstractBaseUser | AnonymousUser | None) -> tuple[int | None, str]:
    if actor is None or not actor.is_authenticated:
        return None, ""
    return int(actor.pk), escape_text(actor.get_username(), limit=150)


def audit_record(
    *,
    actor: AbstractBaseUser | AnonymousUser | None,
    action: AuditAction,
    target: models.Model | None = None,
    department_id: int | None = None,
    before: dict[str, Any] | None = None,
    after: dict[str, Any] | None = None,
    details: dict[str, Any] | None = None,
    outcome: str = Outcome.SUCCESS,
) -> AuditEvent:
    connection = transaction.get_connection()
    if not connection.in_atomic_block:
        raise AuditOutsideTransaction(
            "audit_record must run inside the transaction of the change it records (transaction.atomic)"
        )
    if get_action(action.code) is not action:
        raise ValueError(f"audit action {action.code!r} is not the registered one")
    if outcome not in Outcome.values:
        raise ValueError(f"unknown audit outcome {outcome!r}")
    context = current_request_context()
    actor_id, actor_username = _actor_fields(actor)
    target_type = target._meta.label_lower if target is not None else ""
    target_id = escape_text(str(target.pk), limit=64) if target is not None else ""
    request_id = escape_text(context.request_id, limit=64)
    fields = {  # everything that does not depend on the chain, prepared before taking the lock
        "nonce": secrets.token_hex(16), "actor_id": actor_id, "actor_username": actor_username,
        "action": action.code, "action_number": action.number, "target_type": target_type, "target_id": target_id,
        "department_id": department_id, "outcome": outcome, "before": scrub(before or {}),
        "after": scrub(after or {}), "details": scrub(details or {}), "request_id": request_id,
        "source_ip": context.source_ip, "user_agent": escape_text(context.user_agent, limit=512),
    }

    deferred_checks_run(connection)  # the commit's foreign-key waits, before the chain lock (kernel.locks)
    chain_lock(connection)
    last, department_last = _chain_heads(connection, department_id)
    seq, prev_hash = (last[0] + 1, last[1]) if last else (1, GENESIS_HASH)
    occurred_at = timezone.now()
    if last is not None and occurred_at < last[2]:
        occurred_at = last[2]  # never earlier than the previous event: time order is seq order
    department_seq, department_prev_hash = None, None
    if department_id is not None:
        department_seq = department_last[0] + 1 if department_last else 1
        department_prev_hash = department_last[1] if department_last else GENESIS_HASH
    data = canonical_json(
        record_fields(
            seq=seq, prev_hash=prev_hash, occurred_at=audit_time_format(occurred_at),
            department_seq=department_seq, department_prev_hash=department_prev_hash, **fields,
        )
    )
    return AuditEvent.objects.create(
        seq=seq, occurred_at=occurred_at, actor_id=actor_id, actor_username=actor_username, action=action.code,
        target_type=target_type, target_id=target_id, department_id=department_id, department_seq=department_seq,
        outcome=outcome, request_id=request_id, hash=leaf_hash(data).hex(),
        record=data.decode("ascii"),
    )
