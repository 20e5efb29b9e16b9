"""Bookings the cluster honours: a project's pods run only on the nodes (and, under HAMi, the
GPUs) its allocations booked. Pure functions: no I/O, no database.

On by default; ``Cluster.pin_bookings`` turns it off for a cluster that cannot serve
MutatingAdmissionPolicy v1 (Kubernetes before 1.36): then none of this is rendered, and what is
there is pruned.

Three pieces, all plain Kubernetes (docs/sharing.md, "Bookings the cluster honours"):

* **Node labels.** Every node holding a live booking of a project carries
  ``pool.gpuportal.io/<namespace>: booked``; an MPS node holding bookings also carries
  ``gpuportal.io/mps-tenant: <department>`` (it serves that department only).
* **The namespace says where it may run.** The project's Namespace (``delivery.rendering``) is annotated with its booked
  nodes (``gpuportal.io/booked-nodes``) and, on HAMi clusters, the UUIDs of its booked GPUs
  (``gpuportal.io/booked-gpus``). Tenants cannot edit a Namespace (their ``edit`` role is
  namespaced), so the annotation is the portal's word.
* **Admission policies** (cluster-wide, ``admissionregistration.k8s.io/v1``) for namespaces the
  portal manages and pins (labelled ``gpuportal.io/pinned: "true"``): a MutatingAdmissionPolicy adds the pool label to every new pod's
  ``nodeSelector`` (so the scheduler only considers booked nodes) and, where GPUs are booked
  under HAMi, the ``nvidia.com/use-gpuuuid`` annotation HAMi's scheduler honours; a
  ValidatingAdmissionPolicy refuses a pod that names a node itself (``spec.nodeName``) and any
  binding (``pods/binding``, how the scheduler places a pod, and the older ``bindings``
  resource) to a node outside the booked list,
  with a message that says which nodes are booked. The policies read the namespace
  (``namespaceObject``), not parameter objects, so nothing has to be in sync but the Namespace.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from delivery.rendering import (
    BOOKED_GPUS_ANNOTATION,
    BOOKED_NODES_ANNOTATION,
    MANAGED_BY_LABEL,
    MANAGED_BY_VALUE,
    PINNED_LABEL,
    cluster_labels,
)

POOL_LABEL_PREFIX = "pool.gpuportal.io/"
POOL_LABEL_VALUE = "booked"
MPS_TENANT_LABEL = "gpuportal.io/mps-tenant"
HAMI_GPU_ANNOTATION = "nvidia.com/use-gpuuuid"
POLICY_NAME = "gpuportal-tenant-pools"
ADMISSION_API = "admissionregistration.k8s.io/v1"

_BOOKED = (
    f"namespaceObject.metadata.?annotations[?'{BOOKED_NODES_ANNOTATION}'].orValue('')"
    ".split(',').filter(n, n != '')"
)
_TARGET = (
    "request.resource.resource == 'bindings' || (has(request.subResource) && request.subResource == 'binding') ? "
    "object.target.name : (has(object.spec.nodeName) ? object.spec.nodeName : '')"
)
_MESSAGE = (
    "'project ' + request.namespace + ' runs pods only on the nodes its GPU allocations booked (' + "
    "(size(variables.booked) == 0 ? 'none now' : variables.booked.join(', ')) + '), not on ' + variables.target"
)
_POOL_SELECTOR = (
    "has(object.spec.nodeSelector) ? "
    "[JSONPatch{op: 'add', path: '/spec/nodeSelector/' + jsonpatch.escapeKey(variables.pool), value: 'booked'}] : "
    "[JSONPatch{op: 'add', path: '/spec/nodeSelector', value: {variables.pool: 'booked'}}]"
)
_GPUS = f"namespaceObject.metadata.?annotations[?'{BOOKED_GPUS_ANNOTATION}'].orValue('')"
_HAMI_GPUS = (
    f"{_GPUS} == '' ? [] : (has(object.metadata.annotations) ? "
    f"[JSONPatch{{op: 'add', path: '/metadata/annotations/' + jsonpatch.escapeKey('{HAMI_GPU_ANNOTATION}'), value: {_GPUS}}}] : "
    f"[JSONPatch{{op: 'add', path: '/metadata/annotations', value: {{'{HAMI_GPU_ANNOTATION}': {_GPUS}}}}}])"
)


def pool_label(namespace: str) -> str:
    """The node label that marks a node as booked by the project of ``namespace``."""
    return f"{POOL_LABEL_PREFIX}{namespace}"


def node_pool_labels(*, namespaces: Iterable[str], mps_tenant: str = "") -> dict[str, str]:
    labels = {pool_label(namespace): POOL_LABEL_VALUE for namespace in sorted(set(namespaces))}
    if mps_tenant:
        labels[MPS_TENANT_LABEL] = mps_tenant
    return labels


def _tenant_namespaces() -> dict[str, Any]:
    return {"namespaceSelector": {"matchLabels": {MANAGED_BY_LABEL: MANAGED_BY_VALUE, PINNED_LABEL: "true"}}}


def render_pool_validating_policy() -> list[dict[str, Any]]:
    """The ValidatingAdmissionPolicy and its binding that refuse pods placed off their bookings."""
    policy = {
        "apiVersion": ADMISSION_API,
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": POLICY_NAME, "labels": cluster_labels()},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "resourceRules": [{
                    "apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
                    "resources": ["pods", "pods/binding", "bindings"],
                }],
            },
            "variables": [{"name": "booked", "expression": _BOOKED}, {"name": "target", "expression": _TARGET}],
            "validations": [{
                "expression": "variables.target == '' || variables.target in variables.booked",
                "messageExpression": _MESSAGE,
                "reason": "Forbidden",
            }],
        },
    }
    binding = {
        "apiVersion": ADMISSION_API,
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": POLICY_NAME, "labels": cluster_labels()},
        "spec": {"policyName": POLICY_NAME, "validationActions": ["Deny"], "matchResources": _tenant_namespaces()},
    }
    return [policy, binding]


def render_pool_mutating_policy(*, hami: bool) -> list[dict[str, Any]]:
    """The MutatingAdmissionPolicy and its binding that steer new pods to their booked nodes (and,
    under HAMi, GPUs)."""
    mutations: list[dict[str, Any]] = [{"patchType": "JSONPatch", "jsonPatch": {"expression": _POOL_SELECTOR}}]
    if hami:
        mutations.append({"patchType": "JSONPatch", "jsonPatch": {"expression": _HAMI_GPUS}})
    policy = {
        "apiVersion": ADMISSION_API,
        "kind": "MutatingAdmissionPolicy",
        "metadata": {"name": POLICY_NAME, "labels": cluster_labels()},
        "spec": {
            "failurePolicy": "Fail",
            "reinvocationPolicy": "Never",
            "matchConstraints": {
                "resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}],
            },
            "variables": [{"name": "pool", "expression": f"'{POOL_LABEL_PREFIX}' + request.namespace"}],
            "mutations": mutations,
        },
    }
    binding = {
        "apiVersion": ADMISSION_API,
        "kind": "MutatingAdmissionPolicyBinding",
        "metadata": {"name": POLICY_NAME, "labels": cluster_labels()},
        "spec": {"policyName": POLICY_NAME, "matchResources": _tenant_namespaces()},
    }
    return [policy, binding]


def render_pool_policies(*, hami: bool) -> list[dict[str, Any]]:
    return [*render_pool_mutating_policy(hami=hami), *render_pool_validating_policy()]
