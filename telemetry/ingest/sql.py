"""Batched row writes for the report ingest, one statement sent as one batch (``executemany``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

from django.db import models, transaction


def update_rows(rows: Sequence[models.Model], field_names: list[str]) -> None:
    """Write ``field_names`` of each row back, one UPDATE per row sent as one batch (``executemany``).
    Django's ``bulk_update`` builds a CASE expression per field and row; for the handful of rows
    of one report that costs far more than the database's work."""
    if not rows:
        return
    meta = rows[0]._meta
    connection = transaction.get_connection()
    fields = [cast("models.Field[Any, Any]", meta.get_field(name)) for name in field_names]
    quote = connection.ops.quote_name
    assignments = ", ".join(f"{quote(field.column)} = %s" for field in fields)
    sql = f"UPDATE {quote(meta.db_table)} SET {assignments} WHERE {quote(meta.pk.column)} = %s"  # noqa: S608 (names from the model)
    params = [[field.get_db_prep_save(getattr(row, field.attname), connection) for field in fields] + [row.pk] for row in rows]
    with connection.cursor() as cursor:
        cursor.executemany(sql, params)


def insert_rows_ignoring_conflicts(rows: Sequence[models.Model], field_names: list[str]) -> None:
    """INSERT the rows in one batch; a row that would break a unique constraint is skipped."""
    if not rows:
        return
    meta = rows[0]._meta
    connection = transaction.get_connection()
    fields = [cast("models.Field[Any, Any]", meta.get_field(name)) for name in field_names]
    quote = connection.ops.quote_name
    columns = ", ".join(quote(field.column) for field in fields)
    placeholders = ", ".join(["%s"] * len(fields))
    if connection.vendor == "postgresql":
        sql = f"INSERT INTO {quote(meta.db_table)} ({columns}) VALUES ({placeholders}) ON CONFLICT DO NOTHING"  # noqa: S608
    else:
        sql = f"INSERT OR IGNORE INTO {quote(meta.db_table)} ({columns}) VALUES ({placeholders})"  # noqa: S608
    params = [[field.get_db_prep_save(getattr(row, field.attname), connection) for field in fields] for row in rows]
    with connection.cursor() as cursor:
        cursor.executemany(sql, params)
