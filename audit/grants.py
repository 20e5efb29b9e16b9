"""PostgreSQL privileges for the two-role set-up.

The owner role (the one that runs ``migrate``) owns every table. The runtime role (the one the
application connects as) gets SELECT, INSERT, UPDATE and DELETE on the ordinary tables, but only
SELECT and INSERT on the audit tables and on the append-only tables other apps register
(``audit.schema.append_only_table_register``: the custody ledger) (and EXECUTE on ``audit_event_append``, which runs with those
privileges), nothing at all on the quarantine tables (what a recovery
moved out of the chain: only the owner reads or writes them), and it may not own, alter or disable
anything. Applied after every ``migrate`` (``post_migrate``) and by ``manage.py audit_grants``;
idempotent.
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.db import DEFAULT_DB_ALIAS, connections
from django.db.backends.base.base import BaseDatabaseWrapper

from audit.conf import audit_runtime_grant_truncate, audit_runtime_role
from audit.schema import APPEND_FUNCTION, AUDIT_TABLES, QUARANTINE_TABLES, append_only_tables_elsewhere


def _quote(connection: BaseDatabaseWrapper, name: str) -> str:
    return str(connection.ops.quote_name(name))


def _role_check(connection: BaseDatabaseWrapper, role: str) -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT rolsuper, rolbypassrls FROM pg_roles WHERE rolname = %s", [role])
        found = cursor.fetchone()
        if found is None:
            raise ImproperlyConfigured(f"the runtime database role {role!r} does not exist; create it first")
        if found[0] or found[1]:
            raise ImproperlyConfigured(f"the runtime database role {role!r} must not be a superuser")
        cursor.execute("SELECT current_user, pg_has_role(%s, current_user, 'MEMBER')", [role])
        owner, member = cursor.fetchone()
        if owner == role or member:
            raise ImproperlyConfigured(
                f"the runtime database role {role!r} is (a member of) the owner {owner!r}: it could alter the audit "
                "tables; use a separate role for the application"
            )


def runtime_grants_apply(*, using: str = DEFAULT_DB_ALIAS, role: str | None = None) -> str | None:
    """Grant the runtime role its privileges; returns the role, or None when none is configured
    (or when connected as the runtime role itself, which cannot grant anything)."""
    connection = connections[using]
    role = role or audit_runtime_role()
    if connection.vendor != "postgresql" or not role:
        return None
    with connection.cursor() as cursor:
        cursor.execute("SELECT current_user")
        if cursor.fetchone()[0] == role:
            return None  # connected as the application itself (a test run's flush): nothing to grant
    _role_check(connection, role)
    quoted = _quote(connection, role)
    ordinary = "SELECT, INSERT, UPDATE, DELETE" + (", TRUNCATE" if audit_runtime_grant_truncate() else "")
    audit_tables = ", ".join(AUDIT_TABLES)
    quarantine_tables = ", ".join(QUARANTINE_TABLES)
    with connection.cursor() as cursor:
        cursor.execute("SELECT current_schema()")
        schema = _quote(connection, cursor.fetchone()[0])
        for statement in (
            f"GRANT USAGE ON SCHEMA {schema} TO {quoted}",
            f"GRANT {ordinary} ON ALL TABLES IN SCHEMA {schema} TO {quoted}",
            f"GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA {schema} TO {quoted}",
            f"REVOKE ALL ON django_migrations FROM {quoted}",
            f"GRANT SELECT ON django_migrations TO {quoted}",
            f"REVOKE ALL ON {audit_tables} FROM {quoted}",
            f"REVOKE ALL ON {audit_tables} FROM PUBLIC",
            f"GRANT SELECT, INSERT ON {audit_tables} TO {quoted}",
            f"REVOKE ALL ON {quarantine_tables} FROM {quoted}",
            f"REVOKE ALL ON {quarantine_tables} FROM PUBLIC",
        ):
            cursor.execute(statement)
        for table in append_only_tables_elsewhere():
            cursor.execute("SELECT to_regclass(%s) IS NOT NULL", [table])
            if cursor.fetchone()[0]:  # its app's migrations applied
                cursor.execute(f"REVOKE ALL ON {table} FROM {quoted}")
                cursor.execute(f"GRANT SELECT, INSERT ON {table} TO {quoted}")
        cursor.execute("SELECT to_regprocedure(%s) IS NOT NULL", [APPEND_FUNCTION])
        if cursor.fetchone()[0]:  # migration 0004 applied: audit_record's chain step (SECURITY INVOKER)
            cursor.execute(f"GRANT EXECUTE ON FUNCTION {APPEND_FUNCTION} TO {quoted}")
    return role


def on_post_migrate(sender: Any, using: str = DEFAULT_DB_ALIAS, **kwargs: Any) -> None:
    runtime_grants_apply(using=using)
