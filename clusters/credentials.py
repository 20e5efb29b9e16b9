"""A cluster's credentials: the kubeconfig the portal stores, encrypted, to reach it."""

from __future__ import annotations

import hashlib
from typing import Any

import yaml
from django.contrib.auth.models import User
from django.db import transaction

from audit import actions
from audit.services import audit_record
from clusters.crypto import kubeconfig_encrypt
from clusters.models import Cluster
from kernel.errors import FieldError
from tenants.access import require_platform_admin


def _kubeconfig_server(text: str) -> str:
    """The server URL the kubeconfig's current context points at; FieldError when unusable."""
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise FieldError("kubeconfig", f"Not valid YAML: {error}") from None
    if not isinstance(document, dict):
        raise FieldError("kubeconfig", "A kubeconfig is a YAML mapping with clusters, users and contexts.")
    try:
        contexts: dict[str, Any] = {c["name"]: c["context"] for c in document.get("contexts") or []}
        clusters: dict[str, Any] = {c["name"]: c["cluster"] for c in document.get("clusters") or []}
        context = contexts[document["current-context"]]
        server = str(clusters[context["cluster"]]["server"])
    except (KeyError, TypeError):
        raise FieldError("kubeconfig", "The kubeconfig needs a current-context whose cluster has a server.") from None
    if not server.startswith("https://"):
        raise FieldError("kubeconfig", "The cluster's server must be an https:// URL.")
    return server


@transaction.atomic
def cluster_kubeconfig_set(*, actor: User | None, cluster_id: int, kubeconfig: str) -> Cluster:
    """Store a cluster's kubeconfig, encrypted; the audit log gets its fingerprint and server only."""
    if actor is not None:
        require_platform_admin(actor, to="change a cluster's credentials")
    server = _kubeconfig_server(kubeconfig)
    cluster = Cluster.objects.select_for_update(no_key=True).get(pk=cluster_id)
    cluster.kubeconfig_encrypted = kubeconfig_encrypt(kubeconfig)
    cluster.last_sync_error = ""
    cluster.save(update_fields=["kubeconfig_encrypted", "last_sync_error"])
    audit_record(
        actor=actor,
        action=actions.CLUSTER_KUBECONFIG_SET,
        target=cluster,
        after={"server": server, "fingerprint": "sha256:" + hashlib.sha256(kubeconfig.encode()).hexdigest()[:16]},
    )
    return cluster
