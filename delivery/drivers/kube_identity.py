"""The portal's own RoleBinding in each tenant namespace: its way to choose and evict pods there.

The target chart (deploy/helm/gpu-portal-target) gives the portal no right on pods across the
cluster. It creates the ClusterRole ``gpuportal-evictor`` (list and get pods, create their
Eviction subresource) and lets the portal ``bind`` it; the portal binds it, in every namespace it
manages, to itself (``gpuportal-evictor``, pruned with the namespace), and lists pods per namespace
(``delivery.drivers.kube_evictions``). Its admission policy refuses that binding for anyone but the
portal's own identity, so it cannot lend the role out. A namespace the portal does not manage
(``kube-system``) never gets one.

Who the portal is on the cluster comes from the API server (a SelfSubjectReview, Kubernetes 1.28
and later), once per push that has a project to carry: a ServiceAccount's token becomes a
ServiceAccount subject, any other identity a User. Only the Kubernetes driver writes the binding:
a manifests folder evicts nothing.
"""

from __future__ import annotations

from typing import Any

from delivery.drivers.base import Scope
from delivery.drivers.kube_evictions import Rest

EVICTOR_ROLE = "gpuportal-evictor"
EVICTOR_BINDING = "gpuportal-evictor"
SERVICE_ACCOUNT_PREFIX = "system:serviceaccount:"
_REVIEW = "/apis/authentication.k8s.io/v1/selfsubjectreviews"


def self_subject(rest: Rest) -> dict[str, str] | None:
    """The RoleBinding subject naming the kubeconfig's identity; None when the API server cannot
    say (before 1.28), and the portal then binds nothing (evictions need rights it was given)."""
    body = {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
    status, payload = rest.checked("POST", _REVIEW, body=body, what="ask who the portal is", allow=(404,))
    username = ((payload or {}).get("status") or {}).get("userInfo", {}).get("username", "") if status != 404 else ""
    if not username:
        return None
    if username.startswith(SERVICE_ACCOUNT_PREFIX) and username.count(":") == 3:
        namespace, name = username.removeprefix(SERVICE_ACCOUNT_PREFIX).split(":")
        return {"kind": "ServiceAccount", "name": name, "namespace": namespace}
    return {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": username}


def evictor_binding(scope: Scope, subject: dict[str, str]) -> dict[str, Any] | None:
    """The binding of the evictor role to ``subject`` in the project scope's namespace, labelled as
    the scope's Namespace is (so it is the project's, and pruned with it); None for a scope being
    pruned (no Namespace wanted)."""
    namespace = next((obj for obj in scope.objects if obj["kind"] == "Namespace"), None)
    if namespace is None or scope.namespace is None:
        return None
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": EVICTOR_BINDING, "namespace": scope.namespace,
                     "labels": dict(namespace["metadata"].get("labels") or {})},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": EVICTOR_ROLE},
        "subjects": [subject],
    }


def with_evictor_bindings(scopes: list[Scope], subject: dict[str, str] | None) -> list[Scope]:
    """``scopes`` with the evictor binding added to each project scope that keeps its namespace."""
    if subject is None:
        return scopes
    out = []
    for scope in scopes:
        binding = evictor_binding(scope, subject) if scope.namespace else None
        out.append(Scope(namespace=scope.namespace, objects=[*scope.objects, binding], managed_resources=scope.managed_resources,
                         kept=scope.kept, prune=scope.prune) if binding else scope)
    return out
