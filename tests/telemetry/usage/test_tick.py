"""The tick against a real Prometheus loaded with recorded dcgm-exporter and HAMi output: exact
figures per allocation for whole GPUs, MIG, time-slicing, HAMi and both exporter generations."""

from __future__ import annotations

from typing import Any

import pytest

from telemetry.models import AllocationUsage
from telemetry.usage.ticking import allocations_utilisation_tick
from tests.telemetry.usage.scene import BUCKET, GIB, MIB, TICK_AT, Scene, book_everything


def rows(scene: Scene) -> dict[str, AllocationUsage]:
    names = {allocation.pk: name for name, allocation in scene.grants.items()}
    found = {names[row.allocation_id]: row for row in AllocationUsage.objects.filter(bucket_start=BUCKET)}
    assert set(found) == set(scene.grants), "one row per allocation holding devices in the bucket"
    return found


def figures(row: AllocationUsage) -> tuple[str, int, float, float | None, int | None]:
    return row.source, row.devices, row.coverage, row.activity, row.memory_used_bytes


@pytest.fixture
def ticked(scene: Scene) -> dict[str, AllocationUsage]:
    book_everything(scene)
    scene.agent_sample("a100-0", 5, percent=55.0, memory=1e9)
    outcome = allocations_utilisation_tick(now=TICK_AT)
    assert outcome.bucket_start == BUCKET
    assert outcome.rows == len(scene.grants)
    return rows(scene)


def test_whole_gpus_read_the_most_trusted_series_of_each_device(ticked: dict[str, AllocationUsage]) -> None:
    # SM activity (0.5/0.7 alternating: 0.6) wins over graphics engine (0.8) and GPU utilisation (100 %)
    assert figures(ticked["W1"]) == ("dcgm", 1, 1.0, 0.6, 32000 * MIB)
    # no pod on the GPU: known idle, not unknown
    assert figures(ticked["W2"]) == ("dcgm", 1, 1.0, 0.0, 0)
    # two GPUs: the mean of their activities, the sum of their memory
    assert figures(ticked["W4"]) == ("dcgm", 2, 1.0, 0.4, 6000 * MIB)
    assert ticked["W4"].granted_gpu_eq == 2.0 and ticked["W4"].used_gpu_eq == pytest.approx(0.8)
    assert ticked["W1"].memory_granted_bytes == 81920 * MIB


def test_a_device_with_gaps_is_unknown_not_idle(ticked: dict[str, AllocationUsage]) -> None:
    # 8 of the bucket's 20 scrapes: coverage 0.4 < 0.8, so the activity is unknown (not 0)
    row = ticked["W3"]
    assert figures(row) == ("dcgm", 1, 0.4, None, 1000 * MIB)
    assert row.used_gpu_eq is None and row.granted_gpu_eq == 1.0


def test_the_minimum_coverage_is_a_setting(scene: Scene, settings: Any) -> None:
    settings.GPUPORTAL_UTILISATION_MIN_COVERAGE = 0.4
    book_everything(scene)
    allocations_utilisation_tick(now=TICK_AT)
    assert figures(rows(scene)["W3"]) == ("dcgm", 1, 0.4, 0.5, 1000 * MIB)


def test_mig_instances_are_told_apart_by_the_pods_on_them(ticked: dict[str, AllocationUsage]) -> None:
    # GPU instance 1 (slice 4) runs nlp-llm's pod, instance 2 (slice 0) vision-seg's: the order of
    # the instance ids is not the order of the slices, the pods decide. SM activity 1.2 is clamped.
    assert figures(ticked["M_A"]) == ("dcgm", 1, 1.0, 1.0, 20000 * MIB)
    assert figures(ticked["M_B"]) == ("dcgm", 1, 1.0, 0.25, 5000 * MIB)
    assert ticked["M_A"].used_gpu_eq == pytest.approx(0.4286)


def test_an_instance_without_a_pod_goes_to_the_one_allocation_still_waiting_for_it(
    ticked: dict[str, AllocationUsage],
) -> None:
    # M_C booked two 1g slices: one runs its pod (0.5), the other no pod (0.0, instance 10)
    assert figures(ticked["M_C"]) == ("dcgm", 2, 1.0, 0.25, 3000 * MIB)
    assert figures(ticked["M_D"]) == ("dcgm", 1, 1.0, 0.3, 2500 * MIB)


def test_instances_no_pod_tells_apart_stay_unknown_unless_they_read_the_same(
    ticked: dict[str, AllocationUsage],
) -> None:
    # two allocations, two podless instances reading differently (0.0 and 0.4): either pairing
    # could be wrong, so both stay unknown (and NVML has no per-instance reading to fall back on)
    assert figures(ticked["M_E"]) == ("dcgm", 0, 0.0, None, None)
    assert figures(ticked["M_F"]) == ("dcgm", 0, 0.0, None, None)
    # two podless instances reading the same: any pairing gives the same figures
    assert figures(ticked["M_G"]) == ("dcgm", 1, 1.0, 0.0, 0)
    assert figures(ticked["M_H"]) == ("dcgm", 1, 1.0, 0.0, 0)


def test_duplicated_prof_series_of_a_shared_gpu_are_never_summed(ticked: dict[str, AllocationUsage]) -> None:
    # the device's graphics engine activity 0.7 is repeated on both pods' copies: each sharer sees
    # 0.7 (a sum would be 2.1), and memory is each namespace's own pods' (true per-pod values)
    assert figures(ticked["T_A"]) == ("dcgm", 1, 1.0, 0.7, 10000 * MIB)
    assert figures(ticked["T_B"]) == ("dcgm", 1, 1.0, 0.7, 6000 * MIB)
    assert figures(ticked["T_C"]) == ("dcgm", 1, 1.0, 0.7, 0)
    assert ticked["T_A"].granted_gpu_eq == 0.25 and ticked["T_A"].used_gpu_eq == pytest.approx(0.175)
    assert ticked["T_A"].memory_granted_bytes == 20480 * MIB


def test_hami_containers_are_attributed_by_device_uuid_and_namespace(ticked: dict[str, AllocationUsage]) -> None:
    # two containers at 20 % and 10 % of the GPU on a half-GPU share: 0.3 / 0.5 = 0.6 of the share;
    # memory: the worker's peak 4 GiB plus the sidecar's 2 GiB
    assert figures(ticked["V_A"]) == ("hami", 1, 1.0, 0.6, 6 * GIB)
    assert ticked["V_A"].used_gpu_eq == pytest.approx(0.3)
    # no container of vision-seg: the device's dcgm-exporter series, as for any shared GPU
    assert figures(ticked["V_B"]) == ("dcgm", 1, 1.0, 0.35, 0)


def test_the_exporter_4_9_names_are_read_and_win_over_the_older_generation(ticked: dict[str, AllocationUsage]) -> None:
    # ratio and bytes: graphics engine 0.45 (GPU_UTIL_RATIO 0.9 is less trusted), 8 GiB as bytes
    assert figures(ticked["N_A"]) == ("dcgm", 1, 1.0, 0.45, 8 * GIB)
    # a device both generations answered for (an upgrade under way): the newer one's figures
    assert figures(ticked["N_B"]) == ("dcgm", 1, 1.0, 0.3, 2 * GIB)


def test_a_gpu_the_exporter_does_not_cover_is_read_from_the_node_agent(ticked: dict[str, AllocationUsage]) -> None:
    # 10 five-minute samples of 10 expected (30 s reports) at 55 %
    assert figures(ticked["W5"]) == ("agent", 1, 1.0, 0.55, 1000000000)
