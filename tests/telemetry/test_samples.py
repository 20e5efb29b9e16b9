"""Utilisation samples: one raw sample per GPU per report, 5-minute and hourly means, retention."""

from __future__ import annotations

import datetime
from collections.abc import Callable
from typing import Any

import pytest
from django.test import override_settings
from django.utils import timezone

from clusters.models import Node
from telemetry.ingest.report import node_report_ingest
from telemetry.models import GpuSample, NodeToken, ObservedGpu, SampleTier
from telemetry.samples import gpu_samples_roll_up, gpu_samples_trim
from tests.conftest import World
from tests.telemetry.fixtures import add_node, make_report

IssueToken = Callable[..., tuple[NodeToken, str]]
UTC = datetime.UTC
DAY = datetime.datetime(2026, 11, 30, tzinfo=UTC)


def at(hour: int, minute: int, second: int = 0, day: datetime.datetime = DAY) -> datetime.datetime:
    return day.replace(hour=hour, minute=minute, second=second)


@pytest.fixture
def gpu(world: World, issue_token: IssueToken) -> ObservedGpu:
    node: Node = add_node(world.cluster, "gpu-h100-01", model="NVIDIA-H100-80GB-HBM3", memory_mib=81559)
    token, _ = issue_token(node.name)
    report: Any = make_report("h100-80gb-no-mig", node_name=node.name)
    node_report_ingest(token=token, node_name=node.name, report=report, received_at=timezone.now())
    GpuSample.objects.all().delete()
    return ObservedGpu.objects.get(node=node)


def raw(gpu: ObservedGpu, moment: datetime.datetime, percent: float | None, memory: float = 1000.0) -> None:
    GpuSample.objects.create(gpu=gpu, tier=SampleTier.RAW, at=moment, gpu_percent=percent, memory_used_bytes=memory)


def tier(gpu: ObservedGpu, which: SampleTier) -> list[tuple[datetime.datetime, int, float | None, float | None]]:
    rows = GpuSample.objects.filter(gpu=gpu, tier=which).order_by("at")
    return [(row.at, row.samples, row.gpu_percent, row.memory_used_bytes) for row in rows]


def test_a_report_stores_one_raw_sample_per_gpu(world: World, issue_token: IssueToken) -> None:
    node = add_node(world.cluster, "gpu-h200-01", gpus=8, model="NVIDIA-H200", memory_mib=143771)
    token, _ = issue_token(node.name)
    report: Any = make_report("h200-8gpu-node", node_name=node.name)
    node_report_ingest(token=token, node_name=node.name, report=report, received_at=timezone.now())
    samples = GpuSample.objects.filter(tier=SampleTier.RAW, gpu__node=node).select_related("gpu")
    assert samples.count() == 8
    by_index = {sample.gpu.index: sample for sample in samples}
    assert by_index[0].gpu_percent == report["gpus"][0]["utilization"]["gpu_percent"]
    assert by_index[0].memory_used_bytes == report["gpus"][0]["memory_used_bytes"]
    assert by_index[0].at == datetime.datetime.fromisoformat(report["collected_at"])


def test_the_tiers_hold_the_mean_of_their_bucket(gpu: ObservedGpu) -> None:
    raw(gpu, at(10, 0, 0), 10, memory=100)
    raw(gpu, at(10, 1, 30), 20, memory=200)
    raw(gpu, at(10, 4, 59), None, memory=300)  # a sample without utilisation (a MIG GPU) still counts memory
    raw(gpu, at(10, 5, 0), 60, memory=400)
    raw(gpu, at(9, 59, 59), 99, memory=0)

    written = gpu_samples_roll_up(now=at(10, 12))
    assert written == {"5m": 3, "1h": 1}
    assert tier(gpu, SampleTier.FIVE_MINUTES) == [
        (at(9, 55), 1, 99.0, 0.0),
        (at(10, 0), 3, 15.0, 200.0),
        (at(10, 5), 1, 60.0, 400.0),
    ]
    assert tier(gpu, SampleTier.HOUR) == [(at(9, 0), 1, 99.0, 0.0)]  # the 10:00 hour has not ended

    gpu_samples_roll_up(now=at(11, 1))
    assert tier(gpu, SampleTier.HOUR) == [(at(9, 0), 1, 99.0, 0.0), (at(10, 0), 4, 30.0, 250.0)]


def test_rolling_up_again_is_idempotent_and_takes_late_samples(gpu: ObservedGpu) -> None:
    raw(gpu, at(10, 1), 10)
    gpu_samples_roll_up(now=at(10, 12))
    gpu_samples_roll_up(now=at(10, 12))
    assert tier(gpu, SampleTier.FIVE_MINUTES) == [(at(10, 0), 1, 10.0, 1000.0)]
    raw(gpu, at(10, 3), 30)  # delivered late, after its bucket was computed
    gpu_samples_roll_up(now=at(10, 16))
    assert tier(gpu, SampleTier.FIVE_MINUTES) == [(at(10, 0), 2, 20.0, 1000.0)]


def test_samples_are_trimmed_by_tier_retention(gpu: ObservedGpu) -> None:
    start = at(0, 0)
    for hour in range(0, 48, 6):
        raw(gpu, start + datetime.timedelta(hours=hour), hour)
    gpu_samples_roll_up(now=start + datetime.timedelta(hours=47))
    five = GpuSample.objects.filter(tier=SampleTier.FIVE_MINUTES).count()
    hours = GpuSample.objects.filter(tier=SampleTier.HOUR).count()
    assert five > 0 and hours > 0

    deleted = gpu_samples_trim(now=start + datetime.timedelta(hours=47))
    assert deleted["raw"] == 4  # older than 24 h: 00:00, 06:00, 12:00 and 18:00 of the first day
    assert deleted["5m"] == 0 and deleted["1h"] == 0
    assert GpuSample.objects.filter(tier=SampleTier.RAW).count() == 4

    # the tiers were computed from the raw samples still within retention: those of the second day
    deleted = gpu_samples_trim(now=start + datetime.timedelta(days=31))
    assert deleted["5m"] == 0 and GpuSample.objects.filter(tier=SampleTier.FIVE_MINUTES).count() == five
    deleted = gpu_samples_trim(now=start + datetime.timedelta(days=32))
    assert deleted["5m"] == five and deleted["1h"] == 0
    assert gpu_samples_trim(now=start + datetime.timedelta(days=366))["1h"] == 0
    assert gpu_samples_trim(now=start + datetime.timedelta(days=367))["1h"] == hours


def test_raw_samples_are_kept_until_the_tiers_have_them(gpu: ObservedGpu) -> None:
    raw(gpu, at(0, 1), 5)
    gpu_samples_roll_up(now=at(0, 2))  # neither bucket has ended: the marks stay at midnight
    gpu_samples_trim(now=at(0, 2) + datetime.timedelta(days=2))
    assert GpuSample.objects.filter(tier=SampleTier.RAW).count() == 1


@override_settings(GPUPORTAL_TELEMETRY_RAW_RETENTION_HOURS=1, GPUPORTAL_TELEMETRY_5M_RETENTION_DAYS=1)
def test_retention_comes_from_settings(gpu: ObservedGpu) -> None:
    raw(gpu, at(8, 40), 5)
    gpu_samples_roll_up(now=at(9, 30))
    assert gpu_samples_trim(now=at(9, 30))["raw"] == 0
    assert gpu_samples_trim(now=at(9, 50))["raw"] == 1
    assert gpu_samples_trim(now=at(8, 39) + datetime.timedelta(days=1))["5m"] == 0
    assert gpu_samples_trim(now=at(8, 41) + datetime.timedelta(days=1))["5m"] == 1


def test_the_samples_endpoint_serves_each_tier(world: World, gpu: ObservedGpu) -> None:
    raw(gpu, at(10, 1), 10)
    raw(gpu, at(10, 2), 30)
    gpu_samples_roll_up(now=at(11, 0))
    client = world.client("nlp_member")
    window = {"since": "2026-11-30T00:00:00Z", "until": "2026-12-01T00:00:00Z"}
    url = f"/api/v1/telemetry/gpus/{gpu.pk}/samples/"
    assert [row["gpu_percent"] for row in client.get(url, {**window, "tier": "raw"}).json()["results"]] == [10, 30]
    five = client.get(url, {**window, "tier": "5m"}).json()["results"]
    assert five == [{"at": "2026-11-30T10:00:00Z", "samples": 2, "gpu_percent": 20.0, "memory_percent": None,
                     "memory_used_bytes": 1000.0, "temperature_celsius": None, "power_milliwatts": None}]  # fmt: skip
    assert client.get(url, {**window, "tier": "1h"}).json()["results"][0]["samples"] == 2
    bad = client.get(url, {"tier": "1d"})
    assert bad.status_code == 400 and "tier" in bad.json()["error"]["fields"]
    backwards = client.get(url, {"since": "2026-12-01T00:00:00Z", "until": "2026-11-30T00:00:00Z"})
    assert backwards.status_code == 400 and "since" in backwards.json()["error"]["fields"]
