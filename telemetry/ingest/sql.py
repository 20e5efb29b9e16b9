"""Raw SQL for the report ingest: reads converted as the ORM converts them, and writes sent in as
few round trips as the database allows.

The ORM builds and compiles every query anew; for the handful of rows of one report that costs
more than the database's work (about a millisecond of CPU per report, measured with
``bench/agent_ingest.py``). Here a statement's text comes from the model's metadata, values are
prepared for the database by each field (``get_db_prep_save``) and read back through the same
converters the ORM applies (``from_db_value`` and the backend's own), so what is stored and read
is what the ORM would store and read.

``Statements`` collects the writes of one report and sends them together: on PostgreSQL as one
multi-statement string (Django's client-side binding cursor sends it as one query, one round
trip), on SQLite one statement at a time. Writes that go through the ORM flush it first, so the
statements reach the database in the order they were added (the ingest's lock order).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, cast

from django.db import models, transaction
from django.db.backends.base.base import BaseDatabaseWrapper

Converter = Callable[[Any, Any, BaseDatabaseWrapper], Any]

# Statement texts by what they depend on (the model, the columns, the backend, the shape): built
# once per process, the same few statements run for every report.
_TEXTS: dict[tuple[Any, ...], str] = {}


def cached_text(key: tuple[Any, ...], build: Callable[[], str]) -> str:
    text = _TEXTS.get(key)
    if text is None:
        text = _TEXTS[key] = build()
    return text


def _fields(model: type[models.Model], field_names: Sequence[str]) -> list[models.Field[Any, Any]]:
    return [cast("models.Field[Any, Any]", model._meta.get_field(name)) for name in field_names]


def _prepared(
    fields: Sequence[models.Field[Any, Any]], values: Sequence[Any], connection: BaseDatabaseWrapper
) -> list[Any]:
    return [field.get_db_prep_save(value, connection) for field, value in zip(fields, values, strict=True)]


class Columns:
    """Columns of one model under a table alias, selected by raw SQL and converted as the ORM
    converts them. ``field_names`` are attribute names (``gpu_id``); ``None``: every concrete field
    in the model's order (what ``Model.from_db`` takes)."""

    def __init__(self, model: type[models.Model], alias: str, field_names: Sequence[str] | None = None) -> None:
        self.model = model
        self.alias = alias
        if field_names is None:
            field_names = [field.attname for field in model._meta.concrete_fields]
        self.names = tuple(field_names)
        self.fields = _fields(model, self.names)
        self._converters: dict[str, list[tuple[int, list[Converter], Any]]] = {}

    def __len__(self) -> int:
        return len(self.names)

    def select(self, connection: BaseDatabaseWrapper) -> str:
        quote = connection.ops.quote_name
        return cached_text(
            ("select", self.model, self.alias, self.names, connection.vendor),
            lambda: ", ".join(f"{quote(self.alias)}.{quote(field.column)}" for field in self.fields),
        )

    def converted(self, values: Sequence[Any], connection: BaseDatabaseWrapper) -> list[Any]:
        """The row's values as the ORM would hand them to the model."""
        converters = self._converters.get(connection.vendor)
        if converters is None:
            converters = []
            for position, field in enumerate(self.fields):
                column = field.get_col(self.alias)
                found = [*connection.ops.get_db_converters(column), *column.get_db_converters(connection)]
                if found:
                    converters.append((position, found, column))
            # Per vendor: a backend's converters depend on the backend, not on the connection.
            self._converters[connection.vendor] = converters
        row = list(values)
        for position, functions, column in converters:
            value = row[position]
            for function in functions:
                value = function(value, column, connection)
            row[position] = value
        return row

    def instance(self, values: Sequence[Any], connection: BaseDatabaseWrapper) -> Any:
        """A model instance of the row (every concrete field selected, in the model's order)."""
        return self.model.from_db(connection.alias, list(self.names), self.converted(values, connection))


class Statements:
    """Writes collected to be sent together (see the module's docstring)."""

    def __init__(self) -> None:
        self.connection = transaction.get_connection()
        self._sql: list[str] = []
        self._params: list[Any] = []

    def add(self, sql: str, params: Sequence[Any]) -> None:
        if self.connection.vendor == "postgresql":
            self._sql.append(sql)
            self._params.extend(params)
        else:
            with self.connection.cursor() as cursor:
                cursor.execute(sql, params)

    def flush(self) -> None:
        if not self._sql:
            return
        sql, params = ";\n".join(self._sql), self._params
        self._sql, self._params = [], []
        with self.connection.cursor() as cursor:
            cursor.execute(sql, params)

    def update(
        self, model: type[models.Model], field_names: Sequence[str], rows: Sequence[tuple[Any, Sequence[Any]]]
    ) -> None:
        """UPDATE ``field_names`` of each row, given as (pk, values). On PostgreSQL one statement
        for all rows, each column's values as one array (``UPDATE ... FROM unnest(...)``: its text
        is the same whatever the number of rows), else one statement per row. Django's
        ``bulk_update`` builds a CASE expression per field and row, which costs far more."""
        if not rows or not field_names:
            return
        connection = self.connection
        fields = _fields(model, field_names)
        names = tuple(field_names)
        if connection.vendor != "postgresql" or len(rows) == 1:
            sql = cached_text(("update", model, names, connection.vendor), lambda: _update_one(model, fields, connection))
            for key, values in rows:
                self.add(sql, [*_prepared(fields, values, connection), key])
            return
        sql = cached_text(("update-unnest", model, names), lambda: _update_unnest(model, fields, connection))
        columns = _columns(fields, [values for _, values in rows], connection)
        self.add(sql, [[key for key, _ in rows], *columns])

    def insert_ignoring_conflicts(
        self, model: type[models.Model], field_names: Sequence[str], rows: Sequence[Sequence[Any]]
    ) -> None:
        """INSERT the rows (values in the order of ``field_names``) in one statement; a row that
        would break a unique constraint is skipped. On PostgreSQL each column's values go as one
        array (``INSERT ... SELECT * FROM unnest(...)``)."""
        if not rows:
            return
        connection = self.connection
        fields = _fields(model, field_names)
        if connection.vendor == "postgresql":
            sql = cached_text(("insert-unnest", model, tuple(field_names)), lambda: _insert_unnest(model, fields, connection))
            self.add(sql, _columns(fields, rows, connection))
            return
        sql = cached_text(
            ("insert-values", model, tuple(field_names), connection.vendor, len(rows)),
            lambda: _insert_values(model, fields, connection, len(rows)),
        )
        params: list[Any] = []
        for values in rows:
            params.extend(_prepared(fields, values, connection))
        self.add(sql, params)


def _array_of(field: models.Field[Any, Any], connection: BaseDatabaseWrapper) -> str:
    """The PostgreSQL array type of the field's column (its values sent as one array parameter)."""
    column_type: str = cast(Any, field).cast_db_type(connection)
    return f"{column_type}[]"


def _update_one(
    model: type[models.Model], fields: Sequence[models.Field[Any, Any]], connection: BaseDatabaseWrapper
) -> str:
    quote = connection.ops.quote_name
    assignments = ", ".join(f"{quote(field.column)} = %s" for field in fields)
    pk = quote(model._meta.pk.column)
    return f"UPDATE {quote(model._meta.db_table)} SET {assignments} WHERE {pk} = %s"  # noqa: S608 (names from the model)


def _update_unnest(
    model: type[models.Model], fields: Sequence[models.Field[Any, Any]], connection: BaseDatabaseWrapper
) -> str:
    quote = connection.ops.quote_name
    meta = model._meta
    table, pk = quote(meta.db_table), quote(meta.pk.column)
    arrays = ", ".join(f"%s::{_array_of(field, connection)}" for field in [meta.pk, *fields])
    names = ", ".join(f"v_{index}" for index in range(len(fields)))
    assignments = ", ".join(f"{quote(field.column)} = v.v_{index}" for index, field in enumerate(fields))
    return (
        f"UPDATE {table} SET {assignments} FROM unnest({arrays}) AS v(v_pk, {names}) "  # noqa: S608
        f"WHERE {table}.{pk} = v.v_pk"
    )


def _insert_unnest(
    model: type[models.Model], fields: Sequence[models.Field[Any, Any]], connection: BaseDatabaseWrapper
) -> str:
    quote = connection.ops.quote_name
    columns = ", ".join(quote(field.column) for field in fields)
    arrays = ", ".join(f"%s::{_array_of(field, connection)}" for field in fields)
    table = quote(model._meta.db_table)
    return f"INSERT INTO {table} ({columns}) SELECT * FROM unnest({arrays}) ON CONFLICT DO NOTHING"  # noqa: S608


def _insert_values(
    model: type[models.Model], fields: Sequence[models.Field[Any, Any]], connection: BaseDatabaseWrapper, count: int
) -> str:
    quote = connection.ops.quote_name
    columns = ", ".join(quote(field.column) for field in fields)
    row_sql = "(" + ", ".join(["%s"] * len(fields)) + ")"
    table = quote(model._meta.db_table)
    return f"INSERT OR IGNORE INTO {table} ({columns}) VALUES {', '.join([row_sql] * count)}"  # noqa: S608


def _columns(
    fields: Sequence[models.Field[Any, Any]], rows: Sequence[Sequence[Any]], connection: BaseDatabaseWrapper
) -> list[list[Any]]:
    """The rows' values prepared for the database, one list per column (an array parameter)."""
    return [
        [field.get_db_prep_save(values[position], connection) for values in rows]
        for position, field in enumerate(fields)
    ]
