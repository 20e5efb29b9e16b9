"""Reports arriving at once, on real PostgreSQL connections from real threads: first reports of
many nodes (inventory and audit writes) and several agents of one node (ordering) never fail,
deadlock or lose the newest report."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
from django.utils import timezone

from audit.models import AuditEvent
from telemetry.ingest.report import node_report_ingest
from telemetry.models import NodeReportState, ObservedGpu
from telemetry.node_tokens import node_token_issue
from tests.conftest import build_world, requires_postgres
from tests.telemetry.fixtures import add_node, make_report
from tests.threads import all_at_once

pytestmark = [requires_postgres(), pytest.mark.django_db(transaction=True)]


def ingest_all_at_once(jobs: list[tuple[Any, str, Any]]) -> Counter[str]:
    def ingest(token: Any, node_name: str, report: Any) -> Callable[[], str]:
        def job() -> str:
            return node_report_ingest(
                token=token, node_name=node_name, report=report, received_at=timezone.now()
            ).reason

        return job

    return all_at_once([ingest(*job) for job in jobs])


def test_first_reports_of_many_nodes_at_once() -> None:
    world = build_world()
    jobs = []
    for index in range(12):
        node = add_node(world.cluster, f"gpu-h200-{index:02d}", gpus=8, model="NVIDIA-H200", memory_mib=143771)
        token, _ = node_token_issue(actor=world.users["platform"], cluster_id=world.cluster.pk,
                                             node_name=node.name)  # fmt: skip
        jobs.append((token, node.name, make_report("h200-8gpu-node", node_name=node.name)))
    events_before = AuditEvent.objects.count()

    assert ingest_all_at_once(jobs) == Counter({"accepted": 12})
    assert ObservedGpu.objects.filter(is_present=True).count() == 96
    new_events = Counter(AuditEvent.objects.filter(seq__gt=events_before).values_list("action", flat=True))
    # inventory filled, GPUs appeared, and the recording's GPU 5 waits for a reset to enable MIG
    expected = {"node.updated": 12, "node.gpus_observed": 12, "node.mig_mismatch_flagged": 12}
    assert new_events == Counter(expected), new_events
    seqs = list(AuditEvent.objects.order_by("seq").values_list("seq", flat=True))
    assert seqs == list(range(1, len(seqs) + 1))


def test_reports_of_one_node_at_once_keep_the_newest() -> None:
    world = build_world()
    node = add_node(world.cluster, "gpu-h200-01", gpus=8, model="NVIDIA-H200", memory_mib=143771)
    token, _ = node_token_issue(actor=world.users["platform"], cluster_id=world.cluster.pk, node_name=node.name)
    node_report_ingest(
        token=token, node_name=node.name, report=make_report("h200-8gpu-node", node_name=node.name, sequence=1),  # type: ignore[arg-type]
        received_at=timezone.now(),
    )
    jobs = [(token, node.name, make_report("h200-8gpu-node", node_name=node.name, sequence=s)) for s in range(2, 12)]

    outcomes = ingest_all_at_once(jobs)

    assert outcomes["accepted"] >= 1 and outcomes["accepted"] + outcomes["out_of_order"] == 10, outcomes
    state = NodeReportState.objects.get(node=node)
    assert state.sequence == 11
    assert state.reports_accepted + state.reports_discarded == 11
