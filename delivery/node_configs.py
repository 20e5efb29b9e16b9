"""Per-node GPU configuration: NVIDIA device-plugin configs, mig-parted layouts and node labels.

Pure functions over plain inputs (:class:`NodePlan`), so the placement engine's chosen MIG layouts
can feed them as well as the interim demand planner here. Formats and the combinations the real
components reject follow gpu-sharing-formats.md §1-§2:

* one ConfigMap holds every device-plugin config as a key; a node selects one with the
  ``nvidia.com/device-plugin.config`` label. Sharing is per node: time-slicing or MPS, never both;
  MPS replicas 2..48 (16 below compute capability 7.5), never on a MIG node.
* mig-parted layouts live in one ConfigMap under the key ``config.yaml`` (``version: v1``,
  ``mig-configs``); a node selects one with ``nvidia.com/mig.config``. Every layout is checked
  against the GPU's geometry (contiguous memory slices at allowed starts, at most 7 compute
  slices, one ``+me``) before it is rendered, as mig-parted itself only finds out on the node.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml

from delivery.pinning import node_pool_labels
from delivery.rendering import cluster_labels
from placement.mig import MigGeometry, MigState, geometry_for_model, mig_layout_starts

DEVICE_PLUGIN_CONFIGMAP = "gpuportal-device-plugin-configs"
MIG_PARTED_CONFIGMAP = "gpuportal-mig-parted-config"
MIG_PARTED_KEY = "config.yaml"
DEVICE_PLUGIN_LABEL = "nvidia.com/device-plugin.config"
MIG_CONFIG_LABEL = "nvidia.com/mig.config"
ALL_DISABLED = "all-disabled"
EXCLUSIVE_KEY = "exclusive"
MIG_MIXED_KEY = "mig-mixed"
MIG_CONFIG_KEY_PREFIX = "gpuportal-"  # the layouts the portal renders
MPS_ROOT = "/run/nvidia/mps"
GPU_RESOURCE = "nvidia.com/gpu"


class RenderError(ValueError):
    """The desired state cannot be expressed as a configuration the real components accept."""


@dataclass(frozen=True)
class MigGroup:
    """GPUs of a node that share one MIG layout (empty ``profiles``: MIG on, nothing carved)."""

    devices: tuple[int, ...]
    profiles: tuple[tuple[str, int], ...]


@dataclass(frozen=True)
class NodePlan:
    name: str
    gpu_model: str
    gpu_count: int
    gpu_memory_mib: int = 0
    mig_capable: bool = False
    sharing: str = "exclusive"  # exclusive | timeslice | mps | mig
    replicas: int | None = None
    rename_shared: bool = True
    compute_capability: tuple[int, int] | None = None
    mig_groups: tuple[MigGroup, ...] = field(default_factory=tuple)
    whole_gpus: tuple[int, ...] = ()  # MIG node, mixed strategy: GPUs offered whole, MIG off
    pools: tuple[str, ...] = ()  # namespaces of the projects with live bookings here (delivery.pinning)
    mps_tenant: str = ""  # the department an MPS node with bookings serves


# ------------------------------------------------------------------------------- device plugin


def device_plugin_key(plan: NodePlan) -> str:
    if plan.sharing == "mps":
        return f"mps-{plan.replicas}" + ("" if plan.rename_shared else "-unrenamed")
    if plan.sharing == "timeslice":
        return f"ts-{plan.replicas}" + ("" if plan.rename_shared else "-unrenamed")
    if plan.sharing == "mig":
        return MIG_MIXED_KEY
    return EXCLUSIVE_KEY


def device_plugin_config(plan: NodePlan) -> dict[str, Any]:
    """The device plugin's config file (v1) for the node's sharing mode."""
    check_node_sharing(plan)
    if plan.sharing == "mig":
        return {"version": "v1", "flags": {"migStrategy": "mixed"}}
    if plan.sharing in ("mps", "timeslice"):
        strategy = "mps" if plan.sharing == "mps" else "timeSlicing"
        flags: dict[str, Any] = {"migStrategy": "none"}
        if plan.sharing == "mps":
            flags["mpsRoot"] = MPS_ROOT
        return {
            "version": "v1",
            "flags": flags,
            "sharing": {
                strategy: {
                    "renameByDefault": plan.rename_shared,
                    "failRequestsGreaterThanOne": True,
                    "resources": [{"name": GPU_RESOURCE, "replicas": plan.replicas}],
                }
            },
        }
    return {"version": "v1", "flags": {"migStrategy": "none"}}


def mps_max_replicas(compute_capability: tuple[int, int] | None) -> int:
    """48 clients from compute capability 7.5 on, 16 before (the MPS daemon's check)."""
    if compute_capability is not None and compute_capability < (7, 5):
        return 16
    return 48


def check_node_sharing(plan: NodePlan) -> None:
    if plan.sharing not in ("exclusive", "timeslice", "mps", "mig"):
        raise RenderError(f"node {plan.name}: unknown sharing mode {plan.sharing!r}")
    if plan.sharing in ("mps", "timeslice"):
        if plan.replicas is None or plan.replicas < 2:
            raise RenderError(f"node {plan.name}: number of replicas must be >= 2")
        if plan.sharing == "mps" and plan.replicas > mps_max_replicas(plan.compute_capability):
            raise RenderError(
                f"node {plan.name}: invalid MPS configuration: maximum allowed replicas exceeded: "
                f"{plan.replicas} > {mps_max_replicas(plan.compute_capability)}"
            )
    if plan.sharing == "mig" and not plan.mig_capable:
        raise RenderError(f"node {plan.name}: cannot set MIG config on non MIG-capable GPU ({plan.gpu_model})")


def _yaml(document: dict[str, Any]) -> str:
    return yaml.safe_dump(document, sort_keys=True, default_flow_style=False)


def device_plugin_inputs(plan: NodePlan) -> tuple[Any, ...]:
    """All a node's device-plugin config (and its check) depends on, but for the node's name."""
    return plan.sharing, plan.replicas, plan.rename_shared, plan.compute_capability, plan.mig_capable, plan.gpu_model


def mig_inputs(plan: NodePlan) -> tuple[Any, ...]:
    """All a MIG node's mig-parted layout (and its check) depends on, but for the node's name."""
    return plan.gpu_model, plan.gpu_memory_mib, plan.gpu_count, plan.mig_groups, plan.whole_gpus


def distinct_plans(plans: Iterable[NodePlan], inputs: Callable[[NodePlan], tuple[Any, ...]]) -> list[NodePlan]:
    """The first plan (in the order given) of each distinct ``inputs``: nodes that differ only by
    name render the same config, so each config is rendered (and dumped) once, not once per node."""
    seen: dict[tuple[Any, ...], NodePlan] = {}
    for plan in plans:
        seen.setdefault(inputs(plan), plan)
    return list(seen.values())


def render_device_plugin_configmap(plans: Iterable[NodePlan], *, namespace: str) -> dict[str, Any]:
    data = {EXCLUSIVE_KEY: _yaml(device_plugin_config(NodePlan(name="-", gpu_model="", gpu_count=0)))}
    for plan in distinct_plans(plans, device_plugin_inputs):
        data[device_plugin_key(plan)] = _yaml(device_plugin_config(plan))
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": DEVICE_PLUGIN_CONFIGMAP, "namespace": namespace, "labels": cluster_labels()},
        "data": dict(sorted(data.items())),
    }


# ------------------------------------------------------------------------------------- MIG


def _geometry(plan: NodePlan) -> MigGeometry:
    geometry = geometry_for_model(plan.gpu_model, plan.gpu_memory_mib)
    if geometry is None:
        raise RenderError(f"node {plan.name}: no known MIG geometry for {plan.gpu_model!r}")
    return geometry


def mig_fits(geometry: MigGeometry, profiles: Mapping[str, int]) -> bool:
    """Whether one GPU can hold ``profiles`` at once (KeyError for an unknown profile)."""
    return mig_layout_starts(geometry, profiles) is not None


def check_mig_groups(plan: NodePlan) -> None:
    geometry = _geometry(plan)
    seen: set[int] = set()
    for device in plan.whole_gpus:
        if device in seen or not 0 <= device < plan.gpu_count:
            raise RenderError(f"node {plan.name}: GPU index {device} is outside the node or listed twice as whole")
        seen.add(device)
    for group in plan.mig_groups:
        for device in group.devices:
            if device in seen or not 0 <= device < plan.gpu_count:
                raise RenderError(
                    f"node {plan.name}: GPU index {device} is outside the node, in two MIG groups or offered whole"
                )
            seen.add(device)
        profiles = dict(group.profiles)
        try:
            fits = mig_fits(geometry, profiles)
        except KeyError as error:
            raise RenderError(f"node {plan.name}: {error.args[0]}") from None
        if not fits:
            raise RenderError(f"node {plan.name}: MIG layout {profiles} does not fit one {geometry.name} GPU")


def mig_config_entries(plan: NodePlan) -> list[dict[str, Any]]:
    """mig-parted entries for a MIG node: its groups, the GPUs offered whole with MIG off, then
    every other GPU with MIG on and empty (so a later layout needs no GPU reset). Devices as
    lists of indexes, in index order."""
    check_mig_groups(plan)
    entries: list[dict[str, Any]] = []
    covered: set[int] = set(plan.whole_gpus)
    for group in sorted(plan.mig_groups, key=lambda group: min(group.devices)):
        entries.append(
            {"devices": sorted(group.devices), "mig-enabled": True, "mig-devices": {name: count for name, count in sorted(group.profiles) if count > 0}}
        )
        covered.update(group.devices)
    if plan.whole_gpus:
        entries.append({"devices": sorted(plan.whole_gpus), "mig-enabled": False})
    rest = [index for index in range(plan.gpu_count) if index not in covered]
    if rest:
        entries.append({"devices": rest, "mig-enabled": True, "mig-devices": {}})
    return entries


def mig_config_key(entries: list[dict[str, Any]]) -> str:
    """A stable name per distinct layout, valid as a label value; identical layouts share it."""
    digest = hashlib.sha256(json.dumps(entries, sort_keys=True).encode()).hexdigest()
    return f"{MIG_CONFIG_KEY_PREFIX}{digest[:12]}"


def mig_label_value(plan: NodePlan) -> str | None:
    if plan.sharing == "mig":
        return mig_config_key(mig_config_entries(plan))
    return ALL_DISABLED if plan.mig_capable else None


def render_mig_parted_document(plans: Iterable[NodePlan]) -> dict[str, Any]:
    configs: dict[str, Any] = {ALL_DISABLED: [{"devices": "all", "mig-enabled": False}]}
    for plan in distinct_plans((plan for plan in plans if plan.sharing == "mig"), mig_inputs):
        if plan.sharing == "mig":
            entries = mig_config_entries(plan)
            configs[mig_config_key(entries)] = entries
    return {"version": "v1", "mig-configs": dict(sorted(configs.items()))}


def render_mig_parted_configmap(plans: Iterable[NodePlan], *, namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": MIG_PARTED_CONFIGMAP, "namespace": namespace, "labels": cluster_labels()},
        "data": {MIG_PARTED_KEY: _yaml(render_mig_parted_document(plans))},
    }


def render_node_labels(plan: NodePlan) -> dict[str, Any]:
    """A partial Node: only the labels the portal owns (applied, never created or deleted): the
    device-plugin and MIG configurations, and the tenant pools booked on it (``delivery.pinning``)."""
    labels = {DEVICE_PLUGIN_LABEL: device_plugin_key(plan)}
    mig = mig_label_value(plan)
    if mig is not None:
        labels[MIG_CONFIG_LABEL] = mig
    labels.update(node_pool_labels(namespaces=plan.pools, mps_tenant=plan.mps_tenant))
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": plan.name, "labels": labels}}


def render_node_objects(plans: list[NodePlan], *, namespace: str) -> list[dict[str, Any]]:
    """Both ConfigMaps, then one partial Node per node; empty when the cluster has no GPU nodes."""
    if not plans:
        return []
    ordered = sorted(plans, key=lambda plan: plan.name)
    return [
        render_device_plugin_configmap(ordered, namespace=namespace),
        render_mig_parted_configmap(ordered, namespace=namespace),
        *(render_node_labels(plan) for plan in ordered),
    ]


# ------------------------------------------------------------------------ the layout in force


@dataclass(frozen=True)
class BookedUnit:
    """One live reservation of a grant on the cluster: its node, GPUs, MIG instance (profile and
    first memory slice; no profile: the GPUs booked whole or shared) and whether its grant's
    interval holds at the instant the layout is for."""

    node_id: int
    gpu_indices: tuple[int, ...]
    mig_profile: str = ""
    mig_start: int | None = None
    in_force: bool = True


_WHOLE = "whole"  # a GPU booked whole or shared: MIG off, no instance on it
_UNKNOWN = "unknown"  # an instance whose memory slices are not known: it takes the GPU


def units_in_force(units: Iterable[BookedUnit], geometries: Mapping[tuple[int, int], MigGeometry]) -> list[BookedUnit]:
    """What a node holds now: every unit in force, then each unit not in force (a grant past its end
    whose expiry has not run yet, or one on the cluster before its start) that fits beside what is
    already kept, in the order given; a unit that would share a memory slice (or a GPU booked whole)
    with one kept is left out, to be carved when its grant is in force. Grants that never meet in
    time are booked on the same slices on purpose, so the layout never adds them up.
    ``geometries``: (node id, GPU index) → its MIG geometry; a GPU without one is claimed whole."""
    units = list(units)
    kept = [unit for unit in units if unit.in_force]
    if len(kept) == len(units):
        return kept
    taken: dict[tuple[int, int], MigState | str] = {}
    for unit in kept:
        taken.update(_claim(unit, taken, geometries) or {})
    for unit in units:
        if not unit.in_force and (claimed := _claim(unit, taken, geometries)) is not None:
            taken.update(claimed)
            kept.append(unit)
    return kept


def _claim(
    unit: BookedUnit, taken: Mapping[tuple[int, int], MigState | str], geometries: Mapping[tuple[int, int], MigGeometry]
) -> dict[tuple[int, int], MigState | str] | None:
    """What ``unit`` takes on each of its GPUs beside ``taken``, or None when it clashes."""
    claimed: dict[tuple[int, int], MigState | str] = {}
    for index in unit.gpu_indices:
        key = (unit.node_id, index)
        held, geometry = taken.get(key), geometries.get(key)
        if not unit.mig_profile:
            if held not in (None, _WHOLE):
                return None
            claimed[key] = _WHOLE
        elif unit.mig_start is None or geometry is None:
            if held is not None:
                return None
            claimed[key] = _UNKNOWN
        elif held is None or isinstance(held, MigState):
            try:
                claimed[key] = geometry.add(held or MigState(), geometry.profile(unit.mig_profile), unit.mig_start)
            except (KeyError, ValueError):
                return None
        else:
            return None
    return claimed


# ------------------------------------------------------------------------ interim MIG planner


def mig_groups_from_layouts(per_gpu: Mapping[int, Mapping[str, int]]) -> tuple[MigGroup, ...]:
    """GPU index → profile counts (as the placement engine booked them) as groups of GPUs that
    share one layout, in index order."""
    groups: dict[tuple[tuple[str, int], ...], list[int]] = defaultdict(list)
    for index in sorted(per_gpu):
        layout = tuple(sorted((name, count) for name, count in per_gpu[index].items() if count > 0))
        if layout:
            groups[layout].append(index)
    return tuple(MigGroup(tuple(devices), profiles) for profiles, devices in groups.items())


def mig_plan(plans: list[NodePlan], demand: Mapping[str, Mapping[str, int]]) -> list[NodePlan]:
    """Carve the MIG instances of units that have no GPU reservation (granted before the
    placement engine booked them; ``demand``: GPU model → profile → count) on the MIG nodes whose
    layout was neither pinned nor booked: first fit, largest instances first,
    nodes and GPUs in name/index order, so the same demand always gives the same layout.
    Demand that fits nowhere is left out (admission and placement keep it from happening)."""
    remaining: dict[str, Counter[str]] = {model: Counter(profiles) for model, profiles in demand.items()}
    planned = []
    for plan in sorted(plans, key=lambda plan: plan.name):
        if plan.sharing != "mig" or plan.mig_groups or plan.whole_gpus or plan.gpu_model not in remaining:
            planned.append(plan)
            continue
        geometry = _geometry(plan)
        wanted = remaining[plan.gpu_model]
        unknown = sorted(name for name in wanted if name not in geometry.by_name)
        if unknown:
            raise RenderError(f"node {plan.name}: {geometry.name} has no MIG profile {', '.join(unknown)}")
        per_gpu: list[Counter[str]] = [Counter() for _ in range(plan.gpu_count)]
        order = sorted(wanted, key=lambda name: (-geometry.profile(name).memory_slices, name))
        for name in order:
            for _ in range(wanted[name]):
                for layout in per_gpu:
                    trial = layout + Counter({name: 1})
                    if mig_fits(geometry, trial):
                        layout[name] += 1
                        wanted[name] -= 1
                        break
        groups: dict[tuple[tuple[str, int], ...], list[int]] = defaultdict(list)
        for index, layout in enumerate(per_gpu):
            if layout:
                groups[tuple(sorted(layout.items()))].append(index)
        chosen = tuple(MigGroup(tuple(devices), profiles) for profiles, devices in groups.items())
        planned.append(dataclasses.replace(plan, mig_groups=chosen))
    return planned
