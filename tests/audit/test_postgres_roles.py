"""The two-role set-up on PostgreSQL, seen from a second connection as the application's role:
INSERT and SELECT work; UPDATE, DELETE, TRUNCATE, disabling or dropping triggers, and switching
triggers off for the session are refused."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any
from urllib.parse import unquote, urlparse

import pytest
from django.db import connection

from audit.conf import audit_runtime_role
from audit.schema import APPEND_FUNCTION
from tests.audit.conftest import record, requires_postgres

pytestmark = [pytest.mark.django_db(transaction=True), requires_postgres]


@pytest.fixture
def runtime(postgres: None) -> Iterator[Any]:
    """A connection to the test database as the application's role (not the migrating owner)."""
    import psycopg

    url = os.environ.get("GPUPORTAL_APP_DATABASE_URL")
    role = audit_runtime_role()
    assert url and role, "set GPUPORTAL_APP_DATABASE_URL to the application role's URL"
    parsed = urlparse(url)
    settings_dict = connection.settings_dict
    with psycopg.connect(
        host=parsed.hostname or settings_dict["HOST"], port=parsed.port or settings_dict["PORT"],
        dbname=settings_dict["NAME"], user=unquote(parsed.username or role),
        password=unquote(parsed.password or ""), autocommit=True,
    ) as runtime_connection:
        with runtime_connection.cursor() as cursor:
            cursor.execute("SELECT current_user")
            assert cursor.fetchone() == (role,)
        yield runtime_connection


def refused(runtime: Any, sql: str) -> str:
    import psycopg

    with pytest.raises(psycopg.Error) as error, runtime.cursor() as cursor:
        cursor.execute(sql)
    return str(error.value)


def test_the_application_role_may_read_and_append(runtime: Any) -> None:
    event = record()
    with runtime.cursor() as cursor:
        cursor.execute("SELECT hash FROM audit_event WHERE seq = %s", [event.seq])
        assert cursor.fetchone()[0] == event.hash
        cursor.execute("SELECT has_table_privilege('audit_event', 'INSERT')")
        assert cursor.fetchone()[0] is True
        cursor.execute("SELECT has_function_privilege(%s, 'EXECUTE')", [APPEND_FUNCTION])
        assert cursor.fetchone()[0] is True


def test_the_application_role_appends_through_the_function_with_its_own_privileges(runtime: Any) -> None:
    """``audit_event_append`` is SECURITY INVOKER: granted EXECUTE, the application's role still
    may only do what it could do itself."""
    with runtime.cursor() as cursor:
        cursor.execute("SELECT prosecdef FROM pg_proc WHERE oid = to_regprocedure(%s)", [APPEND_FUNCTION])
        assert cursor.fetchone() == (False,)
        cursor.execute("SELECT has_function_privilege(%s, 'EXECUTE')", [APPEND_FUNCTION])
        assert cursor.fetchone()[0] is True
        cursor.execute("BEGIN")
        cursor.execute(
            "SELECT new_seq, new_hash FROM audit_event_append(ARRAY['{\"a\":', ',\"b\":', ',\"c\":', "
            "',\"d\":', ',\"e\":', '}'], NULL, NULL, '', 'node.updated', '', '', 'success', '')"
        )
        seq, hash_ = cursor.fetchone()
        cursor.execute("SELECT hash FROM audit_event WHERE seq = %s", [seq])
        assert cursor.fetchone() == (hash_,)
        cursor.execute("ROLLBACK")


@pytest.mark.parametrize(
    "statement",
    [
        "UPDATE audit_event SET action = 'auth.login'",
        "DELETE FROM audit_event",
        "TRUNCATE audit_event",
        "UPDATE audit_checkpoint SET note = ''",
        "DELETE FROM audit_checkpoint",
        "TRUNCATE audit_checkpoint",
        "DELETE FROM audit_merkle_node",
        "TRUNCATE audit_merkle_node",
    ],
)
def test_the_application_role_may_not_change_or_remove_anything(runtime: Any, statement: str) -> None:
    record()
    assert "permission denied" in refused(runtime, statement)


@pytest.mark.parametrize(
    "statement",
    [
        "ALTER TABLE audit_event DISABLE TRIGGER audit_event_no_update_delete",
        "ALTER TABLE audit_event DISABLE TRIGGER ALL",
        "DROP TRIGGER audit_event_no_truncate ON audit_event",
        "DROP FUNCTION audit_refuse_change() CASCADE",
        "DROP TABLE audit_event",
        "ALTER TABLE audit_event RENAME TO audit_event_old",
        "SET session_replication_role = replica",
        "CREATE OR REPLACE FUNCTION audit_refuse_change() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN OLD; END $$",
        "DROP FUNCTION audit_event_append(text[], bigint, bigint, text, text, text, text, text, text)",
        "ALTER FUNCTION audit_event_append(text[], bigint, bigint, text, text, text, text, text, text) "
        "SECURITY DEFINER",
        "CREATE OR REPLACE FUNCTION audit_event_append(template text[], p_department_id bigint, p_actor_id bigint, "
        "p_actor_username text, p_action text, p_target_type text, p_target_id text, p_outcome text, "
        "p_request_id text, OUT new_seq bigint, OUT new_occurred_at timestamptz, OUT new_department_seq bigint, "
        "OUT new_hash text, OUT new_record text) LANGUAGE sql AS $$ SELECT 1::bigint, now(), 1::bigint, '', '' $$",
    ],
)
def test_the_application_role_may_not_switch_the_protection_off(runtime: Any, statement: str) -> None:
    message = refused(runtime, statement)
    assert "must be owner" in message or "permission denied" in message, message


def test_the_application_role_cannot_grant_itself_more(runtime: Any) -> None:
    with runtime.cursor() as cursor:
        cursor.execute("GRANT UPDATE, DELETE, TRUNCATE ON audit_event TO PUBLIC")  # a warning, nothing granted
        cursor.execute(
            "SELECT has_table_privilege('audit_event', 'UPDATE') OR has_table_privilege('audit_event', 'DELETE') "
            "OR has_table_privilege('audit_event', 'TRUNCATE')"
        )
        assert cursor.fetchone()[0] is False


def test_the_application_role_may_not_insert_out_of_sequence(runtime: Any) -> None:
    record()
    message = refused(
        runtime,
        "INSERT INTO audit_event (seq, occurred_at, actor_username, action, target_type, target_id, outcome, "
        "request_id, hash, record) VALUES ((SELECT max(seq) + 5 FROM audit_event), now(), '', 'x', '', '', "
        "'success', '', repeat('0', 64), '{}')",
    )
    assert "is not the next number" in message


@pytest.mark.parametrize(
    "statement",
    [
        "SELECT count(*) FROM audit_quarantine",
        "SELECT count(*) FROM audit_quarantined_event",
        "INSERT INTO audit_quarantine (id, created_at, from_seq, to_seq, event_count, digest, checkpoint_number, "
        "checkpoint_size, anchor_hash, failure_kind, failure_message, reason, operator) VALUES (99, now(), 5, 5, 1, "
        "repeat('0', 64), 0, 0, repeat('0', 64), 'x', 'x', 'x', 'x')",
        "DELETE FROM audit_quarantined_event",
        "TRUNCATE audit_quarantine",
        "DROP TABLE audit_quarantined_event",
    ],
)
def test_the_application_role_may_not_touch_the_quarantine(runtime: Any, statement: str) -> None:
    message = refused(runtime, statement)
    assert "permission denied" in message or "must be owner" in message, message
