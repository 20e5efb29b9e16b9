"""Fixtures for the audit log tests: a signing key and an external checkpoint folder per test,
helpers that write events the way services do (inside a transaction), and one that appends a row
past ``audit_record``, as any code on the application's database connection could."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

import pytest
from django.db import connection, transaction

from audit import actions
from audit.checkpoints import checkpoint_publish
from audit.integrity.canonical import canonical_json, leaf_hash
from audit.integrity.keys import SigningKey, VerifierKey, signing_key_generate
from audit.integrity.store import CheckpointFolder
from audit.models import AuditCheckpoint, AuditEvent
from audit.schema import statements_for
from audit.services import audit_record
from tenants.models import Role
from tests.conftest import World

ORIGIN = "test.gpuportal/audit"

requires_postgres = pytest.mark.skipif(
    connection.vendor != "postgresql" and os.environ.get("GPUPORTAL_REQUIRE_POSTGRES") != "1",
    reason="needs PostgreSQL (make test provides it; GPUPORTAL_REQUIRE_POSTGRES=1 turns this skip into a failure)",
)


@pytest.fixture
def postgres() -> None:
    """For tests marked ``requires_postgres``: fail (not skip) when PostgreSQL was required."""
    assert connection.vendor == "postgresql", "GPUPORTAL_REQUIRE_POSTGRES=1 but the tests run on SQLite"


@pytest.fixture
def signing_key() -> SigningKey:
    return signing_key_generate(ORIGIN)


@pytest.fixture
def verifier_key(signing_key: SigningKey) -> VerifierKey:
    return signing_key.verifier


@pytest.fixture
def checkpoint_dir(tmp_path: Path) -> Path:
    return tmp_path / "checkpoints"


@pytest.fixture(autouse=True)
def _audit_settings(settings: Any, signing_key: SigningKey, checkpoint_dir: Path) -> None:
    settings.GPUPORTAL_AUDIT_ORIGIN = ORIGIN
    settings.GPUPORTAL_AUDIT_SIGNING_KEY = signing_key.private_pem()
    settings.GPUPORTAL_AUDIT_CHECKPOINT_DIR = str(checkpoint_dir)


@pytest.fixture
def folder(checkpoint_dir: Path) -> CheckpointFolder:
    return CheckpointFolder(checkpoint_dir)


def record(department_id: int | None = None, *, details: dict[str, Any] | None = None) -> AuditEvent:
    with transaction.atomic():
        return audit_record(
            actor=None, action=actions.NODE_UPDATED, department_id=department_id, details=details or {}
        )


def record_many(department_ids: list[int | None]) -> list[AuditEvent]:
    return [record(department_id, details={"index": index}) for index, department_id in enumerate(department_ids)]


Publish = Callable[[], AuditCheckpoint]


@pytest.fixture
def publish(django_capture_on_commit_callbacks: Any) -> Publish:
    """``checkpoint_publish`` with its on-commit work (the external write) run at once, as it is
    after a real commit, also inside the rolled-back transaction of a test."""

    def run() -> AuditCheckpoint:
        with django_capture_on_commit_callbacks(execute=True):
            return checkpoint_publish()

    return run


@pytest.fixture
def world(world: World) -> World:
    """The shared world (``tests.conftest``), plus ``nlp_auditor``: an auditor of nlp's subtree only."""
    world.persona_add("nlp_auditor", role=Role.AUDITOR, department=world.nlp)
    return world


def connection_is_owner() -> bool:
    """Whether the tests' connection owns the audit tables (SQLite: always)."""
    if connection.vendor != "postgresql":
        return True
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_has_role(current_user, tableowner, 'MEMBER') FROM pg_tables WHERE tablename = 'audit_event'"
        )
        row = cursor.fetchone()
    return bool(row and row[0])


@contextmanager
def owner_connection() -> Iterator[Any]:
    """A separate autocommit connection to the test database as the owner: the tests' own
    connection when it is the owner, else the credentials of DATABASE_URL (the migrating owner)."""
    import psycopg
    from django.conf import settings

    settings_dict = connection.settings_dict
    user, password = settings_dict["USER"], settings_dict["PASSWORD"]
    if not connection_is_owner():
        owner = urlparse(os.environ.get("DATABASE_URL", ""))
        if not owner.username:
            pytest.skip("needs the owner's credentials in DATABASE_URL")
        user, password = unquote(owner.username), unquote(owner.password or "")
    assert settings.DATABASES["default"]["NAME"]
    with psycopg.connect(host=settings_dict["HOST"], port=settings_dict["PORT"], dbname=settings_dict["NAME"],
                         user=user, password=password, autocommit=True) as owner_session:
        yield owner_session


@contextmanager
def protection_dropped() -> Iterator[None]:
    """Play a database owner (or superuser) who drops the append-only triggers to tamper with the
    log; the signed checkpoints must still catch it. The triggers come back afterwards."""
    if not connection_is_owner():
        pytest.skip("playing the attacker needs the owner's connection; this run connects as the app role")
    with connection.cursor() as cursor:
        for statement in statements_for(connection.vendor, "drop_triggers"):
            cursor.execute(statement)
    try:
        yield
    finally:
        with connection.cursor() as cursor:
            for statement in statements_for(connection.vendor, "triggers"):
                cursor.execute(statement)


def tamper(sql: str, params: list[Any] | None = None) -> None:
    with protection_dropped(), connection.cursor() as cursor:
        cursor.execute(sql, params or [])


COLUMNS = ("seq, occurred_at, actor_id, actor_username, action, target_type, target_id, department_id, department_seq, "
           "outcome, request_id, hash, record")


def next_record(**changes: Any) -> tuple[int, str]:
    """A record for the next seq, made like audit_record makes one, with ``changes`` applied."""
    last = AuditEvent.objects.order_by("-seq").first()
    assert last is not None
    fields = json.loads(last.record)
    fields.update(seq=last.seq + 1, prev_hash=last.hash, department_id=None, department_seq=None,
                  department_prev_hash=None, action="node.updated", details={"bypassed": "audit_record"})
    fields.update(changes)
    return last.seq + 1, canonical_json(fields).decode("ascii")


def wrong_prev() -> tuple[str, str]:
    """A record whose prev_hash is not its predecessor's hash (its own hash is right)."""
    _, text = next_record(prev_hash="f" * 64)
    return text, leaf_hash(text.encode()).hex()


def append_past_audit_record(make: Callable[[], tuple[str, str]] = wrong_prev) -> int:
    """INSERT a row the way any code on the application's connection can: the triggers only check
    that its seq is the next number. Returns its seq."""
    text, hash_ = make()
    with connection.cursor() as cursor:
        cursor.execute("SELECT COALESCE(max(seq), 0) + 1 FROM audit_event")
        seq = int(cursor.fetchone()[0])
        cursor.execute(
            f"INSERT INTO audit_event ({COLUMNS}) VALUES (%s, CURRENT_TIMESTAMP, NULL, '', 'node.updated', '', '', "  # noqa: S608
            "NULL, NULL, 'success', '', %s, %s)",
            [seq, hash_, text],
        )
    return seq
