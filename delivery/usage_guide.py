"""How to use a GPU allocation on its cluster: the "use it" panel and
``GET /api/v1/allocations/{id}/usage-guide/``. Pure functions: no I/O, no database.

What a researcher needs to run work under a grant, derived from what the portal pushes
(``delivery.rendering``, ``delivery.container_limits``, ``delivery.pinning``, ``delivery.volcano``):

* the namespace (the project's slug) and the exact resource names and quantities: per pod (what one
  pod may ask for: one unit of a shared GPU, at most the units booked on one node otherwise) and in
  total (the ``requests.<resource>`` of the project quota this grant contributes);
* the priority class to set: every other class is held at zero GPUs by the quota
  ``gpuportal-priority-other``, so a pod without it is refused;
* a Pod and a Job example for the flavor, with the per-container CPU and memory of one unit (the
  LimitRange's ``max`` allows it, the quota's ``limits.cpu`` / ``limits.memory`` count it);
* how to reach the namespace with kubectl: the cluster's OIDC settings (kubelogin as a kubectl
  exec plugin) where the platform admins configured them, else whom to ask.

Nothing here requires the pool ``nodeSelector`` (pinning) or Volcano's queue: admission policies
on the cluster add them (docs/sharing.md). docs/using.md describes the output.
"""

from __future__ import annotations

import base64
import math
import shlex
from dataclasses import dataclass, field
from typing import Any

import yaml

from delivery.container_limits import ContainerLimits
from delivery.volcano import SCHEDULER_NAME, VGPU_CORES, VGPU_MEMORY, VGPU_NUMBER

EXAMPLE_IMAGE = "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04"
"""A public CUDA base image whose ``nvidia-smi`` shows the GPUs (or slice) a pod received."""
HAMI_MEMORY = "nvidia.com/gpumem"
HAMI_CORES = "nvidia.com/gpucores"
HAMI_COUNT = "nvidia.com/gpu"

EXCLUSIVE, MIG, MPS, TIMESLICE, VGPU, VOLCANO_VGPU = "exclusive", "mig", "mps", "timeslice", "vgpu", "volcano-vgpu"
# Modes whose pods get one unit each: the device plugin refuses more than one shared replica per
# container under MPS (failRequestsGreaterThanOne) and gives no more GPU for a second time-sliced
# replica; a HAMi or Volcano vGPU of more than one unit would have to span GPUs.
ONE_PER_POD = frozenset({MPS, TIMESLICE, VGPU, VOLCANO_VGPU})

READY, PREVIEW = "ready", "preview"

KUBELOGIN_URL = "https://github.com/int128/kubelogin"


@dataclass(frozen=True)
class ClusterAccess:
    """How users reach a cluster's API server (``Cluster.user_*``); empty fields: not configured."""

    api_server_url: str = ""
    ca_certificate: str = ""  # PEM
    oidc_issuer_url: str = ""
    oidc_client_id: str = ""

    @property
    def has_oidc(self) -> bool:
        return bool(self.api_server_url and self.oidc_issuer_url and self.oidc_client_id)


@dataclass(frozen=True)
class GuideInput:
    """One allocation as the cluster sees it. ``node_units``: how many units the grant has booked
    on each node it uses (empty: none booked yet); ``kube_role``: the Kubernetes role the viewer holds
    in the namespace (``edit`` for project members, ``view`` for its department's admins and
    auditors, empty for nobody)."""

    allocation_id: int
    state: str
    cluster: str
    namespace: str
    flavor: str
    sharing_mode: str
    resource_name: str
    quantity: int
    priority_class: str
    memory_mib: int
    compute_percent: int
    cpu_millicores_per_unit: int
    memory_mib_per_unit: int
    limits: ContainerLimits
    mig_profile: str = ""
    node_units: tuple[int, ...] = ()
    use_hami: bool = False
    pinned: bool = False
    preview: bool = False
    kube_user: str = ""
    kube_role: str = ""
    access: ClusterAccess = field(default_factory=ClusterAccess)


@dataclass(frozen=True)
class ResourceLine:
    name: str
    per_pod: int
    total: int


@dataclass(frozen=True)
class UsageGuide:
    status: str
    allocation_id: int
    state: str
    cluster: str
    namespace: str
    flavor: str
    sharing_mode: str
    priority_class: str
    resources: tuple[ResourceLine, ...]
    container_limits: dict[str, dict[str, str]]
    examples: dict[str, str]
    kubeconfig: dict[str, str]
    notes: tuple[str, ...]

    def as_dict(self) -> dict[str, Any]:
        return {
            "status": self.status, "allocation_id": self.allocation_id, "state": self.state, "cluster": self.cluster,
            "namespace": self.namespace, "flavor": self.flavor, "sharing_mode": self.sharing_mode,
            "priority_class": self.priority_class,
            "resources": [{"name": line.name, "per_pod": line.per_pod, "total": line.total} for line in self.resources],
            "container_limits": self.container_limits, "examples": dict(self.examples),
            "kubeconfig": dict(self.kubeconfig), "notes": list(self.notes),
        }


def units_per_pod(guide: GuideInput) -> int:
    """The most units one pod can use: one for shared modes, else what one node holds of the grant."""
    if guide.sharing_mode in ONE_PER_POD:
        return 1
    if guide.node_units:
        return min(max(guide.node_units), guide.quantity)
    return guide.quantity


def units_per_job_pod(guide: GuideInput) -> int:
    """The size of the Job example's pods: the largest size that divides every node's share of the
    grant, so that the Job's pods together use all of it (8 + 4 units on two nodes: 3 pods of 4)."""
    if guide.sharing_mode in ONE_PER_POD:
        return 1
    if guide.node_units and sum(guide.node_units) == guide.quantity:
        return math.gcd(*guide.node_units)
    return units_per_pod(guide)


def resource_lines(guide: GuideInput) -> tuple[ResourceLine, ...]:
    per_pod, total = units_per_pod(guide), guide.quantity
    if guide.sharing_mode == VOLCANO_VGPU:
        return (
            ResourceLine(VGPU_NUMBER, per_pod, total),
            ResourceLine(VGPU_MEMORY, guide.memory_mib, guide.memory_mib * total),
            ResourceLine(VGPU_CORES, guide.compute_percent, guide.compute_percent * total),
        )
    if guide.sharing_mode == VGPU:
        return (
            ResourceLine(HAMI_COUNT, per_pod, total),
            ResourceLine(HAMI_MEMORY, guide.memory_mib, guide.memory_mib * total),
            ResourceLine(HAMI_CORES, guide.compute_percent, guide.compute_percent * total),
        )
    return (ResourceLine(guide.resource_name, per_pod, total),)


def pod_limits(guide: GuideInput, units: int | None = None) -> dict[str, str]:
    """The limits of the example's one container: its GPU resources (requests default to them;
    extended resources cannot be overcommitted), ``units`` of them where a pod may hold several,
    and one unit's CPU and memory."""
    limits = {line.name: str(line.per_pod) for line in resource_lines(guide)}
    if units is not None and guide.sharing_mode not in ONE_PER_POD:
        limits[guide.resource_name] = str(units)
    limits["cpu"] = cpu_quantity(guide.cpu_millicores_per_unit)
    limits["memory"] = memory_quantity(guide.memory_mib_per_unit)
    return limits


def cpu_quantity(millicores: int) -> str:
    """``8000`` → ``"8"``, ``1500`` → ``"1500m"``."""
    return str(millicores // 1000) if millicores % 1000 == 0 else f"{millicores}m"


def memory_quantity(mib: int) -> str:
    """``65536`` → ``"64Gi"``, ``1536`` → ``"1536Mi"``."""
    return f"{mib // 1024}Gi" if mib % 1024 == 0 else f"{mib}Mi"


def _pod_spec(guide: GuideInput, *, restart: str, units: int | None = None) -> dict[str, Any]:
    limits = pod_limits(guide, units)
    spec: dict[str, Any] = {"priorityClassName": guide.priority_class, "restartPolicy": restart}
    if guide.sharing_mode == VOLCANO_VGPU:
        spec["schedulerName"] = SCHEDULER_NAME
    spec["containers"] = [{
        "name": "main",
        "image": EXAMPLE_IMAGE,
        "command": ["nvidia-smi"],
        "resources": {
            "requests": {"cpu": limits["cpu"], "memory": limits["memory"]},
            "limits": limits,
        },
    }]
    return spec


def _name(guide: GuideInput, kind: str) -> str:
    return f"gpu-{kind}-{guide.allocation_id}"


def pod_example(guide: GuideInput) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": _name(guide, "pod"), "namespace": guide.namespace},
        "spec": _pod_spec(guide, restart="Never"),
    }


def job_example(guide: GuideInput) -> dict[str, Any]:
    """A Job running at once as many pods as together use the whole grant."""
    size = units_per_job_pod(guide)
    pods = max(1, guide.quantity // size)
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": _name(guide, "job"), "namespace": guide.namespace},
        "spec": {
            "parallelism": pods,
            "completions": pods,
            "backoffLimit": 0,
            "template": {"spec": _pod_spec(guide, restart="Never", units=size)},
        },
    }


def as_yaml(obj: dict[str, Any]) -> str:
    return yaml.safe_dump(obj, sort_keys=False, default_flow_style=False)


def kubeconfig_help(guide: GuideInput) -> dict[str, str]:
    """``method`` ``oidc`` (a kubectl snippet using kubelogin) or ``ask-platform-team``."""
    access, context = guide.access, f"{guide.cluster}-{guide.namespace}"
    who = f"Kubernetes knows you as {guide.kube_user}" if guide.kube_user else ""
    role = {"edit": "you may create and delete workloads (ClusterRole edit)",
            "view": "you may read it (ClusterRole view)"}.get(guide.kube_role, "you hold no role in it")
    bound = f"{who}; in namespace {guide.namespace} {role}." if who else ""
    if not access.has_oidc:
        return {
            "method": "ask-platform-team",
            "instructions": (
                f"This cluster has no sign-in settings in the portal. Ask the platform team for a kubeconfig for "
                f"cluster {guide.cluster}, namespace {guide.namespace}. {bound}"
            ).strip(),
            "snippet": "",
        }
    user = f"{guide.cluster}-oidc"
    lines = [f"kubectl config set-cluster {q(guide.cluster)} --server={q(access.api_server_url)}"]
    if access.ca_certificate:
        data = base64.b64encode(access.ca_certificate.strip().encode() + b"\n").decode()
        lines.append(f"kubectl config set clusters.{q(guide.cluster)}.certificate-authority-data {data}")
    lines.append(
        f"kubectl config set-credentials {q(user)} \\\n"
        "  --exec-api-version=client.authentication.k8s.io/v1 \\\n"
        "  --exec-interactive-mode=Never \\\n"
        "  --exec-command=kubectl \\\n"
        "  --exec-arg=oidc-login \\\n"
        "  --exec-arg=get-token \\\n"
        f"  --exec-arg={q('--oidc-issuer-url=' + access.oidc_issuer_url)} \\\n"
        f"  --exec-arg={q('--oidc-client-id=' + access.oidc_client_id)}"
    )
    lines.append(f"kubectl config set-context {q(context)} --cluster={q(guide.cluster)} --user={q(user)} "
                 f"--namespace={q(guide.namespace)}")
    lines.append(f"kubectl config use-context {q(context)}")
    return {
        "method": "oidc",
        "instructions": (
            f"Install kubelogin (the kubectl oidc-login plugin, {KUBELOGIN_URL}), run these commands once, "
            f"then any kubectl command opens the organisation's sign-in in your browser. {bound}"
        ).strip(),
        "snippet": "\n".join(lines) + "\n",
    }


def q(text: str) -> str:
    return shlex.quote(text)


def _notes(guide: GuideInput) -> list[str]:
    notes = []
    if guide.preview:
        notes.append(f"Allocation #{guide.allocation_id} is {guide.state}: this is what it will be once it is active; "
                     "the namespace may not exist yet.")
    if guide.state == "reclaiming":
        notes.append("This grant is being reclaimed: finish or checkpoint your work before its deadline.")
    notes.append(
        f"Set priorityClassName: {guide.priority_class}. Pods of any other class (or none) get no GPU in this namespace."
    )
    per_pod = units_per_pod(guide)
    if guide.sharing_mode in (MPS, TIMESLICE):
        notes.append(f"One {guide.resource_name} per container: the device plugin refuses more than one shared replica.")
    if guide.sharing_mode == TIMESLICE:
        notes.append("Time-sliced replicas have no memory isolation: keep your process's GPU memory in check.")
    if guide.sharing_mode == MPS:
        notes.append(f"The MPS daemon caps each replica's GPU memory; this flavor's units have {guide.memory_mib} MiB.")
    if guide.sharing_mode == MIG:
        notes.append(f"Each {guide.resource_name} is one MIG instance ({guide.mig_profile}).")
    if guide.sharing_mode == VGPU:
        notes.append(f"HAMi sets the scheduler and holds each container to {guide.memory_mib} MiB of GPU memory "
                     f"({HAMI_MEMORY}) and {guide.compute_percent} % of the GPU's cores ({HAMI_CORES}).")
    if guide.sharing_mode == VOLCANO_VGPU:
        notes.append("The cluster fills in your department's Volcano queue and schedulerName: volcano if you leave them out.")
    if guide.use_hami and guide.sharing_mode == EXCLUSIVE:
        notes.append(f"HAMi schedules {HAMI_COUNT} on this cluster: each GPU is given whole ({HAMI_CORES}: 100).")
    if per_pod < guide.quantity and guide.sharing_mode not in ONE_PER_POD:
        size = units_per_job_pod(guide)
        notes.append(f"At most {per_pod} units are booked on one node: run several pods to use all {guide.quantity} "
                     f"(the Job example runs {guide.quantity // size} pods of {size}).")
    if guide.pinned:
        notes.append("Pods here run only on the nodes this project booked: the cluster adds the node selector, "
                     "do not set nodeName or nodeSelector yourself.")
    notes.append("Apply with: kubectl apply -f pod.yaml (or job.yaml). The Job's pods together use the whole grant: "
                 "what already runs in the namespace counts against the same quota.")
    return notes


def usage_guide(guide: GuideInput) -> UsageGuide:
    """The panel's content for one allocation."""
    limits = guide.limits
    return UsageGuide(
        status=PREVIEW if guide.preview else READY,
        allocation_id=guide.allocation_id,
        state=guide.state,
        cluster=guide.cluster,
        namespace=guide.namespace,
        flavor=guide.flavor,
        sharing_mode=guide.sharing_mode,
        priority_class=guide.priority_class,
        resources=resource_lines(guide),
        container_limits={"default_request": dict(limits.default_request), "default": dict(limits.default),
                          "max": dict(limits.max)},
        examples={"pod": as_yaml(pod_example(guide)), "job": as_yaml(job_example(guide))},
        kubeconfig=kubeconfig_help(guide),
        notes=tuple(_notes(guide)),
    )
