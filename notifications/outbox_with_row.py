"""A new row and the notification about it, written together: on PostgreSQL in one statement (the
row's insert in a ``WITH`` clause, the notification's insert reading the id it returned), where
writing the row, then the notification that names its id took two round trips on the busiest write
path (a submitted request). Elsewhere (SQLite, or a model whose insert returns more than its id)
the two inserts run one after the other, as ``notification_enqueue`` writes them.

Either way the rows are the same ones and so is the hand-over: the notification is fanned out
once the transaction commits.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.db import connections, router, transaction
from django.db.models import Model
from django.db.models.sql import InsertQuery

from notifications.events import Event
from notifications.models import Notification
from notifications.outbox import FAN_OUT_TASK, notification_enqueue, task_send

SUBJECT_LIMIT = 64
"""``Notification.subject``'s length: a longer subject is cut, as ``notification_enqueue`` does."""


def notification_enqueue_with_row(
    *, row: Model, event: Event, recipients: Iterable[int], department_id: int | None, subject_prefix: str,
    payload: dict[str, Any], id_key: str,
) -> Notification:
    """Insert ``row`` (not saved yet) and a notification whose subject is ``subject_prefix`` followed
    by the row's id and whose payload is ``payload`` with the row's id under ``id_key``, in the
    current transaction; the notification is fanned out once that commits. ``row`` comes back
    saved, with its id, as ``row.save()`` leaves it (models without signals or a ``save`` of their
    own: neither runs)."""
    alias = router.db_for_write(type(row), instance=row)
    connection = connections[alias]
    meta = row._meta
    if connection.vendor != "postgresql" or [field.attname for field in meta.db_returning_fields] != [meta.pk.attname]:
        row.save(using=alias)
        return _enqueued(
            notification_enqueue(
                event=event, recipients=recipients, department_id=department_id,
                subject=f"{subject_prefix}{row.pk}", payload={**payload, id_key: row.pk},
            )
        )  # fmt: skip
    notification = Notification(
        event=event.code, recipients=sorted(set(recipients)), department_id=department_id, subject=subject_prefix,
        payload=payload, dedupe_key=None,
    )
    row_sql, row_params = _insert_sql(row, alias)
    row_id_column = f"inserted.{connection.ops.quote_name(meta.pk.column)}"
    note_sql, note_params = _notification_select(notification, connection, id_key=id_key, row_id=row_id_column)
    table = connection.ops.quote_name(Notification._meta.db_table)
    # Quoted names and Django's compiled insert: every value is a parameter.
    sql = (
        f"WITH inserted AS ({row_sql}), "  # noqa: S608
        f"noted AS (INSERT INTO {table} {note_sql} FROM inserted RETURNING {table}.id) "
        f"SELECT {row_id_column}, noted.id FROM inserted CROSS JOIN noted"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [*row_params, *note_params])
        row_id, notification_id = cursor.fetchone()
    row.pk = row_id
    row._state.adding, row._state.db = False, alias
    notification.pk = notification_id
    notification.subject = f"{subject_prefix}{row_id}"[:SUBJECT_LIMIT]
    notification.payload = {**payload, id_key: row_id}
    notification._state.adding, notification._state.db = False, alias
    transaction.on_commit(lambda: task_send(FAN_OUT_TASK, notification_id), using=alias)
    return notification


def _enqueued(notification: Notification | None) -> Notification:
    if notification is None:  # pragma: no cover - only a dedupe key can skip a notification
        raise AssertionError("a notification without a dedupe key is always written")
    return notification


def _insert_sql(row: Model, alias: str) -> tuple[str, list[Any]]:
    """The ``INSERT … RETURNING id`` that ``row.save()`` would run (defaults and ``auto_now_add``
    filled in by the fields' ``pre_save`` as there)."""
    meta = row._meta
    fields = [field for field in meta.local_concrete_fields if not field.generated and field is not meta.auto_field]
    query = InsertQuery(type(row))
    query.insert_values(fields, [row])
    compiler = query.get_compiler(using=alias)
    compiler.returning_fields = [meta.pk]
    [(sql, params)] = compiler.as_sql()
    return sql, list(params)


def _notification_select(notification: Notification, connection: Any, *, id_key: str, row_id: str) -> tuple[str, list[Any]]:
    """``(columns) SELECT values`` of the notification, its subject and payload completed with the
    id the row's insert returned (the column ``row_id``)."""
    meta = Notification._meta
    columns, values, params = [], [], []
    for field in meta.local_concrete_fields:
        if field is meta.auto_field or field.generated:
            continue
        columns.append(connection.ops.quote_name(field.column))
        params.append(field.get_db_prep_save(field.pre_save(notification, True), connection))
        if field.name == "subject":
            values.append(f"LEFT(%s || {row_id}::text, {SUBJECT_LIMIT})")
        elif field.name == "payload":
            values.append(f"%s || jsonb_build_object(%s::text, {row_id})")
            params.append(id_key)
        else:
            values.append("%s")
    return f"({', '.join(columns)}) SELECT {', '.join(values)}", params
