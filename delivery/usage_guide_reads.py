"""Reads behind the "use it" panel: one allocation, scoped like its detail page, turned into the
input of the pure :mod:`delivery.usage_guide`."""

from __future__ import annotations

from collections import Counter

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser

from allocations.catalogue.selectors import allocation_get, live_reservations
from allocations.catalogue.states import ON_CLUSTER_STATES
from allocations.models import Allocation, AllocationState
from delivery import conf
from delivery.container_limits import container_limits
from delivery.selectors import granted_units
from delivery.usage_guide import ClusterAccess, GuideInput, UsageGuide, usage_guide
from kernel.errors import Conflict
from tenants.access import access_for
from tenants.selectors import project_is_member

# A grant you can run work under now; one that will be so (shown as a preview).
USABLE_STATES = frozenset({AllocationState.ACTIVE, AllocationState.RECLAIMING})
PREVIEW_STATES = frozenset({AllocationState.SCHEDULED, AllocationState.APPROVED, AllocationState.PROVISIONING})


class NotUsable(Conflict):
    code = "not_usable"


def usage_guide_refusal(allocation: Allocation) -> NotUsable | None:
    """Why ``allocation`` has no usage guide (its state), or None."""
    state = allocation.state
    if allocation.cluster_id is None or state not in USABLE_STATES | PREVIEW_STATES:
        return NotUsable(
            f"Allocation #{allocation.pk} is {allocation.get_state_display().lower()}: a usage guide exists only for "
            "scheduled, approved, provisioning, active and reclaiming allocations.",
            details={"state": state},
        )
    return None


def _kube_role(user: AbstractBaseUser | AnonymousUser, allocation: Allocation) -> str:
    """The namespace's RoleBindings (``delivery.rendering.render_role_bindings``): members edit,
    the department's admins and auditors view."""
    if project_is_member(project=allocation.project, user=user):
        return "edit"
    access = access_for(user)
    department_id = allocation.project.department_id
    if department_id in access.administered or department_id in access.audited:
        return "view"
    return ""


def guide_input(*, user: AbstractBaseUser | AnonymousUser, allocation: Allocation) -> GuideInput:
    cluster = allocation.cluster
    assert cluster is not None
    # The LimitRange is the project's on this cluster: every grant it holds there (this one too,
    # when it is not on the cluster yet).
    holding = list(
        Allocation.objects.filter(cluster=cluster, project_id=allocation.project_id, state__in=ON_CLUSTER_STATES)
        .exclude(pk=allocation.pk).select_related("flavor", "priority_class")
    )
    grants = [granted_units(other, hami=cluster.use_hami) for other in [allocation, *holding]]
    limits = container_limits(grants, request_cpu=conf.limitrange_default_cpu(), request_memory=conf.limitrange_default_memory())
    per_node = Counter(reservation.node_id for reservation in live_reservations(allocation))
    flavor = allocation.flavor
    return GuideInput(
        allocation_id=allocation.pk,
        state=allocation.state,
        cluster=cluster.name,
        namespace=allocation.project.slug,
        flavor=flavor.name,
        sharing_mode=flavor.sharing_mode,
        resource_name=flavor.resource_name,
        quantity=allocation.quantity,
        priority_class=allocation.priority_class.name,
        memory_mib=flavor.memory_mib,
        compute_percent=flavor.compute_percent,
        cpu_millicores_per_unit=flavor.cpu_millicores_per_unit,
        memory_mib_per_unit=flavor.memory_mib_per_unit,
        limits=limits,
        mig_profile=flavor.mig_profile,
        node_units=tuple(sorted(per_node.values(), reverse=True)),
        use_hami=cluster.use_hami,
        pinned=cluster.pin_bookings,
        preview=allocation.state in PREVIEW_STATES,
        kube_user=conf.kube_user_prefix() + user.get_username() if user.is_authenticated else "",
        kube_role=_kube_role(user, allocation),
        access=ClusterAccess(
            api_server_url=cluster.user_api_server_url,
            ca_certificate=cluster.user_ca_certificate,
            oidc_issuer_url=cluster.user_oidc_issuer_url,
            oidc_client_id=cluster.user_oidc_client,
        ),
    )


def allocation_usage_guide(*, user: AbstractBaseUser | AnonymousUser, allocation_id: int) -> UsageGuide:
    """The usage guide of an allocation ``user`` may read (else 404); 409 when its state has none."""
    allocation = allocation_get(user=user, allocation_id=allocation_id)
    refusal = usage_guide_refusal(allocation)
    if refusal is not None:
        raise refusal
    return usage_guide(guide_input(user=user, allocation=allocation))


def allocation_usage_guide_or_none(*, user: AbstractBaseUser | AnonymousUser, allocation: Allocation) -> UsageGuide | None:
    """For the allocation page: the guide, or None when its state has none."""
    if usage_guide_refusal(allocation) is not None:
        return None
    return usage_guide(guide_input(user=user, allocation=allocation))
