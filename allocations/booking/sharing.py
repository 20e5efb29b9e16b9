"""The memory reserve and the tenancy rules, as booking applies them to one flavor on one cluster.

The arithmetic is pure (``placement.reserve``, ``allocations.booking.tenancy``); this
module reads the settings (the cluster's reserve, the flavor's override) and the holders of the
live reservations, once per placement attempt.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import replace

from allocations.booking.tenancy import (
    UNKNOWN_TENANT,
    DepartmentTree,
    Exclusion,
    Holding,
    Tenant,
    allocation_tenants,
    tenancy_exclusion,
)
from allocations.booking.view import NodeRow, UnitShape
from allocations.models import SHARED_MODES, Flavor, Reservation, SharingMode
from clusters.models import Cluster, Gpu, NodeSharing
from kernel.errors import FieldError
from placement.reserve import GPU_MILLI, Reserve, mps_pinned_limit_mib


def flavor_reserve(*, flavor: Flavor, cluster: Cluster) -> Reserve:
    """The reserve a flavor's units keep on ``cluster``'s GPUs: the flavor's override, else the
    cluster's setting."""
    percent = flavor.reserve_percent if flavor.reserve_percent is not None else cluster.sharing_reserve_percent
    per_unit = flavor.reserve_per_unit_mib if flavor.reserve_per_unit_mib is not None else cluster.sharing_reserve_per_unit_mib
    return Reserve(percent=int(percent), per_unit_mib=int(per_unit))


def model_memory_mib(nodes: Iterable[NodeRow], model: str) -> int:
    """The smallest known memory of the ``model`` GPUs among ``nodes`` (0: unknown)."""
    sizes = [gpu.memory_mib for row in nodes for gpu in row.gpus if gpu.model == model and gpu.memory_mib > 0]
    return min(sizes, default=0)


def mps_hard_cap_mib(*, flavor: Flavor, gpu_memory_mib: int) -> int:
    """What the MPS daemon lets each client pin on such a GPU (0 when the flavor is not MPS)."""
    if flavor.sharing_mode != SharingMode.MPS or not flavor.replicas:
        return 0
    return mps_pinned_limit_mib(gpu_memory_mib, int(flavor.replicas))


def shape_under_reserve(*, shape: UnitShape, flavor: Flavor, cluster: Cluster, gpu_memory_mib: int) -> UnitShape:
    """The unit booked for at least the share of the GPU its memory needs under the reserve (more
    than 1000 milli: it cannot fit any GPU of this size)."""
    if flavor.sharing_mode not in SHARED_MODES or gpu_memory_mib <= 0:
        return shape
    reserve = flavor_reserve(flavor=flavor, cluster=cluster)
    milli = reserve.unit_milli(
        gpu_memory_mib, flavor.memory_mib, hard_cap_mib=mps_hard_cap_mib(flavor=flavor, gpu_memory_mib=gpu_memory_mib)
    )
    return shape if milli <= shape.gpu_milli else replace(shape, gpu_milli=milli)


def reserve_refusal(*, flavor: Flavor, cluster: Cluster, gpu_memory_mib: int) -> str:
    reserve = flavor_reserve(flavor=flavor, cluster=cluster)
    return (
        f"a unit of {flavor.name} needs {flavor.memory_mib} MiB, and a {flavor.gpu_model} GPU of {gpu_memory_mib} MiB "
        f"keeps {reserve.percent} % + {reserve.per_unit_mib} MiB per unit free on cluster {cluster.name}"
    )


def too_big(shape: UnitShape) -> bool:
    return shape.gpu_milli > GPU_MILLI


def exclusion_for(*, tenant: Tenant | None, nodes: list[NodeRow], reservations: Iterable[Reservation]) -> Exclusion:
    """The nodes and GPUs ``tenant`` may not use, given who holds the live ``reservations`` (rows
    not yet stored, of the attempt itself, have no allocation and are the tenant's own)."""
    tenant = tenant if tenant is not None else UNKNOWN_TENANT
    node_ids = {row.pk for row in nodes}
    rows = [row for row in reservations if row.allocation_id is not None and row.node_id in node_ids]
    if not rows:
        return Exclusion()
    tenants = allocation_tenants(allocation_ids={row.allocation_id for row in rows}, tree=DepartmentTree.load())
    mps = {row.pk: row.node.sharing == NodeSharing.MPS for row in nodes}
    holdings = [
        Holding(row.node_id, tuple(int(index) for index in row.gpu_indices), tenants[row.allocation_id])
        for row in rows if row.allocation_id in tenants
    ]
    return tenancy_exclusion(tenant=tenant, holdings=holdings, mps_node_ids=mps)


_MODEL_MEMORY = re.compile(r"(\d+)\s*GB", re.IGNORECASE)


def _named_memory_mib(model: str) -> int:
    """The memory a GPU product name states (``NVIDIA-A100-SXM4-80GB`` → 81920), 0 if none."""
    found = _MODEL_MEMORY.search(model)
    return int(found.group(1)) * 1024 if found else 0


def _fit_problem(*, flavor: Flavor, reserve: Reserve, gpu_memory_mib: int) -> tuple[int, int] | None:
    """(units the check counted, the most memory per unit that fits) when ``flavor``'s unit does
    not fit a GPU of ``gpu_memory_mib`` under ``reserve``; None when it fits."""
    memory, replicas = flavor.memory_mib, int(flavor.replicas or 1)
    if flavor.sharing_mode == SharingMode.MPS:
        cap = mps_pinned_limit_mib(gpu_memory_mib, replicas)
        most = min(cap, reserve.largest_unit_mib(gpu_memory_mib, 1))
        fits = memory <= cap and reserve.unit_milli(gpu_memory_mib, memory, hard_cap_mib=cap) <= GPU_MILLI
        return None if fits else (1, most)
    units = replicas if flavor.sharing_mode == SharingMode.TIMESLICE else 1
    most = reserve.largest_unit_mib(gpu_memory_mib, units)
    return None if memory <= most else (units, most)


def flavor_fit_check(*, flavor: Flavor) -> None:
    """Refuse (400 naming ``memory_mib``) a shared flavor whose unit cannot fit its GPUs with the
    memory reserve: on every active cluster that has such GPUs (the cluster's reserve, or the
    flavor's override), or, with none in the inventory yet, on the memory its product name states
    under the default reserve. A time-slicing flavor's replicas must all fit; an MPS unit must fit
    within what its control daemon lets it pin (total / replicas)."""
    if flavor.sharing_mode not in SHARED_MODES:
        return
    seen = sorted(set(
        Gpu.objects.filter(model=flavor.gpu_model, node__cluster__is_active=True, memory_mib__gt=0)
        .values_list("node__cluster_id", "memory_mib")
    ))
    clusters = Cluster.objects.in_bulk({cluster_id for cluster_id, _ in seen})
    checks = [(clusters[cluster_id], memory) for cluster_id, memory in seen]
    if not checks and _named_memory_mib(flavor.gpu_model):
        checks = [(Cluster(name="(default)"), _named_memory_mib(flavor.gpu_model))]
    for cluster, gpu_memory in checks:
        reserve = flavor_reserve(flavor=flavor, cluster=cluster)
        problem = _fit_problem(flavor=flavor, reserve=reserve, gpu_memory_mib=gpu_memory)
        if problem is None:
            continue
        units, most = problem
        daemon = (
            f"; its MPS daemon pins each of {flavor.replicas} replicas to "
            f"{mps_pinned_limit_mib(gpu_memory, int(flavor.replicas or 1))} MiB"
            if flavor.sharing_mode == SharingMode.MPS else ""
        )
        each = f"each of {units} replicas" if units > 1 else "a unit"
        message = (
            f"{flavor.memory_mib} MiB per unit does not fit: a {flavor.gpu_model} GPU has {gpu_memory} MiB and keeps "
            f"{reserve.percent} % + {reserve.per_unit_mib} MiB per unit free ({reserve.total_mib(gpu_memory, units)} MiB "
            f"with {units} unit{'s' if units > 1 else ''}){daemon}, so {each} can have at most {max(0, most)} MiB."
        )
        error = FieldError("memory_mib", message)
        error.details = {
            "cluster": cluster.name, "gpu_memory_mib": gpu_memory, "reserve_percent": reserve.percent,
            "reserve_per_unit_mib": reserve.per_unit_mib, "reserve_mib": reserve.total_mib(gpu_memory, units),
            "units_counted": units, "max_memory_mib": max(0, most),
        }
        raise error
