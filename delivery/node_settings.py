"""A node's sharing settings as the API changes them (platform admins): how its GPUs are offered
(``sharing``, ``sharing_replicas``, ``mig_layout``) and whether the placement engine may book it
(``is_schedulable``).

The checks are the admin's and the push's: ``Node.clean`` (the combinations the device plugin
accepts), then the node's configuration rendered as the push would render it
(:mod:`delivery.node_configs`: MPS replicas the GPU's compute capability allows, MIG only on
MIG-capable GPUs, a pinned layout that fits each GPU), each a 400 naming the field. Changing how
the GPUs are offered while the node holds live reservations is a 409: they were placed for the
current configuration, and the new one would strand or double-book them (move them with
``placement_defrag`` first). Cordoning (``is_schedulable``) is always allowed. The change is audited
(before and after) in its transaction, and a change of how the GPUs are offered queues a push of
the cluster's node configurations.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import User
from django.db import transaction

from allocations.catalogue.selectors import live_reservations_on
from audit import actions
from audit.services import audit_record
from clusters.models import Cluster, Node
from clusters.outbox import push_enqueue
from delivery.node_configs import RenderError, render_node_objects
from delivery.selectors import node_plans
from kernel.errors import Conflict, FieldError
from tenants.access import require_platform_admin

EDITABLE = ("sharing", "sharing_replicas", "is_schedulable", "mig_layout")
# How the GPUs are offered: what live reservations were placed for.
RECONFIGURING = ("sharing", "sharing_replicas", "mig_layout")


class NodeBooked(Conflict):
    code = "node_booked"


def _refuse_under_live_reservations(node: Node, changed: list[str]) -> None:
    live = live_reservations_on(node_ids=[node.pk])
    count = live.count()
    if count:
        allocations = sorted(set(live.values_list("allocation_id", flat=True)))
        raise NodeBooked(
            f"Node {node.name} holds {count} live GPU reservations (allocations {', '.join(map(str, allocations))}), "
            f"placed for {node.sharing}" + (f" with {node.sharing_replicas} replicas" if node.sharing_replicas else "")
            + f"; release them or move them with placement_defrag before changing {', '.join(changed)}.",
            details={"fields": changed, "live_reservations": count, "allocations": allocations},
        )


def _render_field(message: str) -> str:
    if "replicas" in message:
        return "sharing_replicas"
    if "MIG-capable" in message or "sharing mode" in message:
        return "sharing"
    return "mig_layout"


def _check_renders(node: Node) -> None:
    """The node's configuration as the push renders it (its GPUs as stored now)."""
    try:
        render_node_objects(node_plans(cluster=node.cluster, node_ids=[node.pk]), namespace=node.cluster.gpu_operator_namespace)
    except RenderError as error:
        message = str(error)
        raise FieldError(_render_field(message), message) from None


@transaction.atomic
def node_settings_update(*, actor: User, node_id: int, **changes: Any) -> Node:
    """Apply ``changes`` (a subset of :data:`EDITABLE`) after the checks above; unchanged values
    write nothing."""
    require_platform_admin(actor, to="change a node's sharing settings")
    unknown = sorted(set(changes) - set(EDITABLE))
    if unknown:
        raise ValueError(f"not editable here: {', '.join(unknown)}")
    # The cluster first (kernel.locks): bookings hold it while they write reservations, so none can
    # land on the node between the check below and the commit.
    Cluster.objects.select_for_update(no_key=True).get(pk=Node.objects.values_list("cluster_id", flat=True).get(pk=node_id))
    node = Node.objects.select_for_update(of=("self",)).select_related("cluster").get(pk=node_id)
    changed = {name: value for name, value in changes.items() if getattr(node, name) != value}
    if not changed:
        return node
    reconfigured = [name for name in RECONFIGURING if name in changed]
    if reconfigured:
        _refuse_under_live_reservations(node, reconfigured)
    before = {name: getattr(node, name) for name in changed}
    for name, value in changed.items():
        setattr(node, name, value)
    node.full_clean()
    node.save(update_fields=[*sorted(changed), "updated_at"])
    if reconfigured:
        _check_renders(node)  # raising rolls the save back
    audit_record(actor=actor, action=actions.NODE_UPDATED, target=node, before=before, after=changed)
    if reconfigured:  # cordoning changes where the engine books, not what the cluster runs
        push_enqueue(cluster_id=node.cluster_id, project_id=None)
    return node
