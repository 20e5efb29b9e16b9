"""make run's demo: alice's pending request over acme's limit (the parent's, not nlp's) says so with
acme's numbers, offers what would start now and an estimated start."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from rest_framework.test import APIClient

from allocations.models import Allocation

pytestmark = pytest.mark.django_db


def test_alices_request_over_acmes_limit_is_explained_with_acmes_numbers() -> None:
    call_command("seed_demo")
    request = Allocation.objects.get(state="pending", project__slug="nlp-speech")
    client = APIClient()
    client.force_authenticate(User.objects.get(username="alice"))
    answer = client.get(f"/api/v1/allocations/{request.pk}/why/").json()
    facts = answer["reason"]["facts"]
    assert (answer["reason"]["code"], facts["department"], facts["limit"], facts["requested"]) == (
        "quota", "acme", "16", "5")
    assert [line["fits"] for line in answer["quota"] if line["department"] == "nlp"] == [True, True]
    kinds = [offer["kind"] for offer in answer["alternatives"]]
    assert "fewer-units" in kinds and "later-start" in kinds
    assert answer["estimate"]["starts_at"] is not None
    assert answer["queue"] == {"position": 2, "of": 2, "ahead": 1}  # after alice's other request
