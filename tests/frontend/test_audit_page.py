"""The auditor's page: filtered events, export downloads, checkpoints and verification."""

from __future__ import annotations

import csv
import io
import re
from pathlib import Path
from typing import Any

import pytest
from django.db import transaction
from django.http import StreamingHttpResponse

from audit import actions
from audit.actions import all_actions
from audit.integrity.errors import VerificationFailure
from audit.integrity.keys import signing_key_generate
from audit.models import AuditEvent
from audit.services import audit_record
from audit.verification import LiveReport
from tests.conftest import World
from tests.frontend.conftest import Login, pending

pytestmark = pytest.mark.django_db


@pytest.fixture
def audit_keys(settings: Any, tmp_path: Path) -> None:
    settings.GPUPORTAL_AUDIT_ORIGIN = "test.gpuportal/portal"
    settings.GPUPORTAL_AUDIT_SIGNING_KEY = signing_key_generate("test.gpuportal/portal").private_pem()
    settings.GPUPORTAL_AUDIT_CHECKPOINT_DIR = str(tmp_path / "checkpoints")


def body(response: Any) -> str:
    assert isinstance(response, StreamingHttpResponse)
    return b"".join(response.streaming_content).decode()  # type: ignore[arg-type]


def test_it_lists_and_filters_events(world: World, login: Login) -> None:
    allocation = pending(world)
    pending(world, persona="vision_member", project="seg", flavor="h100")
    client = login("auditor")
    html = client.get("/audit/", {"action": "allocation.requested"}).content.decode()
    assert f"allocations.allocation {allocation.pk}" in html
    assert '<td data-label="Department">nlp</td>' in html and '<td data-label="Department">vision</td>' in html
    assert "node.updated" not in html.split("<tbody>", 1)[1]


def test_it_shows_a_department_admin_only_their_departments(world: World, login: Login) -> None:
    pending(world)
    pending(world, persona="vision_member", project="seg", flavor="h100")
    html = login("nlp_admin").get("/audit/").content.decode()
    table = html.split("<tbody>", 1)[1]
    assert '<td data-label="Department">nlp</td>' in table and '<td data-label="Department">vision</td>' not in table
    assert login("nlp_admin").get("/audit/", {"department": world.vision.pk}).status_code == 400


def test_it_refuses_the_audit_pages_to_researchers(world: World, login: Login) -> None:
    client = login("nlp_member")
    assert client.get("/audit/").status_code == 403
    assert client.get("/audit/export/").status_code == 403
    assert client.post("/audit/verify/").status_code == 403


def test_it_rejects_bad_filters_in_place(world: World, login: Login) -> None:
    response = login("auditor").get("/audit/", {"start": "2030-01-02T00:00", "end": "2030-01-01T00:00"})
    assert response.status_code == 400
    assert "The end must be after the start." in response.content.decode()


def test_it_exports_the_filtered_events_as_csv_and_records_the_export(world: World, login: Login) -> None:
    allocation = pending(world)
    client = login("auditor")
    html = client.get("/audit/", {"action": "allocation.requested", "outcome": "success"}).content.decode()
    assert 'href="/audit/export/?action=allocation.requested&amp;output=csv"' in html
    response = client.get("/audit/export/", {"action": "allocation.requested", "output": "csv"})
    assert response.status_code == 200
    assert response["Content-Disposition"].startswith('attachment; filename="audit-')
    rows = list(csv.DictReader(io.StringIO(body(response))))
    assert [row["target_id"] for row in rows if row["action"] == "allocation.requested"][-1] == str(allocation.pk)
    assert {row["action"] for row in rows} == {"allocation.requested"}
    exported = AuditEvent.objects.filter(action="audit.exported").order_by("-pk").first()
    assert exported is not None and exported.actor_username == "auditor" and exported.details["via"] == "portal"


def test_it_exports_json_lines(world: World, login: Login) -> None:
    pending(world)
    response = login("auditor").get("/audit/export/", {"output": "jsonl", "actor": "nlp_member"})
    lines = body(response).splitlines()
    assert lines and all('"actor_username":"nlp_member"' in line for line in lines)


def test_it_shows_the_outcome_of_a_verification(world: World, login: Login, monkeypatch: Any) -> None:
    client = login("auditor")
    monkeypatch.setattr("frontend.views.audit.audit_log_verify", lambda: LiveReport(events=7, checkpoints=2))
    html = client.post("/audit/verify/", follow=True).content.decode()
    assert "Verification passed: OK: 7 events, 2 checkpoints" in html and "✓ Passed" in html
    monkeypatch.setattr("frontend.views.audit.audit_log_verify", lambda: LiveReport(events=1, checkpoints=1))
    html = client.post("/audit/verify/", follow=True).content.decode()
    assert "Verification passed: OK: 1 event, 1 checkpoint in the database" in html  # never "1 checkpoints"

    def broken() -> LiveReport:
        raise VerificationFailure("altered", "the stored hash does not match", seq=3)

    monkeypatch.setattr("frontend.views.audit.audit_log_verify", broken)
    html = client.post("/audit/verify/", follow=True).content.decode()
    assert "Verification FAILED: altered at seq 3" in html and "✗ FAILED" in html
    assert login("nlp_admin").post("/audit/verify/").status_code == 403


def test_it_publishes_a_checkpoint_on_demand(world: World, login: Login, audit_keys: None) -> None:
    pending(world)
    html = login("auditor").post("/audit/checkpoint/", follow=True).content.decode()
    assert "Checkpoint #" in html and "signed over" in html
    assert "Latest checkpoint" in html and "Root hash" in html
    assert AuditEvent.objects.filter(action="audit.checkpoint_requested", actor_username="auditor").exists()
    assert login("nlp_admin").post("/audit/checkpoint/").status_code == 403


def test_it_explains_when_no_checkpoint_can_be_signed(world: World, login: Login, settings: Any,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("GPUPORTAL_AUDIT_SIGNING_KEY", "GPUPORTAL_AUDIT_SIGNING_KEY_FILE"):
        monkeypatch.delenv(name, raising=False)
    settings.GPUPORTAL_AUDIT_SIGNING_KEY = None
    settings.DEBUG = False
    client = login("auditor")
    html = client.post("/audit/checkpoint/", follow=True).content.decode()
    assert "No checkpoint published" in html and "GPUPORTAL_AUDIT_SIGNING_KEY" in html
    response = client.get("/audit/export/", {"output": "bundle"}, follow=True)
    assert response.status_code == 200 and "No bundle: a checkpoint cannot be signed" in response.content.decode()


def test_it_verifies_an_uploaded_bundle_with_two_answers(
    world: World, login: Login, audit_keys: None, django_capture_on_commit_callbacks: Any
) -> None:
    """An old genuine bundle is genuine and, separately, not complete as of now; a tampered one is
    not genuine; the current one is both."""
    from django.core.files.uploadedfile import SimpleUploadedFile

    from audit.checkpoints import checkpoint_publish
    from audit.export import audit_export_bundle
    from audit.selectors import AuditFilters

    def bundle(checkpoint: Any) -> bytes:
        return b"".join(audit_export_bundle(filters=AuditFilters(), checkpoint=checkpoint))

    def verify(data: bytes, persona: str = "auditor") -> Any:
        upload = SimpleUploadedFile("audit-bundle.jsonl", data, content_type="application/x-ndjson")
        return login(persona).post("/audit/verify/bundle/", {"bundle": upload})

    pending(world)
    with django_capture_on_commit_callbacks(execute=True):
        first = checkpoint_publish()
    old = bundle(first)
    pending(world, persona="vision_member", project="seg", flavor="h100")
    with django_capture_on_commit_callbacks(execute=True):
        latest = checkpoint_publish()

    html = verify(old, persona="nlp_admin").content.decode()  # anyone who reads the log may check a bundle
    assert "✓ Yes: every event it holds is in the signed log" in html
    assert "✗ NO: newer events exist" in html and "<dd>3</dd>" in html
    assert f"AS OF NOW: NOT complete: the folder&#x27;s latest checkpoint #{latest.number} " in html
    assert "the consistency proof from" in html and "FAILED" not in html

    html = verify(bundle(latest)).content.decode()
    assert "✓ Yes: nothing was recorded after its checkpoint" in html and "<dd>0</dd>" in html

    lines = old.splitlines()
    lines[-2] = lines[-2].replace(b'"outcome":"', b'"outcome":"x', 1)  # the last event, edited
    html = verify(b"\n".join(lines) + b"\n").content.decode()
    assert "✗ NO: the bundle does not verify" in html and "FAILED seq" in html and "<dd>1</dd>" in html

    assert login("nlp_member").post("/audit/verify/bundle/").status_code == 403
    response = login("auditor").post("/audit/verify/bundle/", follow=True)
    assert "Choose an export bundle" in response.content.decode()


def test_the_action_filter_groups_the_actions_by_family_with_readable_labels(world: World, login: Login) -> None:
    html = login("auditor").get("/audit/").content.decode()
    select = re.search(r'<select name="action".*?</select>', html, re.S)
    assert select is not None
    groups = re.findall(r'<optgroup label="([^"]+)">(.*?)</optgroup>', select.group(0), re.S)
    labels = [label for label, _options in groups]
    assert labels == sorted(labels) and len(labels) >= 10
    assert "Allocation" in labels and "Sign-in and permissions" in labels and "Quota window" in labels
    allocation = dict(groups)["Allocation"]
    assert '<option value="allocation.requested">An allocation was requested (allocation.requested)</option>' in allocation
    assert "quota_window." not in allocation  # each action in its own family only
    assert sum(len(re.findall("<option ", options)) for _label, options in groups) == len(all_actions())
    # the filter still reads the code
    assert login("auditor").get("/audit/", {"action": "allocation.requested"}).status_code == 200


def event_of(action: str, **lookups: Any) -> AuditEvent:
    event = AuditEvent.objects.filter(action=action, **lookups).order_by("-seq").first()
    assert event is not None
    return event


def test_each_row_opens_the_event_for_exactly_those_who_list_it(world: World, login: Login) -> None:
    allocation = pending(world)
    requested = event_of("allocation.requested", target_id=str(allocation.pk))
    with transaction.atomic():
        unscoped = audit_record(actor=world.users["platform"], action=actions.CLUSTER_UPDATED, target=world.cluster,
                                after={"name": world.cluster.name})
    listed = login("auditor").get("/audit/").content.decode()
    assert f'<a href="/audit/events/{requested.seq}/" aria-label="Open event {requested.seq}">' in listed
    expected = {"nlp_member": 404, "nlp_admin": 200, "speech_member": 404, "vision_member": 404,
                "vision_admin": 404, "auditor": 200, "platform": 200, "nobody": 404}
    for seq, answers in ((requested.seq, expected), (unscoped.seq, {**expected, "nlp_admin": 404})):
        got = {persona: login(persona).get(f"/audit/events/{seq}/").status_code for persona in expected}
        assert got == answers, seq
    anonymous = login(None).get(f"/audit/events/{requested.seq}/")
    assert anonymous.status_code == 302 and anonymous["Location"].startswith("/login/")
    assert login("auditor").get("/audit/events/999999/").status_code == 404

    html = login("nlp_admin").get(f"/audit/events/{requested.seq}/").content.decode()
    assert "An allocation was requested" in html and "<code>allocation.requested</code>" in html
    assert requested.hash in html and requested.prev_hash in html
    assert f"event {requested.seq} of the whole log" in html
    assert "not covered by a checkpoint yet" in html
    assert 'id="event-details"' in html and "portal tests" in html  # the recorded justification
    # the neighbours offered are the reader's own: never the unscoped event next to it
    assert f'/audit/events/{unscoped.seq}/' not in html


def test_a_target_links_to_its_page_only_for_those_who_may_open_it(world: World, login: Login) -> None:
    allocation = pending(world)
    vision = pending(world, persona="vision_member", project="seg", flavor="h100")
    with transaction.atomic():
        cluster = audit_record(actor=world.users["platform"], action=actions.CLUSTER_UPDATED, target=world.cluster)
        department = audit_record(actor=world.users["platform"], action=actions.DEPARTMENT_UPDATED, target=world.nlp,
                                  department_id=world.nlp.pk)
    mine = f'<a href="/allocations/{allocation.pk}/">allocations.allocation {allocation.pk}</a>'
    theirs = f'<a href="/allocations/{vision.pk}/">'
    cluster_link = f'<a href="/platform/clusters/{world.cluster.pk}/">clusters.cluster {world.cluster.pk}</a>'
    department_link = f'<a href="/departments/{world.nlp.pk}/">tenants.department {world.nlp.pk}</a>'

    auditor = login("auditor").get("/audit/").content.decode()
    assert mine in auditor and theirs in auditor  # the root's auditor reads every allocation
    assert cluster_link not in auditor and f"clusters.cluster {world.cluster.pk}</td>" in auditor  # platform admins' page
    assert department_link not in auditor and f"tenants.department {world.nlp.pk}</td>" in auditor  # its admins' page

    platform = login("platform").get("/audit/").content.decode()
    assert mine in platform and cluster_link in platform and department_link in platform

    admin = login("nlp_admin").get("/audit/").content.decode()
    assert mine in admin and department_link in admin and theirs not in admin

    detail = login("auditor").get(f"/audit/events/{cluster.seq}/").content.decode()
    assert f'<dd id="event-target">clusters.cluster {world.cluster.pk}</dd>' in detail
    detail = login("platform").get(f"/audit/events/{department.seq}/").content.decode()
    assert f'<dd id="event-target">{department_link}</dd>' in detail
