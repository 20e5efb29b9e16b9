"""A cluster's settings as the API changes them: the sharing switches need what lies above the
inventory (live reservations, the projects on the cluster), so the change goes through here.

* Turning ``use_hami`` off while live reservations of HAMi vGPU flavors exist on the cluster, or
  ``use_volcano`` off while live Volcano vGPU ones do, is refused (409): those units would be
  left on a cluster that no longer schedules them.
* ``use_hami`` decides the quotas of every project namespace (HAMi's ``limits.nvidia.com/gpumem``
  and ``gpucores``), so a change of it queues a push of each project on the cluster as well as of
  the cluster-wide objects; so does ``pin_bookings`` (each Namespace says where its pods may run,
  docs/sharing.md); ``use_volcano`` changes only the cluster-wide ones (the Queues).
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import User
from django.db import transaction

from allocations.catalogue.selectors import live_reservations_on
from allocations.models import SharingMode
from clusters.models import Cluster
from clusters.outbox import push_enqueue
from clusters.settings_change import cluster_settings_update
from delivery.selectors import cluster_project_ids
from kernel.errors import Conflict
from tenants.access import require_platform_admin

# The switch, and the sharing mode whose live units need it on.
SWITCHES = (("use_hami", SharingMode.VGPU, "HAMi vGPU"), ("use_volcano", SharingMode.VOLCANO_VGPU, "Volcano vGPU"))
# A change of these changes what every project namespace of the cluster renders.
PROJECTS_PUSHED = frozenset({"use_hami", "pin_bookings"})


class SharingInUse(Conflict):
    code = "sharing_in_use"


def switch_off_refusal(cluster: Cluster, changes: dict[str, Any]) -> SharingInUse | None:
    """Why ``changes`` may not turn a sharing switch of ``cluster`` off now (also the admin
    form's check), or None."""
    for field, mode, label in SWITCHES:
        if field not in changes or changes[field] or not getattr(cluster, field):
            continue
        live = live_reservations_on(cluster=cluster).filter(allocation__flavor__sharing_mode=mode)
        count = live.count()
        if count:
            flavors = sorted(set(live.values_list("allocation__flavor__name", flat=True)))
            return SharingInUse(
                f"Cluster {cluster.name} holds {count} live reservations of {label} flavors ({', '.join(flavors)}); "
                f"release them (or let them end) before turning {field} off.",
                details={"field": field, "live_reservations": count, "flavors": flavors},
            )
    return None


@transaction.atomic
def cluster_settings_change(*, actor: User, cluster_id: int, **changes: Any) -> Cluster:
    """Change the cluster's settings (:func:`clusters.settings_change.cluster_settings_update`),
    refusing to switch off a sharing technology still in use, and queue the project pushes a
    change of ``use_hami`` needs."""
    require_platform_admin(actor, to="change a cluster's settings")
    cluster = Cluster.objects.select_for_update(no_key=True).get(pk=cluster_id)
    refusal = switch_off_refusal(cluster, changes)
    if refusal is not None:
        raise refusal
    changed = {name for name, value in changes.items() if getattr(cluster, name, value) != value}
    cluster = cluster_settings_update(actor=actor, cluster_id=cluster_id, **changes)
    if PROJECTS_PUSHED & changed:
        for project_id in cluster_project_ids(cluster=cluster):
            push_enqueue(cluster_id=cluster.pk, project_id=project_id)
    return cluster
