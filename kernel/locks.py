"""The one global lock order, and the helpers that keep transactions in it.

Every transaction takes its locks in this order, skipping what it does not need; within one kind,
rows are locked in primary-key order:

1. the outbox rows of cluster pushes a delivery worker claims or records (``clusters.ClusterPush``:
   only the worker locks rows that exist, with SKIP LOCKED where it takes several; the services
   below insert new ones, which nobody else can lock yet);
2. allocations (one exception: approval locks the grants it reclaims *after* the department chain
   and the clusters, and only with SKIP LOCKED, so it never waits for them; a grant it could not
   lock is left out and the plan made again without it — see ``allocations.reclaims``), then the
   idle case that follows a grant (``accounting.IdleCase``: the idle evaluation and the keep,
   exempt and release of a case lock the grant first, then its case; see ``accounting.idle``);
3. departments: the department chain, nearest first but locked in primary-key order (admission,
   quota changes), then quota and flavor rows (the catalogue);
4. clusters: FOR UPDATE by whoever books or moves GPUs on them or changes their credentials, FOR
   KEY SHARE by the push's recording, which must not wait for a cluster once it holds the chain lock;
5. node tokens and node report states, then nodes, then their GPUs (telemetry and the inventory,
   see docs/telemetry.md), then reservations (written only under their cluster's or allocation's lock);
6. the audit chain lock (``audit.services.audit_record``'s transaction-scoped advisory lock), always
   last. Nothing may wait for a row after it, because every writer of an audit event waits for it
   while holding its rows: a transaction that waits for a row while holding the chain lock
   deadlocks with the holder of that row as soon as that holder records its own event. On
   PostgreSQL the statement that takes it (the event's chain step) is sent before the
   transaction's next statement or, when the event is its last write, together with its COMMIT
   (``audit.linking``): never earlier than ``audit_record`` returns, never after anything the
   transaction does next, so this order is the same as if it were taken in ``audit_record``.

Four locks stand apart, each taken first by the only transactions that take it: the usage roll-up's
advisory lock (``accounting.rolling``: a roll then writes only its own ``UsageHour`` and ``UsageDay``
rows and, at COMMIT, takes the KEY SHARE of the rows they refer to; it records no audit event), the
statement close's (``accounting.statements``: it writes a department's statements and lines, then
takes the audit chain lock last), and fair share's (``allocations.fair_share.services``: the decay
tick then writes only ``FairShare`` rows, records no audit event and, at COMMIT, takes the KEY SHARE
of their departments; a change of shares writes one ``FairShare`` row, then takes the audit chain
lock last). No transaction that holds a row ever waits for any of them. A user's account row is
the fourth: the sync of a user's roles from an identity provider and an account's deactivation
(``tenants.identity``) lock it first, FOR NO KEY UPDATE, which never conflicts with the KEY SHARE of
a foreign-key check, and then write only that user's memberships, sessions and tokens before the
audit chain lock.

Two consequences that are easy to miss:

* PostgreSQL takes a KEY SHARE lock on the row a foreign key points to when it checks the key, and
  Django creates every foreign key DEFERRABLE INITIALLY DEFERRED, so those checks, and their
  waits, come at COMMIT: after the chain lock. ``audit_record`` therefore runs the pending checks
  (``deferred_checks_run``) before it takes the chain lock, and services insert what refers to
  other rows (the outbox rows of a push, above all) *before* they record their event.
* A transaction that records several events (the push's recording marks many allocations active)
  takes every row lock it needs before the first event, and then writes each row once: updating a
  row a second time in one transaction makes PostgreSQL check all of its foreign keys again.

The safety net for what this order does not prevent is ``kernel.transactions.retry_on_deadlock``.
SQLite needs none of this: its write transaction (``BEGIN IMMEDIATE``) excludes every other writer.
"""

from __future__ import annotations

from collections.abc import Iterable

from django.db import models
from django.db.backends.base.base import BaseDatabaseWrapper


def advisory_xact_lock(connection: BaseDatabaseWrapper, lock_id: int) -> None:
    """Serialise the transactions that take ``lock_id`` until each ends (PostgreSQL's
    transaction-scoped advisory lock). SQLite needs nothing: its write transaction (``BEGIN
    IMMEDIATE``) already excludes every other writer."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [lock_id])


def deferred_checks_run(connection: BaseDatabaseWrapper) -> None:
    """Run now the deferred constraint checks (foreign keys) PostgreSQL would run at COMMIT, taking
    their KEY SHARE locks (and waiting for them) here; later statements are deferred again."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SET CONSTRAINTS ALL IMMEDIATE; SET CONSTRAINTS ALL DEFERRED")


def rows_key_share(connection: BaseDatabaseWrapper, model: type[models.Model], pks: Iterable[int]) -> None:
    """Lock rows of ``model`` FOR KEY SHARE, in primary-key order: the lock a foreign-key check
    takes, taken early so the check never waits later. It conflicts only with FOR UPDATE and with
    deleting the row or changing its key."""
    keys = sorted(set(pks))
    if connection.vendor != "postgresql" or not keys:
        return
    table = connection.ops.quote_name(model._meta.db_table)
    column = connection.ops.quote_name(model._meta.pk.column)
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT {column} FROM {table} WHERE {column} = ANY(%s) ORDER BY {column} FOR KEY SHARE",  # noqa: S608 - quoted names
            [keys],
        )
