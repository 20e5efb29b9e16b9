"""Batched row writes for the report ingest: one statement, sent as one batch (``executemany``).

Values are given per row in the order of ``field_names`` (model field names) and prepared for the
database by each field, as the ORM would.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

from django.db import models, transaction


def _prepared(model: type[models.Model], field_names: Sequence[str]) -> list[models.Field[Any, Any]]:
    return [cast("models.Field[Any, Any]", model._meta.get_field(name)) for name in field_names]


def rows_update(model: type[models.Model], field_names: Sequence[str], rows: Sequence[tuple[Any, Sequence[Any]]]) -> None:
    """UPDATE ``field_names`` of each row, given as (pk, values): one UPDATE per row sent as one
    batch. Django's ``bulk_update`` builds a CASE expression per field and row; for the handful of
    rows of one report that costs far more than the database's work."""
    if not rows:
        return
    meta = model._meta
    connection = transaction.get_connection()
    fields = _prepared(model, field_names)
    quote = connection.ops.quote_name
    assignments = ", ".join(f"{quote(field.column)} = %s" for field in fields)
    sql = f"UPDATE {quote(meta.db_table)} SET {assignments} WHERE {quote(meta.pk.column)} = %s"  # noqa: S608 (names from the model)
    params = [
        [field.get_db_prep_save(value, connection) for field, value in zip(fields, values, strict=True)] + [pk]
        for pk, values in rows
    ]
    with connection.cursor() as cursor:
        cursor.executemany(sql, params)


def rows_insert_ignoring_conflicts(
    model: type[models.Model], field_names: Sequence[str], rows: Sequence[Sequence[Any]]
) -> None:
    """INSERT the rows (values in the order of ``field_names``) in one batch; a row that would break
    a unique constraint is skipped."""
    if not rows:
        return
    meta = model._meta
    connection = transaction.get_connection()
    fields = _prepared(model, field_names)
    quote = connection.ops.quote_name
    columns = ", ".join(quote(field.column) for field in fields)
    placeholders = ", ".join(["%s"] * len(fields))
    if connection.vendor == "postgresql":
        sql = f"INSERT INTO {quote(meta.db_table)} ({columns}) VALUES ({placeholders}) ON CONFLICT DO NOTHING"  # noqa: S608
    else:
        sql = f"INSERT OR IGNORE INTO {quote(meta.db_table)} ({columns}) VALUES ({placeholders})"  # noqa: S608
    params = [[field.get_db_prep_save(value, connection) for field, value in zip(fields, values, strict=True)] for values in rows]
    with connection.cursor() as cursor:
        cursor.executemany(sql, params)
