"""A platform admin changes a cluster's settings: its display name, its monitoring (the
Prometheus the utilisation tick reads, and the PrometheusRule the portal pushes) and its GPU
sharing (HAMi, Volcano, the memory reserve on shared GPUs).

The API reaches this through :func:`delivery.cluster_settings.cluster_settings_change`, which
first refuses turning off HAMi or Volcano under live bookings (reservations are above this app) and
queues the project pushes that a change of HAMi needs."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import User
from django.db import transaction

from audit import actions
from audit.services import audit_record
from clusters.models import Cluster
from clusters.outbox import push_enqueue
from tenants.access import require_platform_admin

EDITABLE = (
    "display_name", "prometheus_url", "prometheus_rule_namespace", "prometheus_rule_labels",
    "use_hami", "use_volcano", "pin_bookings", "sharing_reserve_percent", "sharing_reserve_per_unit_mib",
    "user_api_server_url", "user_ca_certificate", "user_oidc_issuer_url", "user_oidc_client",
)
# A change to these changes the cluster-wide objects (the PrometheusRule, Volcano's Queues): push them.
PUSHED = frozenset({"prometheus_rule_namespace", "prometheus_rule_labels", "use_hami", "use_volcano", "pin_bookings"})


@transaction.atomic
def cluster_settings_update(*, actor: User, cluster_id: int, **changes: Any) -> Cluster:
    """Apply ``changes`` (a subset of :data:`EDITABLE`), audit what changed (before and after) and,
    when the cluster-wide objects change (:data:`PUSHED`), queue a push of them."""
    require_platform_admin(actor, to="change a cluster's settings")
    unknown = sorted(set(changes) - set(EDITABLE))
    if unknown:
        raise ValueError(f"not editable here: {', '.join(unknown)}")
    cluster = Cluster.objects.select_for_update(no_key=True).get(pk=cluster_id)
    changed = {name: value for name, value in changes.items() if getattr(cluster, name) != value}
    if not changed:
        return cluster
    before = {name: getattr(cluster, name) for name in changed}
    for name, value in changed.items():
        setattr(cluster, name, value)
    cluster.full_clean()
    cluster.save(update_fields=sorted(changed))
    audit_record(actor=actor, action=actions.CLUSTER_UPDATED, target=cluster, before=before, after=changed)
    if PUSHED & set(changed):
        push_enqueue(cluster_id=cluster.pk, project_id=None)
    return cluster
