"""``manage.py audit_export`` is audited like a download: an ``audit.exported`` event via "cli" with
the output, the filters, where it went and who ran it, recorded before anything is exported."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from audit.integrity.keys import VerifierKey
from audit.integrity.verifier import BundleVerifier
from audit.models import AuditEvent
from tests.audit.conftest import append_past_audit_record, record
from tests.conftest import World

pytestmark = pytest.mark.django_db


def last_event() -> AuditEvent:
    event = AuditEvent.objects.order_by("-seq").first()
    assert event is not None
    return event


def test_a_command_line_export_is_audited_with_its_filters_and_destination(world: World, tmp_path: Path) -> None:
    mine = record(world.speech.pk, details={"where": "speech"})
    out = tmp_path / "nlp.jsonl"
    call_command("audit_export", "--output", "jsonl", "--department", str(world.nlp.pk), "--action", "node.updated",
                 "--start", "2000-01-01T00:00:00Z", "--out", str(out))
    event = last_event()
    assert (event.action, event.department_id, event.actor_id) == ("audit.exported", world.nlp.pk, None)
    details = event.details
    assert details["via"] == "cli" and details["output"] == "jsonl" and details["destination"] == str(out)
    assert details["os_user"]
    assert details["scope"]["departments"] == sorted([world.nlp.pk, world.speech.pk])
    assert details["scope"]["actions"] == ["node.updated"] and details["scope"]["from"].startswith("2000-01-01T00")
    assert json.loads(out.read_bytes().splitlines()[-1])["seq"] == mine.seq


def test_a_command_line_bundle_covers_its_own_export_event(
    world: World, tmp_path: Path, verifier_key: VerifierKey, django_capture_on_commit_callbacks: Any
) -> None:
    record()
    out = tmp_path / "all.bundle.jsonl"
    with django_capture_on_commit_callbacks(execute=True):
        call_command("audit_export", "--out", str(out))
    event = last_event()
    assert event.action == "audit.exported" and event.details["destination"] == str(out)
    report = BundleVerifier([verifier_key]).verify(out.read_bytes().splitlines())
    assert report.checkpoint.size == event.seq  # the bundle's checkpoint was signed after the event was recorded


def test_a_refused_command_line_bundle_stays_audited(world: World, tmp_path: Path) -> None:
    record()
    append_past_audit_record()
    with pytest.raises(CommandError, match="no checkpoint can be signed.*audit_recover"):
        call_command("audit_export", "--output", "bundle", "--out", str(tmp_path / "x"))
    event = last_event()
    assert event.action == "audit.exported" and event.details["output"] == "bundle"
    assert event.details["destination"] == str(tmp_path / "x") and not (tmp_path / "x").exists()
