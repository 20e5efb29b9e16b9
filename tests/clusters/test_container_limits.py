"""The LimitRange and quota numbers that put every container of a project namespace under cgroup
limits: max from the largest unit, default from the smallest, default requests capped, and
defaultRequest <= default <= max for any grants (the API server refuses a LimitRange otherwise)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from delivery.container_limits import container_limits, mebibytes, millicores
from delivery.rendering import GrantedUnits, LimitDefaults, ProjectState, render_project


def state(*grants: GrantedUnits) -> ProjectState:
    return ProjectState(cluster="c", namespace="p", department="nlp", project="p", grants=grants)


def limit_range(*grants: GrantedUnits, defaults: LimitDefaults | None = None) -> dict[str, Any]:
    (entry,) = next(o for o in render_project(state(*grants), limit_defaults=defaults) if o["kind"] == "LimitRange")["spec"]["limits"]
    return dict(entry)


def test_max_is_the_largest_unit_and_default_the_smallest_of_the_projects_grants() -> None:
    entry = limit_range(
        GrantedUnits("nvidia.com/gpu", 2, 8000, 65536),
        GrantedUnits("nvidia.com/mig-1g.10gb", 3, 2000, 16384),
        GrantedUnits("nvidia.com/gpu", 1, 4000, 98304),  # more memory, less CPU than the first
    )
    assert entry == {
        "type": "Container",
        "defaultRequest": {"cpu": "100m", "memory": "256Mi"},
        "default": {"cpu": "2000m", "memory": "16384Mi"},
        "max": {"cpu": "8000m", "memory": "98304Mi"},
    }


def test_the_quota_limits_equal_its_requests_summed_over_the_grants() -> None:
    quota = render_project(state(GrantedUnits("nvidia.com/gpu", 2, 8000, 65536), GrantedUnits("nvidia.com/gpu", 3, 1500, 1000)))[1]
    hard = quota["spec"]["hard"]
    assert hard["limits.cpu"] == hard["requests.cpu"] == "20500m"
    assert hard["limits.memory"] == hard["requests.memory"] == f"{2 * 65536 + 3 * 1000}Mi"


def test_a_tiny_flavor_caps_the_default_request_at_its_unit() -> None:
    entry = limit_range(GrantedUnits("nvidia.com/gpu", 1, 50, 128))
    assert entry["defaultRequest"] == {"cpu": "50m", "memory": "128Mi"}
    assert entry["default"] == entry["max"] == {"cpu": "50m", "memory": "128Mi"}


def test_the_default_limit_is_never_below_the_configured_default_request() -> None:
    entry = limit_range(GrantedUnits("nvidia.com/gpu", 1, 50, 128), GrantedUnits("nvidia.com/gpu", 1, 4000, 8192),
                        defaults=LimitDefaults(cpu="0.5", memory="1Gi"))
    assert entry["defaultRequest"] == {"cpu": "0.5", "memory": "1Gi"}  # kept as configured: it fits
    assert entry["default"] == {"cpu": "500m", "memory": "1024Mi"}
    assert entry["max"] == {"cpu": "4000m", "memory": "8192Mi"}


def test_quantities_are_read_as_kubernetes_writes_them() -> None:
    assert [millicores(q) for q in ("100m", "0.5", "2", "1500m")] == [100, 500, 2000, 1500]
    assert [mebibytes(q) for q in ("256Mi", "1Gi", "200M", "1")] == [256, 1024, 191, 1]
    with pytest.raises(ValueError):
        container_limits([], request_cpu="100m", request_memory="256Mi")


per_unit = st.builds(
    GrantedUnits, resource_name=st.just("nvidia.com/gpu"), quantity=st.integers(1, 8),
    cpu_millicores_per_unit=st.integers(0, 256_000), memory_mib_per_unit=st.integers(0, 2_097_152),
)
configured_cpu = st.one_of(st.integers(1, 64_000).map(lambda m: f"{m}m"), st.integers(1, 64).map(str))
configured_memory = st.one_of(st.integers(1, 1_048_576).map(lambda m: f"{m}Mi"), st.integers(1, 64).map(lambda g: f"{g}Gi"))


@given(grants=st.lists(per_unit, min_size=1, max_size=6), cpu=configured_cpu, memory=configured_memory)
def test_for_any_grants_default_request_le_default_le_max_and_max_is_the_largest_unit(
    grants: list[GrantedUnits], cpu: str, memory: str
) -> None:
    entry = limit_range(*grants, defaults=LimitDefaults(cpu=cpu, memory=memory))
    for resource, amount in (("cpu", millicores), ("memory", mebibytes)):
        request, default, most = (amount(entry[key][resource]) for key in ("defaultRequest", "default", "max"))
        assert request <= default <= most
    assert millicores(entry["max"]["cpu"]) == max(g.cpu_millicores_per_unit for g in grants)
    assert mebibytes(entry["max"]["memory"]) == max(g.memory_mib_per_unit for g in grants)
    # The default limit is the smallest unit, unless the default request is larger (then it, up to max).
    smallest = min(g.memory_mib_per_unit for g in grants)
    assert mebibytes(entry["default"]["memory"]) == min(max(smallest, mebibytes(memory)), mebibytes(entry["max"]["memory"]))
