"""The PromQL of one tick: a fixed, small number of queries per cluster, never one per allocation.

Evaluated at the end of the 5-minute bucket (the query's ``time``), each reads the bucket's samples
through a ``[300s]`` range:

- dcgm ``activity``: per device and pod, the mean of each activity series of every exporter
  generation (``clusters.dcgm``), each tagged with ``gpuportal_series="<generation>/<field>"`` so
  that one query answers for all of them and the reader picks, per device, SM activity before
  graphics engine activity before GPU utilisation, the newest generation first;
- dcgm ``coverage``: the same series' sample counts;
- dcgm ``memory``: per device and pod, the peak framebuffer use, every generation tagged likewise;
- HAMi (clusters that run it): the containers' SM utilisation (mean), its sample counts, and their
  peak vGPU memory use.

So a cluster costs three queries, six with HAMi. The per-pod labels stay in the answers (``max by``
device *and* pod): a device's pods tell which project's pods ran on it, which is how MIG instances
are told apart; duplicated series of a shared GPU are never summed here (the reader takes their
maximum per device).
"""

from __future__ import annotations

from clusters.dcgm import GENERATIONS

BUCKET_SECONDS = 300
SERIES_LABEL = "gpuportal_series"

# A device is (UUID, or uuid under --use-old-namespace) plus, on MIG, GPU_I_ID (GPU_I_PROFILE says
# the instance's profile). The pod: namespace/pod with --kubernetes, exported_namespace/exported_pod
# when Prometheus scraped with honorLabels false, pod_namespace/pod_name with the old label names.
DCGM_LABELS: tuple[str, ...] = (
    "UUID", "uuid", "GPU_I_ID", "GPU_I_PROFILE", "namespace", "pod", "exported_namespace", "exported_pod",
    "pod_namespace", "pod_name",
)  # fmt: skip
HAMI_LABELS: tuple[str, ...] = (
    "device_uuid", "namespace", "pod", "container", "exported_namespace", "exported_pod", "exported_container",
)  # fmt: skip

HAMI_UTILISATION = "hami_container_device_utilization_ratio"
# HAMi's vGPU monitor publishes the container's SM utilisation in percent (0-100) despite the
# metric's name (cmd/vGPUmonitor/metrics.go: the shared region's sm_util).
HAMI_UTILISATION_TO_RATIO = 0.01
HAMI_MEMORY_USED = "hami_vgpu_memory_used_bytes"


def _window(seconds: int) -> str:
    return f"{int(seconds)}s"


def _tagged(expression: str, tag: str) -> str:
    """``expression`` with the label ``gpuportal_series="<tag>"`` on every element."""
    return f'label_replace({expression}, "{SERIES_LABEL}", "{tag}", "", "")'


def _by(labels: tuple[str, ...]) -> str:
    return ", ".join(labels)


def dcgm_activity(window_seconds: int = BUCKET_SECONDS) -> str:
    terms = [
        _tagged(
            f"max by ({_by(DCGM_LABELS)}) (avg_over_time({name}[{_window(window_seconds)}]))",
            f"{names.generation}/{field}",
        )
        for names in GENERATIONS
        for field, name, _factor in names.activity_series()
    ]
    return " or ".join(terms)


def dcgm_coverage(window_seconds: int = BUCKET_SECONDS) -> str:
    terms = [
        _tagged(
            f"max by ({_by(DCGM_LABELS)}) (count_over_time({name}[{_window(window_seconds)}]))",
            f"{names.generation}/{field}",
        )
        for names in GENERATIONS
        for field, name, _factor in names.activity_series()
    ]
    return " or ".join(terms)


def dcgm_memory(window_seconds: int = BUCKET_SECONDS) -> str:
    terms = [
        _tagged(
            f"max by ({_by(DCGM_LABELS)}) (max_over_time({names.fb_used}[{_window(window_seconds)}]))",
            f"{names.generation}/fb_used",
        )
        for names in GENERATIONS
    ]
    return " or ".join(terms)


def hami_activity(window_seconds: int = BUCKET_SECONDS) -> str:
    return f"max by ({_by(HAMI_LABELS)}) (avg_over_time({HAMI_UTILISATION}[{_window(window_seconds)}]))"


def hami_coverage(window_seconds: int = BUCKET_SECONDS) -> str:
    return f"max by ({_by(HAMI_LABELS)}) (count_over_time({HAMI_UTILISATION}[{_window(window_seconds)}]))"


def hami_memory(window_seconds: int = BUCKET_SECONDS) -> str:
    return f"max by ({_by(HAMI_LABELS)}) (max_over_time({HAMI_MEMORY_USED}[{_window(window_seconds)}]))"


def dcgm_queries(window_seconds: int = BUCKET_SECONDS) -> dict[str, str]:
    return {
        "activity": dcgm_activity(window_seconds),
        "coverage": dcgm_coverage(window_seconds),
        "memory": dcgm_memory(window_seconds),
    }


def hami_queries(window_seconds: int = BUCKET_SECONDS) -> dict[str, str]:
    return {
        "activity": hami_activity(window_seconds),
        "coverage": hami_coverage(window_seconds),
        "memory": hami_memory(window_seconds),
    }


def series_tag(value: str) -> tuple[str, str]:
    """``(generation, field)`` of a ``gpuportal_series`` label's value."""
    generation, _, field = value.rpartition("/")
    return generation, field
