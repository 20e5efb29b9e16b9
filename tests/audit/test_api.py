"""The audit API: who sees what (auditors everything, department admins their subtree, everybody
else 404), filters, and streamed exports that verify offline."""

from __future__ import annotations

import csv
import io
import json
from typing import Any

import pytest
from django.urls import include, path

from audit.integrity.keys import VerifierKey
from audit.integrity.verifier import BundleVerifier
from audit.models import AuditEvent
from tests.audit.conftest import record
from tests.conftest import World

pytestmark = [pytest.mark.django_db, pytest.mark.urls("tests.audit.test_api")]

urlpatterns = [path("api/v1/audit/", include("compliance.urls"))]

BASE = "/api/v1/audit"


@pytest.fixture
def events(world: World) -> dict[str, AuditEvent]:
    return {
        "acme": record(world.acme.pk, details={"where": "acme"}),
        "nlp": record(world.nlp.pk, details={"where": "nlp"}),
        "speech": record(world.speech.pk, details={"where": "speech"}),
        "vision": record(world.vision.pk, details={"where": "vision"}),
        "none": record(None, details={"where": "none"}),
    }


def seqs(response: Any) -> set[int]:
    assert response.status_code == 200, response.content
    return {item["seq"] for item in response.json()["results"]}


def streamed(response: Any) -> bytes:
    assert response.status_code == 200, getattr(response, "content", b"")
    return b"".join(response.streaming_content)


def test_auditors_and_platform_admins_see_everything(world: World, events: dict[str, AuditEvent]) -> None:
    mine = {event.seq for event in events.values()}
    for persona in ("auditor", "platform"):
        assert mine <= seqs(world.client(persona).get(f"{BASE}/events/", {"page_size": 500}))


def test_department_admins_see_their_subtree_only(world: World, events: dict[str, AuditEvent]) -> None:
    visible = seqs(world.client("nlp_admin").get(f"{BASE}/events/", {"page_size": 500}))
    assert {events["nlp"].seq, events["speech"].seq} <= visible
    assert not {events["acme"].seq, events["vision"].seq, events["none"].seq} & visible
    assert seqs(world.client("nlp_auditor").get(f"{BASE}/events/", {"page_size": 500})) == visible


@pytest.mark.parametrize("persona", ["nlp_member", "nobody"])
def test_everybody_else_gets_404_everywhere(world: World, events: dict[str, AuditEvent], persona: str) -> None:
    client = world.client(persona)
    for url in ("/events/", "/export/", "/checkpoints/latest/", "/keys/"):
        assert client.get(BASE + url).status_code == 404, url
    assert client.post(f"{BASE}/checkpoints/").status_code == 404


def test_anonymous_requests_are_refused(world: World) -> None:
    assert world.client(None).get(f"{BASE}/events/").status_code in (401, 403)


def test_a_department_outside_ones_view_is_unknown(world: World, events: dict[str, AuditEvent]) -> None:
    client = world.client("nlp_admin")
    assert client.get(f"{BASE}/events/", {"department": str(world.vision.pk)}).status_code == 404
    assert client.get(f"{BASE}/export/", {"department": str(world.vision.pk)}).status_code == 404
    assert seqs(client.get(f"{BASE}/events/", {"department": str(world.speech.pk)})) == {events["speech"].seq}


def test_it_filters_by_time_actor_and_action(world: World, events: dict[str, AuditEvent]) -> None:
    client = world.client("auditor")
    since = events["speech"].occurred_at.isoformat()
    assert seqs(client.get(f"{BASE}/events/", {"start": since, "department": str(world.acme.pk)})) == {
        events["speech"].seq, events["vision"].seq}
    assert seqs(client.get(f"{BASE}/events/", {"end": since, "department": str(world.acme.pk)})) == {
        events["acme"].seq, events["nlp"].seq}
    assert seqs(client.get(f"{BASE}/events/", {"action": "node.updated", "department": str(world.nlp.pk)})) == {
        events["nlp"].seq, events["speech"].seq}
    assert seqs(client.get(f"{BASE}/events/", {"actor": "somebody-else"})) == set()


@pytest.mark.parametrize(
    ("query", "field"),
    [({"action": "no.such"}, "action"), ({"start": "yesterday"}, "start"), ({"department": "x"}, "department"),
     ({"start": "2026-02-01T00:00:00Z", "end": "2026-01-01T00:00:00Z"}, "end"), ({"output": "xml"}, "output")],
)
def test_bad_filters_get_a_400_naming_the_field(world: World, query: dict[str, str], field: str) -> None:
    response = world.client("auditor").get(f"{BASE}/export/", query)
    assert response.status_code == 400
    assert field in response.json()["error"]["fields"]


def test_the_list_shows_the_recorded_fields(world: World, events: dict[str, AuditEvent]) -> None:
    response = world.client("auditor").get(f"{BASE}/events/", {"department": str(world.vision.pk)})
    (item,) = response.json()["results"]
    assert item["details"] == {"where": "vision"} and item["hash"] == events["vision"].hash
    assert item["prev_hash"] == events["speech"].hash and item["department_seq"] == 1


def test_it_exports_json_lines_exactly_as_stored(world: World, events: dict[str, AuditEvent]) -> None:
    response = world.client("nlp_admin").get(f"{BASE}/export/", {"output": "jsonl"})
    assert response["Content-Type"] == "application/x-ndjson"
    assert "attachment" in response["Content-Disposition"]
    lines = streamed(response).splitlines()
    assert [json.loads(line)["seq"] for line in lines] == [events["nlp"].seq, events["speech"].seq]
    assert lines[0].decode() == events["nlp"].record


def test_it_exports_csv_with_defused_cells(world: World, events: dict[str, AuditEvent]) -> None:
    record(world.vision.pk, details={"formula": "=HYPERLINK(\"http://evil\")"})
    response = world.client("auditor").get(f"{BASE}/export/", {"output": "csv", "department": str(world.vision.pk)})
    assert response["Content-Type"].startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(streamed(response).decode())))
    assert [int(row["seq"]) for row in rows][0] == events["vision"].seq
    assert rows[0]["hash"] == events["vision"].hash and rows[0]["action"] == "node.updated"
    assert json.loads(rows[1]["details"]) == {"formula": "=HYPERLINK(\"http://evil\")"}  # JSON text, not a formula


def test_a_department_admins_bundle_verifies_and_is_complete_for_the_subtree(
    world: World, events: dict[str, AuditEvent], verifier_key: VerifierKey, django_capture_on_commit_callbacks: Any
) -> None:
    with django_capture_on_commit_callbacks(execute=True):
        response = world.client("nlp_admin").get(f"{BASE}/export/", {"output": "bundle"})
        lines = streamed(response).splitlines()
    report = BundleVerifier([verifier_key]).verify(lines)
    assert report.completeness.startswith("complete")
    assert set(report.scope.departments or ()) == {world.nlp.pk, world.speech.pk}
    assert report.events == 2  # nlp and speech; the export's own event names no department


def test_an_auditors_time_range_bundle_verifies(world: World, events: dict[str, AuditEvent], verifier_key: VerifierKey,
                                                django_capture_on_commit_callbacks: Any) -> None:
    with django_capture_on_commit_callbacks(execute=True):
        response = world.client("auditor").get(f"{BASE}/export/", {
            "output": "bundle", "start": events["nlp"].occurred_at.isoformat(),
            "end": events["none"].occurred_at.isoformat()})
        lines = streamed(response).splitlines()
    report = BundleVerifier([verifier_key]).verify(lines)
    assert report.events == 3 and report.completeness.startswith("complete")


def test_an_export_is_itself_audited(world: World, events: dict[str, AuditEvent]) -> None:
    streamed(world.client("nlp_admin").get(f"{BASE}/export/", {"output": "jsonl", "department": str(world.speech.pk)}))
    event = AuditEvent.objects.order_by("-seq").first()
    assert event is not None and event.action == "audit.exported" and event.actor_username == "nlp_admin"
    assert event.details["output"] == "jsonl" and event.details["scope"]["departments"] == [world.speech.pk]
    assert event.department_id == world.speech.pk


def test_checkpoints_are_published_on_demand_and_shown(world: World, events: dict[str, AuditEvent],
                                                       verifier_key: VerifierKey) -> None:
    assert world.client("nlp_admin").post(f"{BASE}/checkpoints/").status_code == 403
    published = world.client("auditor").post(f"{BASE}/checkpoints/")
    assert published.status_code == 201
    latest = world.client("nlp_admin").get(f"{BASE}/checkpoints/latest/").json()
    assert latest["number"] == published.json()["number"] and latest["note"].startswith("test.gpuportal/audit\n")
    keys = world.client("nlp_admin").get(f"{BASE}/keys/").json()["keys"]
    assert keys == [verifier_key.vkey()]


def test_a_bundle_is_refused_with_503_when_no_checkpoint_can_be_signed(world: World, events: dict[str, AuditEvent],
                                                                        settings: Any) -> None:
    settings.GPUPORTAL_AUDIT_SIGNING_KEY = None
    settings.DEBUG = False
    response = world.client("auditor").get(f"{BASE}/export/", {"output": "bundle"})
    assert response.status_code == 503
    assert response.json()["error"]["code"] == "audit_unavailable"
