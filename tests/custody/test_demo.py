"""make run's demo answers custody questions: its grants' pods on their GPUs, an agent restart and
an unreadable kubelet as gaps, a debugging pod on an ungranted GPU; seeding again adds nothing."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from rest_framework.test import APIClient

from audit.models import AuditEvent
from custody.models import CustodyEvent


@pytest.mark.django_db
def test_the_demo_seeds_custody_once_and_the_auditor_reads_it() -> None:
    call_command("seed_demo")
    rows = CustodyEvent.objects.count()
    causes = set(CustodyEvent.objects.filter(kind="gap").values_list("gap_cause", flat=True))
    assert causes == {"agent_restart", "pod_resources_error"}
    granted = CustodyEvent.objects.filter(kind="closed", attribution="granted").first()
    assert granted is not None and granted.allocation_id is not None
    # a whole GPU is held exclusively, also on a node whose other GPUs are partitioned; a MIG device by its own UUID
    held = CustodyEvent.objects.filter(kind="opened").values_list("sharing", "device_id", "gpu_uuid")
    assert held and all((sharing == "exclusive") == (device == gpu) for sharing, device, gpu in held if sharing != "hami")
    assert all(device.startswith("MIG-") for sharing, device, _ in held if sharing == "mig")
    raised = [event.after["alarm"] for event in AuditEvent.objects.filter(action="custody.alarm_raised")]
    assert "ungranted" in raised

    client = APIClient()
    client.force_authenticate(User.objects.get(username="carol"))  # the demo's auditor
    answer = client.get("/api/v1/custody/", {"device": granted.gpu_uuid}).json()
    assert any(row["allocation_id"] == granted.allocation_id for row in answer["results"])
    debug = client.get("/api/v1/custody/", {"pod": "nlp-llm/debug-shell"}).json()["results"]
    assert [(row["attribution"], row["allocation_id"]) for row in debug] == [("ungranted", None)]

    call_command("seed_demo")
    assert CustodyEvent.objects.count() == rows
