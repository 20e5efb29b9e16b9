"""The one global lock order, and the helpers that keep transactions in it.

Every transaction takes its locks in this order, skipping what it does not need; within one kind,
rows are locked in primary-key order:

1. the outbox rows of cluster pushes a delivery worker claims or records (``clusters.ClusterPush``:
   only the worker locks rows that exist, with SKIP LOCKED where it takes several; the services
   below insert new ones, which nobody else can lock yet);
2. allocations (one exception: approval locks the grants it reclaims *after* the department chain
   and the clusters, and only with SKIP LOCKED, so it never waits for them; a grant it could not
   lock is left out and the plan made again without it — see ``allocations.grants.reclaims``), then the
   idle case that follows a grant (``accounting.IdleCase``: the idle evaluation and the keep,
   exempt and release of a case lock the grant first, then its case; see ``accounting.idle``);
3. departments: the department chain, nearest first but locked in primary-key order (admission,
   quota changes), then projects (by the changes of one project), then quota and flavor rows (the
   catalogue);
4. clusters: by whoever books or moves GPUs on them, changes their settings or credentials, or
   frees reservations on them (the UPDATE that moves the placement version,
   ``allocations.booking.state.placement_version_bump``: after the allocation's row); FOR KEY
   SHARE by the push's recording, which must not wait for a cluster once it holds the chain lock;
5. node tokens and node report states, then nodes, then their GPUs (telemetry and the inventory,
   see docs/telemetry.md; a GPU's write also updates its node's row, through the inventory stamp's
   trigger, ``clusters.stamps``, which every writer of GPUs has locked first), then reservations
   (written only under their cluster's or allocation's lock);
6. the audit chain lock (``audit.services.audit_record``'s transaction-scoped advisory lock), always
   last. Nothing may wait for a row after it, because every writer of an audit event waits for it
   while holding its rows: a transaction that waits for a row while holding the chain lock
   deadlocks with the holder of that row as soon as that holder records its own event.

Four locks stand apart, each taken first by the only transactions that take it: the usage roll-up's
advisory lock (``accounting.rolling``: a roll then writes only its own ``UsageHour`` and ``UsageDay``
rows, after it has taken the KEY SHARE of the rows they refer to in this order, with
``references_key_share``; it records no audit event), the statement close's
(``accounting.statements``: it writes a department's statements and lines, then takes the audit
chain lock last), and fair share's (``allocations.fair_share.services``: the decay tick then writes
only ``FairShare`` rows, records no audit event and, at COMMIT, takes the KEY SHARE of their
departments, in primary-key order as it writes them; a change of shares writes one ``FairShare``
row, then takes the audit chain lock last). No transaction that holds a row ever waits for any of them. A user's account row is
the fourth: the sync of a user's roles from an identity provider and an account's deactivation
(``tenants.identity``) lock it first, FOR NO KEY UPDATE, which never conflicts with the KEY SHARE of
a foreign-key check, and then write only that user's memberships, sessions and tokens before the
audit chain lock. Above all of these, outside any transaction: a cluster's push lock
(``delivery.applied.shared_push_lock``, a session-level advisory lock), taken only by a push of the
cluster's cluster-wide objects and by a full sync, before they open any transaction, and held
across theirs; nothing else waits for it.

Lock strength: allocations, departments, projects and clusters are the rows nearly every writer
refers to, and each foreign-key check of a row that refers to one takes its KEY SHARE lock until
the writer commits (the usage roll-up's and the utilisation tick's rows, outbox rows, new
memberships). FOR UPDATE conflicts with KEY SHARE; FOR NO KEY UPDATE does not, and still
excludes every other writer of the row. A transaction that only updates such a row (never deletes
it, never changes its key) locks it FOR NO KEY UPDATE (``select_for_update(no_key=True)``;
``NO_KEY_KINDS``), or: an approval's SKIP LOCKED skipped every victim a writer was inserting rows
about (a 409, an unmet window edge), and adding a project member held the project FOR UPDATE while
its new membership's check waited for the department an approval held, whose outbox rows then
waited for the project. FOR UPDATE on those kinds only where ``FULL_ROW_LOCKS`` says why.

Three consequences that are easy to miss:

* PostgreSQL takes a KEY SHARE lock on the row a foreign key points to when it checks the key, and
  Django creates every foreign key DEFERRABLE INITIALLY DEFERRED, so those checks, and their
  waits, come at COMMIT: after the chain lock. ``audit_record`` therefore runs the pending checks
  (``deferred_checks_run``) before it takes the chain lock, and services insert what refers to
  other rows (the outbox rows of a push, above all) *before* they record their event.
* Those checks run row after row, in the order the rows were written, each kind of key mixed with
  the others: a writer of many rows that refer to grants, departments and clusters (the usage
  roll-up, the utilisation tick) would hold the KEY SHARE of a cluster while it waits for a
  department that an approval holds FOR UPDATE, and the approval waits for the cluster. Such a
  writer takes those locks first, in this order (``references_key_share``, by ``LOCK_ORDER``).
* A transaction that records several events (the push's recording marks many allocations active)
  takes every row lock it needs before the first event, and then writes each row once: updating a
  row a second time in one transaction makes PostgreSQL check all of its foreign keys again.

The safety net for what this order does not prevent is ``kernel.transactions.retry_on_deadlock``.
SQLite needs none of this: its write transaction (``BEGIN IMMEDIATE``) excludes every other writer.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from django.db import models
from django.db.backends.base.base import BaseDatabaseWrapper

# The order above as data, by model label: the kinds a transaction may lock, first to last (the
# outbox rows, allocations, idle cases, the department chain, projects, quotas, flavors, clusters,
# node tokens, node report states, nodes, GPUs, reservations; the audit chain lock after them all).
# ``references_key_share`` locks by it, and refuses a kind that has no place in it;
# tests/architecture/test_row_locks.py holds the source and docs/security.md to it.
LOCK_ORDER: tuple[str, ...] = (
    "clusters.ClusterPush",
    "allocations.Allocation",
    "accounting.IdleCase",
    "tenants.Department",
    "tenants.Project",
    "allocations.Quota",
    "allocations.Flavor",
    "clusters.Cluster",
    "telemetry.NodeToken",
    "telemetry.NodeReportState",
    "clusters.Node",
    "clusters.Gpu",
    "allocations.Reservation",
)


# The kinds locked FOR NO KEY UPDATE (see "Lock strength" above); FOR UPDATE of them only in the
# functions listed in ``FULL_ROW_LOCKS`` ("path:function": why), where the row is deleted or its key
# changes. tests/architecture/test_row_locks.py holds the source to both.
NO_KEY_KINDS: tuple[str, ...] = ("allocations.Allocation", "tenants.Department", "tenants.Project", "clusters.Cluster")
FULL_ROW_LOCKS: dict[str, str] = {}


def lock_rank(model: type[models.Model]) -> int:
    """The place of ``model``'s rows in the global lock order (``LOCK_ORDER``)."""
    label = model._meta.label
    if label not in LOCK_ORDER:
        raise LookupError(f"{label} has no place in the global lock order (kernel.locks.LOCK_ORDER)")
    return LOCK_ORDER.index(label)


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


def rows_key_share(connection: BaseDatabaseWrapper, model: type[models.Model], pks: Iterable[int]) -> set[int] | None:
    """Lock rows of ``model`` FOR KEY SHARE, in primary-key order: the lock a foreign-key check
    takes, taken early so the check never waits later. It conflicts only with FOR UPDATE and with
    deleting the row or changing its key. Returns the keys it locked (those of rows that still
    exist), or None where nothing was locked (not PostgreSQL): then ask the table whether they exist."""
    keys = sorted(set(pks))
    if connection.vendor != "postgresql":
        return None
    if not keys:
        return set()
    table = connection.ops.quote_name(model._meta.db_table)
    column = connection.ops.quote_name(model._meta.pk.column)
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT {column} FROM {table} WHERE {column} = ANY(%s) ORDER BY {column} FOR KEY SHARE",  # noqa: S608 - quoted names
            [keys],
        )
        return {int(row[0]) for row in cursor.fetchall()}


def references_key_share(connection: BaseDatabaseWrapper, rows: Iterable[models.Model]) -> None:
    """Lock FOR KEY SHARE, kind after kind in the global order and in primary-key order within a
    kind, every row that the foreign keys of ``rows`` (new rows about to be written) point to.

    PostgreSQL checks those keys at COMMIT (Django's are deferred), row after row, each with a KEY
    SHARE lock on the row it points to: in the order the rows were written, which is no order at
    all. A writer of many rows (the usage roll-up, the utilisation tick) would then hold the KEY
    SHARE of one row (a cluster) while it waits for another (a department) that a transaction in
    the order holds FOR UPDATE and that waits for the first: a deadlock. Taken here first, the
    checks at COMMIT wait for nothing."""
    targets: dict[type[models.Model], set[int]] = defaultdict(set)
    for row in rows:
        for field in row._meta.concrete_fields:
            if not isinstance(field, models.ForeignKey) or not getattr(field, "db_constraint", True):
                continue  # no constraint, no check
            value, target = getattr(row, field.attname), field.related_model
            if value is not None and isinstance(target, type) and field.target_field.primary_key:
                targets[target].add(int(value))
    for model in sorted(targets, key=lock_rank):
        rows_key_share(connection, model, targets[model])
