"""The pure attribution, on hand-made answers (no Prometheus, no database)."""

from __future__ import annotations

from telemetry.usage.attribution import (
    AgentReading,
    Booking,
    ClusterReadings,
    Device,
    DeviceFigures,
    DeviceKey,
    DeviceReading,
    combine,
    dcgm_readings,
    resolve_devices,
    workload,
)
from telemetry.usage.prometheus import Sample
from telemetry.usage.queries import SERIES_LABEL


def sample(tag: str, value: float, **labels: str) -> Sample:
    return Sample(labels={SERIES_LABEL: tag, **labels}, value=value)


def test_per_pod_copies_of_a_device_series_count_once() -> None:
    copies = [
        sample("pre-4.9/gr_engine_active", 0.6, UUID="GPU-1", namespace=ns, pod=f"p-{ns}") for ns in ("a", "b", "c")
    ]
    counts = [
        sample("pre-4.9/gr_engine_active", 20, UUID="GPU-1", namespace=ns, pod=f"p-{ns}") for ns in ("a", "b", "c")
    ]
    readings = dcgm_readings(copies, counts, [])
    assert readings[("GPU-1", "")].activity == {"pre-4.9/gr_engine_active": 0.6}
    assert readings[("GPU-1", "")].samples == {"pre-4.9/gr_engine_active": 20}
    assert readings[("GPU-1", "")].namespaces == {"a", "b", "c"}


def test_percent_series_are_converted_and_the_old_pod_labels_are_read() -> None:
    readings = dcgm_readings([sample("pre-4.9/gpu_util", 50, uuid="GPU-1", pod_namespace="a", pod_name="p")], [],
                             [sample("pre-4.9/fb_used", 2, uuid="GPU-1")])  # fmt: skip
    reading = readings[("GPU-1", "")]
    assert reading.activity == {"pre-4.9/gpu_util": 0.5} and reading.memory == {"pre-4.9": 2 * 1024 * 1024}
    assert reading.namespaces == {"a"}


def test_honor_labels_false_names_the_workload_in_exported_labels() -> None:
    assert workload(
        {"namespace": "gpu-operator", "pod": "dcgm-exporter-x", "exported_namespace": "a", "exported_pod": "p"}
    ) == ("a", "p")
    assert workload({"namespace": "a", "pod": "p"}) == ("a", "p")


def mig_readings(*instances: tuple[str, str, float]) -> dict[DeviceKey, DeviceReading]:
    activity = [sample("pre-4.9/gr_engine_active", value, UUID="GPU-M", GPU_I_ID=gi, GPU_I_PROFILE="1g.10gb",
                       **({"namespace": ns, "pod": "p"} if ns else {})) for gi, ns, value in instances]  # fmt: skip
    counts = [
        sample("pre-4.9/gr_engine_active", 20, UUID="GPU-M", GPU_I_ID=gi, GPU_I_PROFILE="1g.10gb")
        for gi, _ns, _v in instances
    ]
    return dcgm_readings(activity, counts, [])


def slice_of(allocation_id: int, namespace: str, start: int) -> Booking:
    return Booking(allocation_id, namespace, (Device(1, 0, "GPU-M", mig_profile="1g.10gb", mig_start=start),))


def test_two_allocations_of_one_project_on_podded_instances_are_only_paired_when_alike() -> None:
    bookings = [slice_of(1, "a", 0), slice_of(2, "a", 1)]
    different = mig_readings(("9", "a", 0.2), ("10", "a", 0.7))
    assert resolve_devices(bookings, different) == {}
    alike = mig_readings(("9", "a", 0.5), ("10", "a", 0.5))
    assert resolve_devices(bookings, alike) == {(1, 0): ("GPU-M", "9"), (2, 0): ("GPU-M", "10")}


def test_a_share_with_no_exporter_series_falls_back_to_the_agent_per_device() -> None:
    booking = Booking(7, "a", (Device(1, 0, "GPU-1"), Device(1, 1, "GPU-2")))
    readings = dcgm_readings(
        [sample("pre-4.9/gr_engine_active", 0.4, UUID="GPU-1")],
        [sample("pre-4.9/gr_engine_active", 20, UUID="GPU-1")],
        [],
    )
    cluster = ClusterReadings(measured=True, expected_samples=20, dcgm=readings,
                              agent={(1, 1): AgentReading(activity=0.8, samples=10, expected=10, memory_bytes=None)})  # fmt: skip
    cluster.resolve([booking])
    figures = cluster.figures(booking, min_coverage=0.8)
    assert (figures.source, figures.devices, figures.coverage, figures.activity) == ("dcgm", 2, 1.0, 0.6)


def test_a_device_without_data_lowers_the_coverage_and_memory_adds_up() -> None:
    known = DeviceFigures(coverage=1.0, activity=0.5, memory_bytes=100.0)
    assert combine("dcgm", [known, None], min_coverage=0.8).activity is None
    figures = combine("dcgm", [known, known, known, known, None], min_coverage=0.8)
    assert (figures.devices, figures.coverage, figures.activity, figures.memory_used_bytes) == (4, 0.8, 0.5, 400)
