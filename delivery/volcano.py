"""What a cluster running Volcano needs beyond its Queues. Pure functions: no I/O, no database.

* Volcano vGPU grants (``SharingMode.VOLCANO_VGPU``): a unit is one ``volcano.sh/vgpu-number``
  with the flavor's ``memory_mib`` as ``volcano.sh/vgpu-memory`` and its ``compute_percent`` as
  ``volcano.sh/vgpu-cores`` (gpu-sharing-formats.md §4). :func:`vgpu_unit_resources` names the
  memory and cores of one unit; the project quota gets ``requests.`` keys for them and the
  department's Queue carries them in ``capability`` / ``deserved`` / ``guarantee``.
* The volcano-scheduler configuration (:func:`render_scheduler_configmap`): the ConfigMap the
  Volcano chart mounts into the scheduler, ``volcano-scheduler-configmap`` in ``volcano-system``
  (:data:`VOLCANO_NAMESPACE`), key ``volcano-scheduler.conf``; :func:`scheduler_conf_violations`
  refuses what Volcano itself would refuse, in its own words.
* Namespaces bound to their department's queue (:func:`render_queue_admission_policy`): a
  MutatingAdmissionPolicy and its binding that name the queue on every pod of a portal namespace
  and send pods asking for a Volcano resource to the Volcano scheduler.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import yaml

from delivery.rendering import DEPARTMENT_LABEL, MANAGED_BY_LABEL, MANAGED_BY_VALUE, QUEUE_PREFIX, cluster_labels

VOLCANO_NAMESPACE = "volcano-system"
"""Where Volcano runs (the chart's default release namespace): the scheduler's ConfigMap goes there."""
SCHEDULER_CONFIGMAP = "volcano-scheduler-configmap"
SCHEDULER_CONF_KEY = "volcano-scheduler.conf"
SCHEDULER_NAME = "volcano"
QUEUE_ANNOTATION = "scheduling.volcano.sh/queue-name"
VGPU_NUMBER = "volcano.sh/vgpu-number"
VGPU_MEMORY = "volcano.sh/vgpu-memory"
VGPU_CORES = "volcano.sh/vgpu-cores"
QUEUE_POLICY = "gpuportal-volcano-queue"
ADMISSION_API = "admissionregistration.k8s.io/v1"

BINPACK, SPREAD = "binpack", "spread"
# Volcano's capacity-plugin setup (docs/user-guide/how_to_use_capacity_plugin.md): the Queues the
# portal renders carry ``deserved`` and ``guarantee``, which the capacity plugin reads (proportion
# would derive deserved from the weight instead) and the reclaim action restores.
ACTIONS = ("enqueue", "allocate", "backfill", "reclaim")
KNOWN_ACTIONS = frozenset({"reclaim", "allocate", "backfill", "preempt", "gangpreempt", "gangreclaim", "enqueue", "shuffle"})
"""``pkg/scheduler/actions/factory.go``: every other action name fails the scheduler's start."""
DEVICESHARE = "deviceshare"
VGPU_ENABLE = "deviceshare.VGPUEnable"
SCHEDULE_POLICY = "deviceshare.SchedulePolicy"
GPU_SHARING_ENABLE = "deviceshare.GPUSharingEnable"
GPU_NUMBER_ENABLE = "deviceshare.GPUNumberEnable"


def vgpu_unit_resources(*, memory_mib: int, cores: int) -> tuple[tuple[str, int], ...]:
    """One Volcano vGPU unit's memory (MiB) and cores (% of a GPU), beside its one vgpu-number."""
    return (VGPU_MEMORY, memory_mib), (VGPU_CORES, cores)


def schedule_policy(flavor_policies: Iterable[str]) -> str:
    """``deviceshare.SchedulePolicy`` is one setting for the whole scheduler: ``spread`` only when
    every active Volcano vGPU flavor asks for spread, else ``binpack`` (Volcano's default, which
    keeps whole GPUs free; a binpack flavor's units would otherwise be scattered over every card)."""
    policies = set(flavor_policies)
    return SPREAD if policies == {SPREAD} else BINPACK


def scheduler_conf(flavor_policies: Iterable[str]) -> dict[str, Any]:
    """The scheduler configuration; ``flavor_policies``: the placement policy of each active
    Volcano vGPU flavor. Without any, the deviceshare plugin is left out (nothing to share)."""
    policies = list(flavor_policies)
    second: list[dict[str, Any]] = [
        {"name": "drf", "enablePreemptable": False},
        {"name": "predicates"},
        {"name": "capacity"},
        {"name": "nodeorder"},
        {"name": "binpack"},
    ]
    if policies:
        second.append({
            "name": DEVICESHARE,
            "arguments": {VGPU_ENABLE: True, SCHEDULE_POLICY: schedule_policy(policies)},
        })
    return {
        "actions": ", ".join(ACTIONS),
        "tiers": [
            {"plugins": [{"name": "priority"}, {"name": "gang", "enablePreemptable": False}, {"name": "conformance"}]},
            {"plugins": second},
        ],
    }


def render_scheduler_configmap(flavor_policies: Iterable[str], *, namespace: str = VOLCANO_NAMESPACE) -> dict[str, Any]:
    text = yaml.safe_dump(scheduler_conf(flavor_policies), sort_keys=False, default_flow_style=False)
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": SCHEDULER_CONFIGMAP, "namespace": namespace, "labels": cluster_labels()},
        "data": {SCHEDULER_CONF_KEY: text},
    }


def _flag(arguments: dict[str, Any], name: str) -> bool:
    return arguments.get(name) is True  # Volcano's Arguments.GetBool takes a YAML boolean only


def scheduler_conf_violations(text: str) -> list[str]:
    """What stops the Volcano scheduler with this configuration, in its words: the loader's errors
    (``pkg/scheduler/util.go`` ``UnmarshalSchedulerConf``), the deviceshare plugin's fatal
    combinations (``pkg/scheduler/plugins/deviceshare/deviceshare.go``) and the capacity guide's
    conflict; plus an unknown ``deviceshare.SchedulePolicy`` (which Volcano scores as neither)."""
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as error:
        return [str(error)]
    if not isinstance(document, dict):
        return ["the configuration is not a YAML mapping"]
    problems = [
        f"failed to find Action {name}"
        for name in str(document.get("actions", "")).split(",")
        if name.strip() not in KNOWN_ACTIONS
    ]
    plugins = [plugin for tier in document.get("tiers") or [] for plugin in (tier or {}).get("plugins") or []]
    names = {str(plugin.get("name")) for plugin in plugins}
    hierarchical_drf = any(plugin.get("name") == "drf" and plugin.get("enableHierarchy") is True for plugin in plugins)
    if hierarchical_drf and "proportion" in names:
        problems.append("proportion and drf with hierarchy enabled conflicts")
    if {"capacity", "proportion"} <= names:
        problems.append("capacity and proportion plugin are in conflict, the two plugins cannot be used together")
    for plugin in plugins:
        if plugin.get("name") != DEVICESHARE:
            continue
        arguments = plugin.get("arguments") or {}
        sharing, number = _flag(arguments, GPU_SHARING_ENABLE), _flag(arguments, GPU_NUMBER_ENABLE)
        if sharing and number:
            problems.append("can not define true in both gpu sharing and gpu number")
        if (sharing or number) and _flag(arguments, VGPU_ENABLE):
            problems.append("gpu-share and vgpu can't be used together")
        policy = arguments.get(SCHEDULE_POLICY)
        if policy is not None and policy not in (BINPACK, SPREAD):
            problems.append(f"{SCHEDULE_POLICY} must be {BINPACK} or {SPREAD}, got {policy!r}")
    return problems


# --------------------------------------------------------------------------- queue admission

_ASKS = 'has(c.resources) && ((has(c.resources.limits) && c.resources.limits.exists(k, k.startsWith("volcano.sh/")))' \
    ' || (has(c.resources.requests) && c.resources.requests.exists(k, k.startsWith("volcano.sh/"))))'
# Pod defaulting runs before admission: a pod that names no scheduler has "default-scheduler".
_DEFAULT_SCHEDULER = '(!has(object.spec.schedulerName) || object.spec.schedulerName == "default-scheduler")'


def render_queue_admission_policy() -> list[dict[str, Any]]:
    """A MutatingAdmissionPolicy and its binding for pods created in namespaces the portal manages
    (label ``app.kubernetes.io/managed-by=gpuportal`` and a ``gpuportal.io/department``):

    * the annotation ``scheduling.volcano.sh/queue-name: gpuportal-<department>``, unless the pod
      names a queue already (its own choice is kept; Volcano's Queue and the project quota still
      bound what it gets);
    * ``schedulerName: volcano`` only when a container asks for a ``volcano.sh/`` resource and the
      pod names no scheduler of its own: a Volcano vGPU cannot be bound by another scheduler, while
      whole GPUs, MIG and MPS units are served by the default scheduler and HAMi's units by HAMi's
      (whose webhook leaves a pod alone once it names another scheduler)."""
    policy = {
        "apiVersion": ADMISSION_API,
        "kind": "MutatingAdmissionPolicy",
        "metadata": {"name": QUEUE_POLICY, "labels": cluster_labels()},
        "spec": {
            "failurePolicy": "Fail",
            "reinvocationPolicy": "IfNeeded",
            "matchConstraints": {
                "resourceRules": [
                    {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}
                ],
            },
            "variables": [
                {"name": "queue", "expression": f'"{QUEUE_PREFIX}" + namespaceObject.metadata.labels["{DEPARTMENT_LABEL}"]'},
                {"name": "namesQueue",
                 "expression": f'has(object.metadata.annotations) && "{QUEUE_ANNOTATION}" in object.metadata.annotations'},
                {"name": "asksVolcano",
                 "expression": f"object.spec.containers.exists(c, {_ASKS}) || (has(object.spec.initContainers) && "
                               f"object.spec.initContainers.exists(c, {_ASKS}))"},
            ],
            "mutations": [
                {"patchType": "ApplyConfiguration", "applyConfiguration": {"expression": (
                    f'variables.namesQueue ? Object{{}} : Object{{metadata: Object.metadata{{annotations: '
                    f'{{"{QUEUE_ANNOTATION}": variables.queue}}}}}}'
                )}},
                {"patchType": "ApplyConfiguration", "applyConfiguration": {"expression": (
                    f'variables.asksVolcano && {_DEFAULT_SCHEDULER} ? '
                    f'Object{{spec: Object.spec{{schedulerName: "{SCHEDULER_NAME}"}}}} : Object{{}}'
                )}},
            ],
        },
    }
    binding = {
        "apiVersion": ADMISSION_API,
        "kind": "MutatingAdmissionPolicyBinding",
        "metadata": {"name": QUEUE_POLICY, "labels": cluster_labels()},
        "spec": {
            "policyName": QUEUE_POLICY,
            "matchResources": {
                "namespaceSelector": {
                    "matchLabels": {MANAGED_BY_LABEL: MANAGED_BY_VALUE},
                    "matchExpressions": [{"key": DEPARTMENT_LABEL, "operator": "Exists"}],
                },
            },
        },
    }
    return [policy, binding]


def render_volcano_objects(flavor_policies: Iterable[str], *, namespace: str = VOLCANO_NAMESPACE) -> list[dict[str, Any]]:
    """The cluster-wide objects a Volcano cluster gets beside its Queues."""
    return [render_scheduler_configmap(flavor_policies, namespace=namespace), *render_queue_admission_policy()]


def is_scheduler_config(obj: dict[str, Any], *, namespace: str = VOLCANO_NAMESPACE) -> bool:
    metadata = obj.get("metadata", {})
    return bool(obj.get("kind") == "ConfigMap" and metadata.get("namespace") == namespace
                and metadata.get("name") == SCHEDULER_CONFIGMAP)
