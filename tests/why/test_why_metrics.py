"""/metrics counts the waiting requests by the primary reason the periodic refresh read: the same
reason why answers, every code given (0 included), the unread apart; a refresh reads at most its
share, the stalest first."""

from __future__ import annotations

import pytest
from django.test import Client

from allocations.admission.reasons import ReasonCode
from allocations.admission.why_refresh import waiting_reasons_refresh
from allocations.models import Allocation
from tests.conftest import World
from tests.observability.test_metrics import scrape, value
from tests.why.test_reasons import _vision_holds_ten, ask, why

pytestmark = pytest.mark.django_db


def test_pending_requests_are_counted_by_the_reason_why_gives(world: World) -> None:
    _vision_holds_ten(world)  # two grants approved: on their way to the cluster (provisioning reason)
    over = ask(world, flavor=world.a100, quantity=7)
    fits = ask(world, flavor=world.a100, quantity=1)
    client = Client(REMOTE_ADDR="127.0.0.1")
    before = scrape(client)
    assert value(before, "gpuportal_pending_requests", reason="unread") == 4
    assert value(before, "gpuportal_pending_requests", reason="quota") == 0
    assert waiting_reasons_refresh(most=3) == 3  # the stalest (never read) first, oldest first
    assert waiting_reasons_refresh() == 4
    samples = scrape(client)
    assert {labels["reason"] for _, labels, _ in samples["gpuportal_pending_requests"]} == {
        *(code.value for code in ReasonCode), "unread"}
    assert value(samples, "gpuportal_pending_requests", reason="quota") == 1
    assert value(samples, "gpuportal_pending_requests", reason="awaiting-decision") == 1
    assert value(samples, "gpuportal_pending_requests", reason="provisioning") == 2
    assert value(samples, "gpuportal_pending_requests", reason="unread") == 0
    kept = dict(Allocation.objects.filter(pk__in=[over.pk, fits.pk]).values_list("pk", "waiting_reason"))
    assert kept == {over.pk: why(world, over).primary.code.value, fits.pk: why(world, fits).primary.code.value}
