"""Pods and events as the Kubernetes API returns them (core/v1 lists), one namespace per case.
The messages are the API server's, the scheduler's and the controllers' own wording (as
tests/kube/test_kwok_pods.py sees them on the test cluster)."""

from __future__ import annotations

from typing import Any

NS = "nlp-bert"
OLD = "2026-12-05T10:00:00Z"
RECENT = "2026-12-05T10:59:30Z"


def pod(name: str, *, gpus: int = 1, resource: str = "nvidia.com/gpu", selector: dict[str, str] | None = None,
        message: str = "", created: str = OLD) -> dict[str, Any]:
    conditions = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message}] if message else []
    return {
        "metadata": {"name": name, "namespace": NS, "creationTimestamp": created},
        "spec": {"nodeSelector": selector or {}, "containers": [
            {"name": "main", "resources": {"limits": {resource: str(gpus)}, "requests": {resource: str(gpus)}}}]},
        "status": {"phase": "Pending", "conditions": conditions},
    }  # fmt: skip


def event(kind: str, name: str, reason: str, message: str, *, first: str = OLD, last: str = RECENT) -> dict[str, Any]:
    return {
        "involvedObject": {"kind": kind, "name": name, "namespace": NS}, "reason": reason, "message": message,
        "type": "Warning", "firstTimestamp": first, "lastTimestamp": last, "count": 3,
    }  # fmt: skip


QUOTA_REFUSAL = (
    'Error creating: pods "train-x7k2p" is forbidden: exceeded quota: gpuportal-gpu-quota, requested: '
    "limits.cpu=8,requests.nvidia.com/gpu=1, used: limits.cpu=8,requests.nvidia.com/gpu=1, limited: "
    "limits.cpu=16,requests.nvidia.com/gpu=1"
)
TOO_BIG_REFUSAL = (
    'Error creating: pods "big-9fj2q" is forbidden: exceeded quota: gpuportal-gpu-quota, requested: '
    "requests.nvidia.com/gpu=2, used: requests.nvidia.com/gpu=0, limited: requests.nvidia.com/gpu=1"
)
LIMIT_RANGE_REFUSAL = (
    'Error creating: pods "wide-2kq9d" is forbidden: maximum nvidia.com/gpu usage per Container is 1, but limit is 2'
)
POLICY_REFUSAL = (
    'Error creating: pods "pinned-5c7x" is forbidden: ValidatingAdmissionPolicy \'gpuportal-pinning\' with binding '
    "'gpuportal-pinning' denied request: this project's pods may run only on its booked nodes: a100-0"
)
PINNED_AWAY = (
    "0/5 nodes are available: 1 Insufficient nvidia.com/gpu, 4 node(s) didn't match Pod's node affinity/selector. "
    "preemption: 0/5 nodes are available: 1 No preemption victims found for incoming pod, 4 Preemption is not "
    "helpful for scheduling."
)
NO_ROOM = "0/2 nodes are available: 2 Insufficient nvidia.com/gpu. preemption: 0/2 nodes are available: 2 No preemption victims found for incoming pod."
TAINTED = "0/3 nodes are available: 3 node(s) had untolerated taint {gpuportal.io/mps-tenant: vision}. preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling."
MIG_WAIT = "0/1 nodes are available: 1 Insufficient nvidia.com/mig-1g.10gb. preemption: 0/1 nodes are available: 1 No preemption victims found for incoming pod."


def mig_node(state: str) -> dict[str, Any]:
    return {"metadata": {"name": "a100-0", "labels": {"nvidia.com/mig.config.state": state}}}
