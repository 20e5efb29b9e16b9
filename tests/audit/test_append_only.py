"""The database keeps the log append-only: triggers refuse UPDATE, DELETE (and TRUNCATE on
PostgreSQL) for everybody, and Django's flush never touches the audit tables.

When the tests connect as the application's role, its missing privileges refuse first
("permission denied"); the triggers are then checked through a connection as the owner."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import DatabaseError, connection, transaction

from audit.models import AuditCheckpoint, AuditEvent
from audit.schema import AUDIT_TABLES
from tests.audit.conftest import Publish, connection_is_owner, owner_connection, record, requires_postgres

pytestmark = pytest.mark.django_db


REFUSED = "append-only|permission denied"


def refused(sql: str, params: list[Any] | None = None) -> str:
    with pytest.raises(DatabaseError) as error, transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(sql, params or [])
    return str(error.value)


def test_an_event_cannot_be_updated_or_deleted_through_the_orm() -> None:
    event = record()
    with pytest.raises(DatabaseError, match=REFUSED), transaction.atomic():
        AuditEvent.objects.filter(seq=event.seq).update(action="auth.login")
    with pytest.raises(DatabaseError, match=REFUSED), transaction.atomic():
        AuditEvent.objects.filter(seq=event.seq).delete()
    event.refresh_from_db()
    assert event.action == "node.updated"


@pytest.mark.parametrize(("table", "column"), [("audit_event", "hash"), ("audit_checkpoint", "root"),
                                               ("audit_merkle_node", "hash")])
def test_every_audit_table_refuses_update_and_delete_in_sql(table: str, column: str, publish: Publish) -> None:
    record()
    publish()
    with connection.cursor() as cursor:  # a row to protect (nodes appear only every 256 events)
        cursor.execute("INSERT INTO audit_merkle_node (level, position, hash) VALUES (8, 999999, %s)", ["0" * 64])
    expected = "append-only" if connection_is_owner() else "permission denied"
    for statement in (f"UPDATE {table} SET {column} = {column}", f"DELETE FROM {table}"):  # noqa: S608
        assert expected in refused(statement)
    assert AuditCheckpoint.objects.exists()


@requires_postgres
@pytest.mark.parametrize("table", AUDIT_TABLES)
def test_truncate_is_refused_even_for_the_owner(table: str, postgres: None) -> None:
    import psycopg

    # no event is written here: this test's open transaction would hold a lock that TRUNCATE waits for
    with owner_connection() as owner, pytest.raises(psycopg.Error) as error, owner.cursor() as cursor:
        cursor.execute("SET lock_timeout = '10s'")
        cursor.execute(f"TRUNCATE {table}")
    assert "append-only: TRUNCATE" in str(error.value)


def test_the_test_runner_and_manage_py_flush_never_empty_the_log() -> None:
    flushed = connection.introspection.django_table_names(only_existing=True, include_views=False)
    assert not set(AUDIT_TABLES) & set(flushed)
    assert "tenants_department" in flushed
