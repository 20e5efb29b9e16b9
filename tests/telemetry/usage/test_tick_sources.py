"""Which allocations a tick writes, where it reads when Prometheus is missing or failing, how many
queries it sends, that it can run again for the same bucket, and the retention."""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from clusters.models import Cluster
from telemetry.models import AllocationUsage, SampleTier
from telemetry.usage.prometheus import PrometheusClient
from telemetry.usage.ticking import allocation_usage_trim, allocations_utilisation_tick, bucket_of
from tests.conftest import World
from tests.telemetry.usage.recording import T0
from tests.telemetry.usage.scene import BUCKET, TICK_AT, Scene, book_everything, build_scene
from tests.telemetry.usage.test_tick import figures, rows


def counting(clients: list[PrometheusClient]) -> Any:
    def client_for(cluster: Cluster) -> PrometheusClient:
        client = PrometheusClient(cluster.prometheus_url, timeout=10)
        clients.append(client)
        return client

    return client_for


def test_the_tick_reads_the_bucket_that_ended_last() -> None:
    assert bucket_of(TICK_AT) == BUCKET
    assert bucket_of(BUCKET + datetime.timedelta(minutes=5)) == BUCKET
    assert bucket_of(
        BUCKET + datetime.timedelta(minutes=5) - datetime.timedelta(microseconds=1)
    ) == BUCKET - datetime.timedelta(minutes=5)


@pytest.mark.parametrize(("use_hami", "expected"), [(True, 6), (False, 3)])
def test_a_cluster_costs_three_queries_and_six_with_hami(world: World, prometheus_url: str, use_hami: bool,
                                                         expected: int) -> None:  # fmt: skip
    scene = build_scene(world, prometheus_url=prometheus_url, use_hami=use_hami)
    book_everything(scene)
    clients: list[PrometheusClient] = []
    outcome = allocations_utilisation_tick(now=TICK_AT, client_for=counting(clients))
    assert len(clients) == 1 and outcome.queries == expected == clients[0].queries
    assert "pre-4.9" in outcome.clusters["usage"] and "4.9+" in outcome.clusters["usage"]


def test_without_hami_a_vgpu_share_reads_the_devices_dcgm_series(world: World, prometheus_url: str) -> None:
    scene = build_scene(world, prometheus_url=prometheus_url, use_hami=False)
    book_everything(scene)
    allocations_utilisation_tick(now=TICK_AT)
    assert figures(rows(scene)["V_A"]) == ("dcgm", 1, 1.0, 0.35, 0)


def test_running_the_tick_again_writes_the_same_rows(scene: Scene) -> None:
    book_everything(scene)
    allocations_utilisation_tick(now=TICK_AT)
    first = {row.allocation_id: figures(row) for row in AllocationUsage.objects.all()}
    AllocationUsage.objects.filter(allocation=scene.grants["W1"]).update(activity=0.99, coverage=0.1)
    allocations_utilisation_tick(now=TICK_AT + datetime.timedelta(seconds=40))
    assert AllocationUsage.objects.count() == len(first)
    assert {row.allocation_id: figures(row) for row in AllocationUsage.objects.all()} == first


def test_a_cluster_without_prometheus_reads_the_node_agents(world: World) -> None:
    scene = build_scene(world, prometheus_url="")
    scene.grant("W1", world.llm, "a100", [("a100-0", 0, 1000, "", None)])
    scene.grant("W2", world.seg, "a100", [("a100-0", 1, 1000, "", None)])
    scene.grant("M_A", world.llm, "3g", [("a100-1", 0, 0, "3g.40gb", 4)])
    scene.grant("T_A", world.llm, "mps", [("h100-0", 0, 250, "", None)])
    scene.agent_sample("a100-0", 0, percent=42.0, memory=2e9)
    # no 5-minute mean yet for GPU 1: its raw samples of the bucket (4 of 10 expected at 30 s)
    for second, percent in ((10, 10.0), (40, 20.0), (70, 30.0), (100, None)):
        scene.agent_sample("a100-0", 1, percent=percent, samples=1, tier=SampleTier.RAW,
                           at=BUCKET + datetime.timedelta(seconds=second))  # fmt: skip
    scene.agent_sample("h100-0", 0, percent=80.0, memory=5e9)
    outcome = allocations_utilisation_tick(now=TICK_AT)
    assert outcome.queries == 0 and outcome.clusters == {"usage": "node agents only (no Prometheus)"}
    found = rows(scene)
    assert figures(found["W1"]) == ("agent", 1, 1.0, 0.42, 2000000000)
    assert figures(found["W2"]) == ("agent", 1, 0.3, None, None)  # 3 readings of 10: unknown
    # NVML has no per-instance utilisation: a MIG slice read from the agents is unknown
    assert figures(found["M_A"]) == ("agent", 0, 0.0, None, None)
    # a share of a GPU: the device's utilisation; its memory is the device's, not the share's
    assert figures(found["T_A"]) == ("agent", 1, 1.0, 0.8, None)


def test_an_unreachable_prometheus_is_unknown_never_idle(world: World) -> None:
    scene = build_scene(world, prometheus_url="http://127.0.0.1:9")  # the discard port: refused
    book_everything(scene)
    scene.agent_sample("a100-0", 0, percent=30.0)
    outcome = allocations_utilisation_tick(now=TICK_AT)
    assert outcome.queries == 1 and outcome.clusters["usage"].startswith("error: ")
    found = rows(scene)
    assert figures(found["W2"]) == ("dcgm", 0, 0.0, None, None)
    assert figures(found["W1"]) == ("agent", 1, 1.0, 0.3, None)  # the agent still answers


def test_only_allocations_holding_devices_during_the_bucket_get_a_row(scene: Scene) -> None:
    world = scene.world
    end = BUCKET + datetime.timedelta(minutes=5)
    scene.grant("held", world.llm, "a100", [("a100-0", 0, 1000, "", None)])
    scene.grant("released in it", world.llm, "a100", [("a100-0", 1, 1000, "", None)],
                released_at=BUCKET + datetime.timedelta(minutes=1))  # fmt: skip
    scene.grant("released before", world.llm, "a100", [("a100-0", 2, 1000, "", None)], released_at=BUCKET)
    scene.grant("booked after", world.llm, "a100", [("a100-0", 3, 1000, "", None)], booked_at=end)
    scene.grant("starts after", world.llm, "a100", [("a100-0", 4, 1000, "", None)], starts_at=end,
                ends_at=end + datetime.timedelta(days=1))  # fmt: skip
    scene.grant("ended before", world.llm, "a100", [("a100-0", 5, 1000, "", None)],
                starts_at=T0 - datetime.timedelta(days=2), ends_at=BUCKET)  # fmt: skip
    allocations_utilisation_tick(now=TICK_AT)
    written = {row.allocation_id for row in AllocationUsage.objects.all()}
    assert written == {scene.grants["held"].pk, scene.grants["released in it"].pk}


def test_rows_older_than_the_retention_are_deleted(scene: Scene, settings: Any) -> None:
    settings.GPUPORTAL_UTILISATION_RETENTION_DAYS = 1
    book_everything(scene)
    allocations_utilisation_tick(now=TICK_AT)
    count = AllocationUsage.objects.count()
    assert allocation_usage_trim(now=BUCKET + datetime.timedelta(days=1)) == 0
    assert allocation_usage_trim(now=BUCKET + datetime.timedelta(days=1, seconds=1)) == count
    assert not AllocationUsage.objects.exists()


@pytest.mark.parametrize("window", [299, 300])
def test_the_tick_reads_nothing_before_a_bucket_has_ended(scene: Scene, window: int) -> None:
    """The first tick after an allocation begins writes nothing for the bucket still running."""
    begins = BUCKET + datetime.timedelta(minutes=5)
    scene.grant("new", scene.world.llm, "a100", [("a100-0", 0, 1000, "", None)], starts_at=begins,
                ends_at=begins + datetime.timedelta(days=1), booked_at=begins)  # fmt: skip
    outcome = allocations_utilisation_tick(now=begins + datetime.timedelta(seconds=window))
    assert outcome.rows == (1 if window == 300 else 0)
