"""A cluster's cluster-wide objects, each with the hash of what it is rendered from, rendered only
when a push needs it (``delivery.applied`` keeps the hash each object was last applied with).

* A node's partial Node (its config labels, ``delivery.node_configs.render_node_labels``) hashes
  its :class:`NodePlan`: a node whose bookings, sharing and pools did not change is not rendered.
* The device-plugin and mig-parted ConfigMaps hash the distinct inputs their keys are made of
  (``device_plugin_inputs``, ``mig_inputs``): a booking that only moves units between nodes that
  already had a layout of the same shape leaves them unrendered.
* The few other cluster-wide objects (priority classes, the tenant pools' admission policies,
  Volcano's queues and configuration, the alert rules) are small: they are rendered at each push
  and hashed as rendered.

Every hash also covers the source of the modules that render node configurations, so an upgrade
that renders the same inputs differently re-renders and re-applies them once.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from clusters.models import Cluster
from delivery import node_configs, pinning, rendering, selectors
from delivery.alert_rules import render_prometheus_rule
from delivery.alert_settings import alert_thresholds
from delivery.applied import Key
from delivery.drivers import PermanentDriverError
from delivery.node_configs import NodePlan, RenderError, device_plugin_inputs, mig_inputs, mig_plan
from delivery.pinning import render_pool_policies
from delivery.rendering import render_priority_class, render_queue
from delivery.volcano import render_volcano_objects


@dataclass(frozen=True)
class DesiredObject:
    """One cluster-wide object: its key, the hash of its inputs, and how to render it."""

    key: Key
    digest: str
    render: Callable[[], dict[str, Any]]


@functools.cache
def _code_digest() -> str:
    sources = (node_configs, pinning, rendering)
    return hashlib.sha256(b"".join(Path(str(module.__file__)).read_bytes() for module in sources)).hexdigest()


def _digest(*parts: object) -> str:
    return hashlib.sha256(repr((_code_digest(), *parts)).encode()).hexdigest()


def object_key(obj: Mapping[str, Any]) -> Key:
    metadata = obj["metadata"]
    return str(obj["kind"]), str(metadata.get("namespace", "")), str(metadata["name"])


def _as_rendered(obj: dict[str, Any]) -> DesiredObject:
    digest = hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()
    return DesiredObject(key=object_key(obj), digest=digest, render=lambda: obj)


def node_objects_desired(plans: list[NodePlan], *, namespace: str) -> list[DesiredObject]:
    """Both ConfigMaps and one partial Node per node (``render_node_objects``), unrendered."""
    if not plans:
        return []
    ordered = sorted(plans, key=lambda plan: plan.name)
    plugin = sorted({device_plugin_inputs(plan) for plan in ordered}, key=repr)
    mig = sorted({mig_inputs(plan) for plan in ordered if plan.sharing == "mig"}, key=repr)
    configmaps = [
        DesiredObject(
            key=("ConfigMap", namespace, node_configs.DEVICE_PLUGIN_CONFIGMAP), digest=_digest(namespace, plugin),
            render=lambda: node_configs.render_device_plugin_configmap(ordered, namespace=namespace),
        ),
        DesiredObject(
            key=("ConfigMap", namespace, node_configs.MIG_PARTED_CONFIGMAP), digest=_digest(namespace, mig),
            render=lambda: node_configs.render_mig_parted_configmap(ordered, namespace=namespace),
        ),
    ]
    return configmaps + [
        DesiredObject(key=("Node", "", plan.name), digest=_digest(plan), render=functools.partial(_node_labels, plan))
        for plan in ordered
    ]


def _node_labels(plan: NodePlan) -> dict[str, Any]:
    return node_configs.render_node_labels(plan)


def shared_objects_desired(*, cluster: Cluster) -> list[DesiredObject]:
    """Everything cluster-wide the cluster should hold (``delivery.services.cluster_scope``)."""
    objects = [render_priority_class(spec) for spec in selectors.priority_class_specs()]
    if cluster.pin_bookings:
        objects += render_pool_policies(hami=cluster.use_hami)
    if cluster.use_volcano:
        objects += [queue for queue in map(render_queue, selectors.department_queues(cluster=cluster)) if queue]
        objects += render_volcano_objects(selectors.volcano_vgpu_policies())
    if cluster.prometheus_rule_namespace:
        labels = {str(key): str(value) for key, value in (cluster.prometheus_rule_labels or {}).items()}
        objects.append(
            render_prometheus_rule(alert_thresholds(), namespace=cluster.prometheus_rule_namespace, labels=labels)
        )
    try:
        plans = mig_plan(selectors.node_plans(cluster=cluster), selectors.mig_demand(cluster=cluster))
    except RenderError as error:
        raise PermanentDriverError(f"cluster {cluster.name}: {error}") from None
    return [_as_rendered(obj) for obj in objects] + node_objects_desired(plans, namespace=cluster.gpu_operator_namespace)


def objects_render(cluster: Cluster, desired: Iterable[DesiredObject]) -> list[dict[str, Any]]:
    """Render ``desired``; a configuration the real components would reject fails the push for good."""
    try:
        return [item.render() for item in desired]
    except RenderError as error:
        raise PermanentDriverError(f"cluster {cluster.name}: {error}") from None


@dataclass(frozen=True)
class SharedDelta:
    """What a push of the cluster-wide objects must do, given what was last applied.

    ``render``: the objects to render and compare with the cluster; ``kept``: the keys of objects
    whose inputs hash as last applied (neither rendered nor pruned); ``prune``: whether the push
    reads the cluster's cluster-wide objects to prune those no longer wanted (only when an object
    other than a Node changed or one that was applied is no longer wanted: otherwise the push
    touches the changed Nodes alone); ``stale``: keys applied before and no longer wanted."""

    render: list[DesiredObject]
    kept: frozenset[Key]
    prune: bool
    stale: frozenset[Key]

    @property
    def is_empty(self) -> bool:
        return not self.render and not self.stale


def shared_delta(desired: list[DesiredObject], applied: Mapping[Key, str]) -> SharedDelta:
    changed = [item for item in desired if applied.get(item.key) != item.digest]
    stale = frozenset(applied) - {item.key for item in desired}
    prune = bool(stale) or any(item.key[0] != "Node" for item in changed)
    if prune:  # every object but the unchanged Nodes: the prune must know them all
        render = [item for item in desired if item.key[0] != "Node" or applied.get(item.key) != item.digest]
    else:
        render = changed
    rendered = {item.key for item in render}
    return SharedDelta(render=render, kept=frozenset(item.key for item in desired if item.key not in rendered),
                       prune=prune, stale=stale)
