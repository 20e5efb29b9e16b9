"""Series → allocations: pure functions, no Django, no I/O.

A device is a GPU's UUID and, on MIG, the GPU instance id (``DeviceKey``). What an allocation
booked (``Booking``: its reservations' GPUs, and MIG slices by profile and first memory slice) is
matched with what the exporters said about each device over one bucket:

- whole GPUs and shares of one (time-slicing, MPS, HAMi's vGPU): by the GPU's UUID;
- MIG instances: by parent UUID and profile, then by the pods on the instance (an instance where a
  pod of exactly one waiting allocation's project runs is that allocation's); the instances left
  are paired with the bookings left in order when one allocation waits for them all, or when they
  read the same (so the pairing cannot change a figure); otherwise those bookings stay unknown;
- HAMi: the containers of the allocation's namespace on the booked GPU (``device_uuid``).

Per device the activity is the most trusted series it has (``clusters.dcgm.ACTIVITY_FIELDS``, the
newest exporter generation first), the *maximum* over the per-pod copies of a shared GPU (those
copies repeat the device's PROF_* value: summing them would count it once per pod), clamped to
0..1. A device the exporters do not cover is read from the node agent's samples; a MIG instance
has no agent reading (NVML has no per-instance utilisation). Coverage is the fraction of the
expected samples a device's chosen series holds; the allocation's is the mean over its devices
(a device without data counts 0), and below the minimum the activity is unknown (``None``).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from clusters.dcgm import ACTIVITY_FIELDS, GENERATIONS, generation_named
from telemetry.usage.prometheus import Sample
from telemetry.usage.queries import HAMI_UTILISATION_TO_RATIO, SERIES_LABEL, series_tag

DeviceKey = tuple[str, str]  # (GPU UUID, GPU instance id or "")

DCGM, HAMI, AGENT = "dcgm", "hami", "agent"


@dataclass(frozen=True)
class Device:
    """One device an allocation booked: a GPU (``node_id``, ``gpu_index``, its ``uuid``; empty
    when unknown), or a MIG slice of it (``mig_profile``, ``mig_start``); ``shared`` when the
    booking is a share of a GPU that others may hold too."""

    node_id: int
    gpu_index: int
    uuid: str
    mig_profile: str = ""
    mig_start: int | None = None
    shared: bool = False


@dataclass(frozen=True)
class Booking:
    """An allocation's devices over the bucket; ``namespace`` is its project's namespace.
    ``hami``: read from HAMi's monitor first; ``compute_share``: the flavor's share of a GPU's
    compute (HAMi's utilisation is of the whole GPU)."""

    allocation_id: int
    namespace: str
    devices: tuple[Device, ...]
    hami: bool = False
    compute_share: float = 1.0


@dataclass(frozen=True)
class DeviceFigures:
    coverage: float  # 0..1
    activity: float | None  # 0..1; None: no activity series
    memory_bytes: float | None


@dataclass(frozen=True)
class Figures:
    """One allocation over one bucket."""

    source: str
    devices: int  # booked devices with data
    coverage: float
    activity: float | None  # None: unknown
    memory_used_bytes: int | None


def clamp(value: float) -> float:
    return min(1.0, max(0.0, value))


def workload(labels: Mapping[str, str]) -> tuple[str, str]:
    """The namespace and pod a series names: honorLabels false renames the exporter's own labels
    to exported_*; old exporters call them pod_namespace/pod_name."""
    if labels.get("exported_namespace") or labels.get("exported_pod"):
        return labels.get("exported_namespace", ""), labels.get("exported_pod", "")
    if labels.get("pod_namespace") or labels.get("pod_name"):
        return labels.get("pod_namespace", ""), labels.get("pod_name", "")
    return labels.get("namespace", ""), labels.get("pod", "")


def device_key(labels: Mapping[str, str]) -> DeviceKey | None:
    uuid = labels.get("UUID") or labels.get("uuid") or ""
    return (uuid, labels.get("GPU_I_ID", "")) if uuid else None


# ---------------------------------------------------------------------------------- dcgm-exporter


@dataclass
class DeviceReading:
    """What dcgm-exporter said about one device over the bucket, in the portal's units. ``activity``
    and ``samples`` are per series tag (``<generation>/<field>``), the maximum over the device's
    per-pod copies; ``memory`` per generation (the device's peak), ``pod_memory`` per generation,
    namespace and pod (a shared GPU's per-pod values)."""

    profile: str = ""
    activity: dict[str, float] = field(default_factory=dict)
    samples: dict[str, int] = field(default_factory=dict)
    memory: dict[str, float] = field(default_factory=dict)
    pod_memory: dict[str, dict[str, dict[str, float]]] = field(default_factory=dict)
    namespaces: set[str] = field(default_factory=set)

    def preferred(self) -> str | None:
        """The series tag to trust: SM activity, else graphics engine, else GPU utilisation; within
        each, the newest exporter generation that answered."""
        for wanted in ACTIVITY_FIELDS:
            for names in GENERATIONS:
                tag = f"{names.generation}/{wanted}"
                if tag in self.activity:
                    return tag
        return None

    def generation(self) -> str | None:
        tag = self.preferred()
        return series_tag(tag)[0] if tag is not None else None

    def memory_used(self, *, namespace: str | None) -> float | None:
        """The device's peak use (``namespace`` None), or the sum of the peaks of the pods of
        ``namespace`` (0 when none of its pods ran there)."""
        for names in GENERATIONS:
            if names.generation not in self.memory:
                continue
            if namespace is None:
                return self.memory[names.generation]
            return sum(self.pod_memory.get(names.generation, {}).get(namespace, {}).values())
        return None

    def signature(self) -> tuple[float | None, int, float | None]:
        tag = self.preferred()
        activity = round(self.activity[tag], 6) if tag is not None else None
        return activity, self.samples.get(tag, 0) if tag is not None else 0, self.memory_used(namespace=None)


def dcgm_readings(
    activity: Iterable[Sample], coverage: Iterable[Sample], memory: Iterable[Sample] | None
) -> dict[DeviceKey, DeviceReading]:
    """The answers of the three dcgm queries (``queries.dcgm_queries``), per device."""
    readings: dict[DeviceKey, DeviceReading] = defaultdict(DeviceReading)

    def reading_of(sample: Sample) -> tuple[DeviceReading, str, str] | None:
        key = device_key(sample.labels)
        tag = sample.labels.get(SERIES_LABEL, "")
        if key is None or not tag:
            return None
        reading = readings[key]
        reading.profile = reading.profile or sample.labels.get("GPU_I_PROFILE", "")
        namespace, _pod = workload(sample.labels)
        if namespace:
            reading.namespaces.add(namespace)
        return reading, tag, series_tag(tag)[0]

    factors = {
        f"{names.generation}/{wanted}": factor
        for names in GENERATIONS
        for wanted, _series, factor in names.activity_series()
    }
    for sample in activity:
        found = reading_of(sample)
        if found is None or found[1] not in factors:
            continue
        reading, tag, _generation = found
        value = sample.value * factors[tag]
        reading.activity[tag] = max(reading.activity.get(tag, value), value)
    for sample in coverage:
        found = reading_of(sample)
        if found is None:
            continue
        reading, tag, _generation = found
        reading.samples[tag] = max(reading.samples.get(tag, 0), int(sample.value))
    for sample in memory or ():
        found = reading_of(sample)
        if found is None:
            continue
        reading, _tag, generation = found
        try:
            value = sample.value * generation_named(generation).fb_used_to_bytes
        except KeyError:
            continue
        reading.memory[generation] = max(reading.memory.get(generation, value), value)
        namespace, pod = workload(sample.labels)
        if namespace and pod:
            pods = reading.pod_memory.setdefault(generation, {}).setdefault(namespace, {})
            pods[pod] = max(pods.get(pod, value), value)
    return dict(readings)


# ------------------------------------------------------------------------------------------ HAMi


@dataclass
class HamiReading:
    """HAMi's containers of one namespace on one GPU: their summed SM utilisation (a fraction of
    the whole GPU), the most samples one of them has, their summed peak memory."""

    activity: float = 0.0
    samples: int = 0
    memory: float | None = None


def hami_readings(
    activity: Iterable[Sample], coverage: Iterable[Sample], memory: Iterable[Sample] | None
) -> dict[tuple[str, str], HamiReading]:
    """Per (GPU UUID, namespace)."""
    readings: dict[tuple[str, str], HamiReading] = defaultdict(HamiReading)

    def key_of(sample: Sample) -> tuple[str, str] | None:
        uuid = sample.labels.get("device_uuid", "")
        namespace, _pod = workload(sample.labels)
        return (uuid, namespace) if uuid and namespace else None

    for sample in activity:
        key = key_of(sample)
        if key is not None:
            readings[key].activity += sample.value * HAMI_UTILISATION_TO_RATIO
    for sample in coverage:
        key = key_of(sample)
        if key is not None:
            readings[key].samples = max(readings[key].samples, int(sample.value))
    for sample in memory or ():
        key = key_of(sample)
        if key is not None:
            readings[key].memory = (readings[key].memory or 0.0) + sample.value
    return dict(readings)


# ----------------------------------------------------------------------------------------- agent


@dataclass(frozen=True)
class AgentReading:
    """The node agent's readings of one GPU over the bucket: mean utilisation (0..1), how many
    samples of how many expected, mean memory used."""

    activity: float | None
    samples: int
    expected: float
    memory_bytes: float | None


# ------------------------------------------------------------------------------------ MIG matching


@dataclass(frozen=True)
class _Wanted:
    booking: Booking
    position: int
    device: Device


def resolve_devices(
    bookings: Sequence[Booking], readings: Mapping[DeviceKey, DeviceReading]
) -> dict[tuple[int, int], DeviceKey]:
    """(allocation id, device position) → the device key its figures are read from."""
    resolved: dict[tuple[int, int], DeviceKey] = {}
    waiting: dict[tuple[str, str], list[_Wanted]] = defaultdict(list)
    for booking in bookings:
        for position, device in enumerate(booking.devices):
            if not device.uuid:
                continue
            if device.mig_profile:
                waiting[(device.uuid, device.mig_profile)].append(_Wanted(booking, position, device))
            else:
                resolved[(booking.allocation_id, position)] = (device.uuid, "")
    instances: dict[tuple[str, str], list[DeviceKey]] = defaultdict(list)
    for key, reading in readings.items():
        if key[1]:
            instances[(key[0], reading.profile)].append(key)
    for place, wanted in waiting.items():
        keys = sorted(instances.get(place, []), key=lambda key: (len(key[1]), key[1]))
        resolved.update(_match_instances(wanted, keys, readings))
    return resolved


def _match_instances(
    wanted: list[_Wanted], keys: list[DeviceKey], readings: Mapping[DeviceKey, DeviceReading]
) -> dict[tuple[int, int], DeviceKey]:
    left = sorted(
        wanted, key=lambda w: (w.device.mig_start is None, w.device.mig_start or 0, w.booking.allocation_id, w.position)
    )
    free = list(keys)
    matched: dict[tuple[int, int], DeviceKey] = {}
    for key in list(free):
        candidates = [w for w in left if w.booking.namespace in readings[key].namespaces]
        if len({w.booking.allocation_id for w in candidates}) == 1:
            chosen = candidates[0]
            matched[(chosen.booking.allocation_id, chosen.position)] = key
            left.remove(chosen)
            free.remove(key)
    if not left or not free:
        return matched
    one_owner = len({w.booking.allocation_id for w in left}) == 1
    alike = len(free) >= len(left) and len({readings[key].signature() for key in free}) == 1
    if one_owner or alike:
        for chosen, key in zip(left, free, strict=False):
            matched[(chosen.booking.allocation_id, chosen.position)] = key
    return matched


# ----------------------------------------------------------------------------------- the figures


@dataclass
class ClusterReadings:
    """Everything read for one cluster's bucket. ``dcgm``/``hami`` are None when the cluster has no
    such source or its queries failed or warned (no data); ``measured`` when the cluster has a
    Prometheus (a bucket with no data at all is then labelled with its measured source)."""

    measured: bool
    expected_samples: float
    dcgm: Mapping[DeviceKey, DeviceReading] | None = None
    hami: Mapping[tuple[str, str], HamiReading] | None = None
    agent: Mapping[tuple[int, int], AgentReading] = field(default_factory=dict)
    resolved: dict[tuple[int, int], DeviceKey] = field(default_factory=dict)

    def resolve(self, bookings: Sequence[Booking]) -> None:
        self.resolved = resolve_devices(bookings, self.dcgm) if self.dcgm is not None else {}

    def _dcgm(self, booking: Booking, position: int, device: Device) -> DeviceFigures | None:
        key = self.resolved.get((booking.allocation_id, position))
        reading = self.dcgm.get(key) if self.dcgm is not None and key is not None else None
        if reading is None:
            return None
        tag = reading.preferred()
        memory = reading.memory_used(namespace=booking.namespace if device.shared else None)
        if tag is None:
            return DeviceFigures(coverage=0.0, activity=None, memory_bytes=memory)
        coverage = clamp(reading.samples.get(tag, 0) / self.expected_samples)
        return DeviceFigures(coverage=coverage, activity=clamp(reading.activity[tag]), memory_bytes=memory)

    def _hami(self, booking: Booking, position: int, device: Device) -> DeviceFigures | None:
        reading = self.hami.get((device.uuid, booking.namespace)) if self.hami is not None and device.uuid else None
        if reading is None:
            return None
        share = booking.compute_share if booking.compute_share > 0 else 1.0
        coverage = clamp(reading.samples / self.expected_samples)
        return DeviceFigures(coverage=coverage, activity=clamp(reading.activity / share), memory_bytes=reading.memory)

    def _agent(self, booking: Booking, position: int, device: Device) -> DeviceFigures | None:
        reading = self.agent.get((device.node_id, device.gpu_index))
        if reading is None or device.mig_profile or reading.activity is None or reading.expected <= 0:
            return None
        memory = None if device.shared else reading.memory_bytes
        return DeviceFigures(
            coverage=clamp(reading.samples / reading.expected), activity=clamp(reading.activity), memory_bytes=memory
        )

    def figures(self, booking: Booking, *, min_coverage: float) -> Figures:
        """The allocation's figures: each device from the first source that has data for it (HAMi
        for a HAMi booking, then dcgm-exporter, then the node agent); the bucket is labelled with
        the best source any device came from."""
        order: list[tuple[str, Callable[[Booking, int, Device], DeviceFigures | None]]] = []
        if booking.hami and self.hami is not None:
            order.append((HAMI, self._hami))
        if self.dcgm is not None:
            order.append((DCGM, self._dcgm))
        order.append((AGENT, self._agent))
        per_device: list[DeviceFigures | None] = []
        used: set[str] = set()
        for position, device in enumerate(booking.devices):
            chosen: DeviceFigures | None = None
            for source, read in order:
                figures = read(booking, position, device)
                if figures is not None and figures.coverage > 0:
                    chosen = figures
                    used.add(source)
                    break
            per_device.append(chosen)
        for source in (HAMI, DCGM, AGENT):
            if source in used:
                break
        else:
            source = (HAMI if booking.hami else DCGM) if self.measured else AGENT
        return combine(source, per_device, min_coverage=min_coverage)


def combine(source: str, per_device: Sequence[DeviceFigures | None], *, min_coverage: float) -> Figures:
    """An allocation's figures from its devices': coverage is their mean (no data counts 0), the
    activity the mean of the devices that have one, unknown below ``min_coverage``; memory the sum."""
    known = [figures for figures in per_device if figures is not None and figures.coverage > 0]
    coverage = sum(figures.coverage for figures in known) / len(per_device) if per_device else 0.0
    activities = [figures.activity for figures in known if figures.activity is not None]
    activity = sum(activities) / len(activities) if activities and coverage >= min_coverage else None
    memories = [figures.memory_bytes for figures in known if figures.memory_bytes is not None]
    return Figures(
        source=source, devices=len(known), coverage=round(coverage, 6),
        activity=round(activity, 6) if activity is not None else None,
        memory_used_bytes=round(sum(memories)) if memories else None,
    )  # fmt: skip
