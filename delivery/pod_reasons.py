"""Why a pod waits on its cluster: one closed list of codes (docs/pending.md, "Pending pods").

Pure functions, no Django, no I/O: the input is what the driver read in a tenant namespace (the
pods Pending longer than a threshold, their PodScheduled condition and the events about them, and
the controllers whose pods the API server refused) and what the portal granted the namespace; the
output says which resource, which node constraint, which of the portal's objects (the namespace's
ResourceQuota or LimitRange, a booking's pin, a taint) is in the way, and the fix.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

# The portal's own node labels and taints (delivery.pinning, delivery.rendering).
PIN_LABEL_PREFIX = "pool.gpuportal.io/"
PORTAL_KEY_PREFIX = "gpuportal.io/"
MIG_RESOURCE_PREFIX = "nvidia.com/mig-"
MIG_CONFIG_STATE_LABEL = "nvidia.com/mig.config.state"
MIG_PENDING_STATES = frozenset({"pending"})

_QUOTA = re.compile(r"exceeded quota: (?P<quota>[^,]+), requested: (?P<requested>.*?), used: (?P<used>.*?), limited: (?P<limited>[^\s]*)")
_LIMIT_RANGE = re.compile(r"maximum (?P<resource>\S+) usage per (?P<per>Container|Pod) is (?P<max>\S+), but limit is (?P<asked>\S+)")
_INSUFFICIENT = re.compile(r"(\d+) Insufficient (\S+?)[.,]?(?=\s|$)")
_SELECTOR = re.compile(r"(\d+) node\(s\) didn't match Pod's node affinity/selector")
_TAINT = re.compile(r"(\d+) node\(s\) had untolerated taint \{([^}]*)\}")
_DENIED = ("admission webhook", "ValidatingAdmissionPolicy", "denied the request", "denied request")


class PodReasonCode(StrEnum):
    OVER_NAMESPACE_QUOTA = "pod-over-namespace-quota"
    ASKS_MORE_THAN_GRANTED = "pod-asks-more-than-granted"
    NODE_CONSTRAINT = "pod-unschedulable-node-constraint"
    NO_ROOM = "pod-unschedulable-no-room"
    MIG_RECONFIGURATION = "pod-waiting-mig-reconfiguration"
    ADMISSION_DENIED = "pod-admission-denied"
    UNKNOWN = "pod-pending-unknown"


@dataclass(frozen=True)
class PodEvent:
    reason: str
    message: str
    last_seen: str = ""
    count: int = 1


@dataclass(frozen=True)
class PendingWorkload:
    """A pod Pending longer than the threshold (``kind`` Pod), or a controller (Job, ReplicaSet…)
    whose pods the API server refused to create (no pod exists; its events say why)."""

    kind: str
    name: str
    namespace: str
    since: str
    requests: Mapping[str, int] = field(default_factory=dict)  # per pod, summed over its containers
    node_selector: Mapping[str, str] = field(default_factory=dict)
    has_node_affinity: bool = False
    scheduled_reason: str = ""
    scheduled_message: str = ""
    events: tuple[PodEvent, ...] = ()


@dataclass(frozen=True)
class PendingRead:
    """What a driver read in one namespace: the workloads that wait, and the nodes the MIG manager
    is repartitioning (read only when one of them asks for a MIG slice)."""

    workloads: tuple[PendingWorkload, ...]
    mig_pending: tuple[str, ...] = ()


@dataclass(frozen=True)
class PodExplanation:
    kind: str
    name: str
    since: str
    code: PodReasonCode
    text: str
    fix: str
    facts: dict[str, Any]

    def as_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "name": self.name, "since": self.since, "code": self.code.value,
                "text": self.text, "fix": self.fix, "facts": self.facts}


def quantities(text: str) -> dict[str, str]:
    """``a=1,b=2`` (a quota refusal's lists) as a dict; the ``requests.`` prefix dropped."""
    out: dict[str, str] = {}
    for part in text.split(","):
        name, _, value = part.strip().partition("=")
        if name and value:
            out[name.removeprefix("requests.")] = value
    return out


def _number(value: str) -> float:
    try:
        return float(value)
    except ValueError:
        return float("nan")  # cpu "500m", memory "1Gi": compared only when plain numbers


def _chosen_resource(names: list[str], granted: Mapping[str, int]) -> str:
    """The resource a refusal is about: a granted GPU resource first, then any."""
    return next((name for name in names if name in granted), names[0] if names else "")


def _asks_more(workload: PendingWorkload, resource: str, asked: int, grant: int, where: str) -> PodExplanation:
    return _explained(
        workload, PodReasonCode.ASKS_MORE_THAN_GRANTED,
        f"The {workload.kind.lower()} asks {asked} {resource} per pod but the grant is {grant} ({where}).",
        f"Ask for {grant} or fewer per pod, or ask for a resize of the allocation to {asked}.",
        {"resource": resource, "asked": asked, "granted": grant, "in_the_way": where},
    )


def _quota_refusal(workload: PendingWorkload, message: str, granted: Mapping[str, int]) -> PodExplanation | None:
    match = _QUOTA.search(message)
    if match is None:
        return None
    requested, used, limited = (quantities(match[name]) for name in ("requested", "used", "limited"))
    over = [name for name in requested if _number(requested[name]) + _number(used.get(name, "0")) > _number(limited.get(name, "nan"))]
    resource = _chosen_resource(over or list(requested), granted)
    asked, hard = _number(requested.get(resource, "0")), _number(limited.get(resource, "0"))
    quota = match["quota"].strip()
    if asked > hard:
        return _asks_more(workload, resource, int(asked), granted.get(resource, int(hard)), f"ResourceQuota {quota}")
    facts = {"quota": quota, "resource": resource, "requested": requested.get(resource), "used": used.get(resource),
             "hard": limited.get(resource), "in_the_way": f"ResourceQuota {quota}"}
    return _explained(
        workload, PodReasonCode.OVER_NAMESPACE_QUOTA,
        f"The namespace's quota {quota} refuses it: {resource} requested {facts['requested']}, used {facts['used']}, "
        f"hard {facts['hard']}.",
        "Wait for the namespace's other pods to finish (or delete them), or ask for a resize of the allocation.",
        facts,
    )


def _create_refusal(workload: PendingWorkload, message: str, granted: Mapping[str, int]) -> PodExplanation | None:
    quota = _quota_refusal(workload, message, granted)
    if quota is not None:
        return quota
    limit = _LIMIT_RANGE.search(message)
    if limit is not None:
        grant = granted.get(limit["resource"], int(_number(limit["max"])) if limit["max"].isdigit() else 0)
        asked = int(_number(limit["asked"])) if limit["asked"].isdigit() else 0
        return _asks_more(workload, limit["resource"], asked, grant, "the namespace's LimitRange")
    if any(marker in message for marker in _DENIED):
        return _explained(
            workload, PodReasonCode.ADMISSION_DENIED, f"An admission policy refused it: {message}",
            "Change the pod as the message asks (a booked project's pods run only on its booked nodes).",
            {"message": message},
        )
    return None


def _failures(message: str) -> dict[str, Any]:
    """A FailedScheduling message's node counts: insufficient resources, selector misses, taints."""
    return {
        "insufficient": {name.rstrip("."): int(count) for count, name in _INSUFFICIENT.findall(message)},
        "selector_mismatch": sum(int(count) for count in _SELECTOR.findall(message)),
        "taints": {taint.strip(): int(count) for count, taint in _TAINT.findall(message)},
    }


def _constraint(workload: PendingWorkload, failures: dict[str, Any], message: str) -> PodExplanation:
    pins = {key: value for key, value in workload.node_selector.items() if key.startswith(PIN_LABEL_PREFIX)}
    portal_taints = [taint for taint in failures["taints"] if taint.startswith(PORTAL_KEY_PREFIX)]
    if pins:
        in_the_way = "the booking's pin (nodeSelector " + ", ".join(f"{k}={v}" for k, v in sorted(pins.items())) + ")"
    elif failures["selector_mismatch"]:
        selector = ", ".join(f"{k}={v}" for k, v in sorted(workload.node_selector.items()))
        in_the_way = f"the pod's nodeSelector {selector}" if selector else "the pod's node affinity"
    else:
        in_the_way = "the portal's taint " + portal_taints[0] if portal_taints else "a taint the pod does not tolerate"
    insufficient = ", ".join(f"{count} node(s) lack free {name}" for name, count in failures["insufficient"].items())
    return _explained(
        workload, PodReasonCode.NODE_CONSTRAINT,
        f"No node it may run on has room: {in_the_way} keeps it off the other nodes"
        + (f"; {insufficient}" if insufficient else "") + ".",
        "Drop or widen the node selector (or affinity, or add the toleration), or wait for the selected nodes' "
        "GPUs to free up.",
        {"in_the_way": in_the_way, "node_selector": dict(workload.node_selector), **failures, "message": message},
    )


def _scheduling(workload: PendingWorkload, message: str, mig_pending: list[str]) -> PodExplanation:
    if mig_pending and any(name.startswith(MIG_RESOURCE_PREFIX) for name in workload.requests):
        return _explained(
            workload, PodReasonCode.MIG_RECONFIGURATION,
            "It asks for a MIG slice and the node(s) " + ", ".join(mig_pending) + " are being repartitioned.",
            "Wait: the MIG manager relabels the node when the new partitions exist (usually minutes).",
            {"nodes": mig_pending, "message": message},
        )
    if any(marker in message for marker in _DENIED):  # the scheduler's binding refused (the booking's policy)
        return _explained(
            workload, PodReasonCode.ADMISSION_DENIED, f"An admission policy refused its binding to a node: {message}",
            "Run it where the message allows (a booked project's pods run only on its booked nodes).", {"message": message},
        )
    failures = _failures(message)
    if failures["selector_mismatch"] or failures["taints"]:
        return _constraint(workload, failures, message)
    if failures["insufficient"]:
        text = ", ".join(f"{count} node(s) lack free {name}" for name, count in failures["insufficient"].items())
        return _explained(
            workload, PodReasonCode.NO_ROOM, f"No node has room for it now: {text}.",
            "Wait for GPUs to free up, or ask for fewer per pod.", {**failures, "message": message},
        )
    return _unknown(workload, message)


def _unknown(workload: PendingWorkload, message: str) -> PodExplanation:
    return _explained(
        workload, PodReasonCode.UNKNOWN,
        f"It is Pending without a reason the portal recognises{': ' + message if message else ''}.",
        "Look at `kubectl describe` of the pod and its events, or ask the platform team.", {"message": message},
    )


def _explained(workload: PendingWorkload, code: PodReasonCode, text: str, fix: str, facts: dict[str, Any]) -> PodExplanation:
    return PodExplanation(kind=workload.kind, name=workload.name, since=workload.since, code=code, text=text, fix=fix,
                          facts=facts)


def pod_explain(workload: PendingWorkload, *, granted: Mapping[str, int], mig_pending: Sequence[str] = ()) -> PodExplanation:
    """The explanation of one pending pod or refused controller. ``granted``: what the portal's
    grants give the namespace per resource (the sum of its grants on the cluster);
    ``mig_pending``: the nodes whose MIG manager is repartitioning (its state label ``pending``)."""
    for event in reversed(workload.events):  # the newest refusal first
        if event.reason == "FailedCreate":
            refusal = _create_refusal(workload, event.message, granted)
            if refusal is not None:
                return refusal
    for resource, asked in sorted(workload.requests.items()):
        if resource in granted and asked > granted[resource]:
            return _asks_more(workload, resource, asked, granted[resource], "the portal's grants")
    scheduling = [event.message for event in workload.events if event.reason == "FailedScheduling"]
    message = scheduling[-1] if scheduling else workload.scheduled_message
    if message or workload.scheduled_reason == "Unschedulable":
        return _scheduling(workload, message, list(mig_pending))
    return _unknown(workload, "")


def mig_pending_nodes(nodes: list[dict[str, Any]]) -> list[str]:
    """The names of the nodes the MIG manager is repartitioning now."""
    return sorted(
        node["metadata"]["name"] for node in nodes
        if (node["metadata"].get("labels") or {}).get(MIG_CONFIG_STATE_LABEL) in MIG_PENDING_STATES
    )  # fmt: skip
