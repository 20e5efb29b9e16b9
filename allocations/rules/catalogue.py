"""Platform-admin writes to the catalogue: flavors, priority classes and department quotas.

Quotas follow the department tree (see ``allocations.quotas.algebra``): in each scope (a flavor's
units, or GPU-equivalents), what a department's direct children are guaranteed must fit within its
limit at the top of the scope (no quota above it), and within its own guarantee below that
(guarantees nest), or a guarantee would promise capacity the parent may never hand out. :func:`quota_check`
holds that rule whichever side changes (the parent's limit, a child's guarantee), with the quota's
own rules, for the API and the Django admin alike; it locks the department chain first, so that
two edits racing on one subtree are checked one after the other.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from django.contrib.auth.models import User
from django.db import transaction
from django.db.models import Q
from django.forms.models import model_to_dict

from allocations.booking.sharing import flavor_fit_check
from allocations.models import Allocation, Flavor, PriorityClass, Quota, QuotaWindow, SharingMode
from audit import actions
from audit.services import audit_record
from clusters.models import Cluster
from clusters.outbox import push_enqueue
from kernel.errors import Conflict, FieldError
from kernel.numbers import plain
from tenants.access import department_chain, require_platform_admin
from tenants.models import Department

CATALOGUE = "change the catalogue"
# What a Kubernetes PriorityClass carries (``delivery.rendering.render_priority_class``): changing
# one of these re-pushes the cluster-wide objects; the others only matter to the portal's admission.
PUSHED_FIELDS = frozenset({"value", "preemption_policy", "description"})
QUOTA_NUMBERS = ("guaranteed", "limit", "lending_limit")
# What the volcano-scheduler configuration of a Volcano cluster reads of its Volcano vGPU flavors
# (``delivery.volcano.render_scheduler_configmap``): changing one re-pushes the cluster-wide objects.
VOLCANO_FIELDS = frozenset({"sharing_mode", "placement_policy", "is_active"})


def _plain(data: dict[str, Any]) -> dict[str, Any]:
    return {key: (str(value) if isinstance(value, Decimal) else value) for key, value in data.items()}


def _changes(before: dict[str, Any], after: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    changed = [key for key in after if after[key] != before.get(key)]
    return {key: before.get(key) for key in changed}, {key: after[key] for key in changed}


@transaction.atomic
def flavor_create(*, actor: User, **fields: Any) -> Flavor:
    require_platform_admin(actor, to=CATALOGUE)
    flavor = Flavor(**fields)
    flavor.full_clean()
    flavor_fit_check(flavor=flavor)
    flavor.save()
    if flavor.sharing_mode == SharingMode.VOLCANO_VGPU:
        volcano_clusters_enqueue()
    audit_record(actor=actor, action=actions.FLAVOR_CREATED, target=flavor, after=_plain(model_to_dict(flavor)))
    return flavor


@transaction.atomic
def flavor_update(*, actor: User, flavor_id: int, **fields: Any) -> Flavor:
    require_platform_admin(actor, to=CATALOGUE)
    flavor = Flavor.objects.select_for_update().get(pk=flavor_id)
    before = _plain(model_to_dict(flavor))
    for name, value in fields.items():
        setattr(flavor, name, value)
    flavor.full_clean()
    flavor_fit_check(flavor=flavor)
    flavor.save()
    was, now = _changes(before, _plain(model_to_dict(flavor)))
    if SharingMode.VOLCANO_VGPU in (was.get("sharing_mode"), flavor.sharing_mode) and VOLCANO_FIELDS & set(now):
        volcano_clusters_enqueue()
    audit_record(actor=actor, action=actions.FLAVOR_UPDATED, target=flavor, before=was, after=now)
    return flavor


def volcano_clusters_enqueue() -> int:
    """Queue a push of the cluster-wide objects to every active cluster running Volcano, whose
    scheduler configuration follows the Volcano vGPU flavors; returns how many were queued."""
    cluster_ids = list(Cluster.objects.filter(is_active=True, use_volcano=True).order_by("pk").values_list("pk", flat=True))
    for cluster_id in cluster_ids:
        push_enqueue(cluster_id=cluster_id, project_id=None)
    return len(cluster_ids)


# ----------------------------------------------------------------------------- priority classes


def cluster_objects_enqueue() -> int:
    """Queue a push of the cluster-wide objects (the PriorityClasses among them) to every active
    cluster, in this transaction; returns how many were queued. Call it before the audit event."""
    cluster_ids = list(Cluster.objects.filter(is_active=True).order_by("pk").values_list("pk", flat=True))
    for cluster_id in cluster_ids:
        push_enqueue(cluster_id=cluster_id, project_id=None)
    return len(cluster_ids)


@transaction.atomic
def priority_class_create(*, actor: User, via: str = "api", **fields: Any) -> PriorityClass:
    require_platform_admin(actor, to=CATALOGUE)
    priority_class = PriorityClass(**fields)
    priority_class.full_clean()
    priority_class.save()
    pushes = cluster_objects_enqueue()
    audit_record(
        actor=actor,
        action=actions.PRIORITY_CLASS_CREATED,
        target=priority_class,
        after=_plain(model_to_dict(priority_class)),
        details={"via": via, "pushes": pushes},
    )
    return priority_class


@transaction.atomic
def priority_class_update(*, actor: User, priority_class_id: int, via: str = "api", **fields: Any) -> PriorityClass:
    """Change a priority class. Its name is the Kubernetes object's name, which grants and pods refer
    to: it cannot change (create another class instead). A change to what the cluster's
    PriorityClass carries is pushed to every active cluster."""
    require_platform_admin(actor, to=CATALOGUE)
    priority_class = PriorityClass.objects.select_for_update().get(pk=priority_class_id)
    name = fields.pop("name", priority_class.name)
    if name != priority_class.name:
        raise FieldError(
            "name", f"The name of priority class {priority_class.name} is its Kubernetes object's name and cannot "
            "change; create a new class instead.",
        )
    before = _plain(model_to_dict(priority_class))
    for field, value in fields.items():
        setattr(priority_class, field, value)
    priority_class.full_clean()
    priority_class.save()
    was, now = _changes(before, _plain(model_to_dict(priority_class)))
    pushes = cluster_objects_enqueue() if PUSHED_FIELDS & set(now) else 0
    audit_record(
        actor=actor, action=actions.PRIORITY_CLASS_UPDATED, target=priority_class, before=was, after=now,
        details={"via": via, "pushes": pushes},
    )
    return priority_class


@transaction.atomic
def priority_class_delete(*, actor: User, priority_class_id: int, via: str = "api") -> None:
    """Remove a priority class no allocation or quota window refers to (a past one included: the
    record keeps its class), and the PriorityClass from every active cluster."""
    require_platform_admin(actor, to=CATALOGUE)
    priority_class = PriorityClass.objects.select_for_update().get(pk=priority_class_id)
    used = Allocation.objects.filter(priority_class=priority_class).count()
    windows = QuotaWindow.objects.filter(priority_class=priority_class).count()
    if used or windows:
        details: dict[str, Any] = {"priority_class": priority_class.name, "allocations": used}
        what = f"{used} allocation(s)"
        if windows:
            details["quota_windows"] = windows
            what += f" and {windows} quota window(s)"
        raise Conflict(f"Priority class {priority_class.name} is used by {what}; it cannot be removed.", details=details)
    before = _plain(model_to_dict(priority_class))
    pushes = cluster_objects_enqueue()  # pushed after the commit, when the class is gone: the push prunes it
    audit_record(
        actor=actor, action=actions.PRIORITY_CLASS_DELETED, target=priority_class, before=before,
        details={"via": via, "pushes": pushes},
    )
    priority_class.delete()


# ----------------------------------------------------------------------------------- quotas


def _scope(flavor_id: int | None) -> Q:
    return Q(flavor_id=flavor_id) if flavor_id is not None else Q(flavor__isnull=True)


def _guarantees(department_ids: list[int], flavor_id: int | None) -> dict[str, Decimal]:
    """``{department slug: guarantee}`` of the quotas of these departments in one scope."""
    rows = Quota.objects.filter(_scope(flavor_id), department_id__in=department_ids)
    return dict(rows.order_by("department__slug").values_list("department__slug", "guaranteed"))


def _listed(guarantees: dict[str, Decimal]) -> str:
    return ", ".join(f"{slug} {plain(value)}" for slug, value in guarantees.items())


def _refuse(field: str, message: str, **details: Any) -> FieldError:
    error = FieldError(field, message)
    error.details = {key: (plain(value) if isinstance(value, Decimal) else value) for key, value in details.items()}
    return error


def quota_check(
    *,
    department_id: int,
    flavor: Flavor | None,
    guaranteed: Decimal,
    limit: Decimal,
    lending_limit: Decimal | None,
    lock: bool = True,
) -> None:
    """Raise a ``FieldError`` (400 naming the field, ``details`` with the numbers) unless these numbers
    may be the quota of ``department_id`` in ``flavor``'s scope: the guarantee within the limit, the
    lending limit within the guarantee, whole units for a flavor, its children's guarantees within
    its limit, and its guarantee with its siblings' within its parent's limit. ``lock`` row-locks the
    department chain first (in a transaction): it stays locked until the change commits."""
    _check_numbers(flavor=flavor, guaranteed=guaranteed, limit=limit, lending_limit=lending_limit)
    chain, parents = department_chain(department_id=department_id, lock=lock)
    flavor_id = flavor.pk if flavor is not None else None
    _check_children(department_id=department_id, flavor_id=flavor_id, parents=parents, guaranteed=guaranteed,
                    limit=limit)
    _check_siblings(department_id=department_id, flavor_id=flavor_id, chain=chain, parents=parents,
                    guaranteed=guaranteed)


def _check_numbers(*, flavor: Flavor | None, guaranteed: Decimal, limit: Decimal, lending_limit: Decimal | None) -> None:
    """The quota's own numbers: the guarantee within the limit, the lending limit within the
    guarantee, whole units for a flavor."""
    if guaranteed > limit:
        raise _refuse("guaranteed", f"The guarantee {plain(guaranteed)} is above the limit {plain(limit)}.",
                      guaranteed=guaranteed, limit=limit)
    if lending_limit is not None and lending_limit > guaranteed:
        raise _refuse(
            "lending_limit",
            f"The lending limit {plain(lending_limit)} is above the guarantee {plain(guaranteed)}: "
            "a department lends only what it is guaranteed.",
            lending_limit=lending_limit, guaranteed=guaranteed,
        )
    if flavor is not None:
        for name, value in (("guaranteed", guaranteed), ("limit", limit), ("lending_limit", lending_limit)):
            if value is not None and value != value.to_integral_value():
                raise FieldError(name, "A flavor quota counts whole units.")


def _check_children(*, department_id: int, flavor_id: int | None, parents: dict[int, int | None],
                    guaranteed: Decimal, limit: Decimal) -> None:
    """The children's guarantees within the department's guarantee (when guarantees nest) or limit."""
    children = _guarantees([child for child, parent in parents.items() if parent == department_id], flavor_id)
    promised = sum(children.values(), Decimal(0))
    nested = _backed(department_id=department_id, flavor_id=flavor_id, parents=parents)
    field, room = ("guaranteed", guaranteed) if nested else ("limit", limit)
    if promised > room:
        what = "guarantee" if nested else "limit"
        why = " (guarantees nest: a department promises its teams no more than it is promised)" if nested else ""
        raise _refuse(
            field,
            f"The {what} {plain(room)} is below the {plain(promised)} its children are guaranteed "
            f"({_listed(children)}){why}.",
            **{field: room}, children_guaranteed=promised,
            children={slug: plain(value) for slug, value in children.items()},
        )


def _check_siblings(*, department_id: int, flavor_id: int | None, chain: list[Department],
                    parents: dict[int, int | None], guaranteed: Decimal) -> None:
    """The guarantee with its siblings' within the parent's guarantee (when guarantees nest) or
    limit, when the parent has a quota in this scope."""
    parent_id = parents.get(department_id)
    above = Quota.objects.filter(_scope(flavor_id), department_id=parent_id).first() if parent_id else None
    if above is None or parent_id is None:
        return
    parent = next(department for department in chain if department.pk == parent_id)
    siblings = _guarantees(
        [child for child, up in parents.items() if up == parent_id and child != department_id], flavor_id
    )
    others = sum(siblings.values(), Decimal(0))
    parent_nested = _backed(department_id=parent_id, flavor_id=flavor_id, parents=parents)
    ceiling = above.guaranteed if parent_nested else above.limit
    if others + guaranteed > ceiling:
        listed = f" ({_listed(siblings)})" if siblings else ""
        what = "guarantee" if parent_nested else "limit"
        raise _refuse(
            "guaranteed",
            f"The guarantee {plain(guaranteed)} and the {plain(others)} the other children of {parent.slug} are "
            f"guaranteed{listed} come to {plain(others + guaranteed)}, above {parent.slug}'s {what} {plain(ceiling)}.",
            guaranteed=guaranteed, siblings_guaranteed=others, parent=parent.slug,
            **{f"parent_{'guaranteed' if parent_nested else 'limit'}": ceiling},
            siblings={slug: plain(value) for slug, value in siblings.items()},
        )


def _backed(*, department_id: int, flavor_id: int | None, parents: dict[int, int | None]) -> bool:
    """Whether a department above ``department_id`` has a quota in this scope: then its guarantee is
    what it can promise its children (guarantees nest); at the top of the scope, its limit is."""
    above, seen = parents.get(department_id), set()
    ancestors = []
    while above is not None and above not in seen:
        seen.add(above)
        ancestors.append(above)
        above = parents.get(above)
    return bool(ancestors) and Quota.objects.filter(_scope(flavor_id), department_id__in=ancestors).exists()


def _quota_numbers(quota: Quota) -> dict[str, Any]:
    return {
        "flavor": quota.flavor.name if quota.flavor else None,
        **{name: (plain(getattr(quota, name)) if getattr(quota, name) is not None else None) for name in QUOTA_NUMBERS},
    }


def _quota_save(*, actor: User, quota: Quota, numbers: dict[str, Decimal | None], via: str) -> Quota:
    """Check, save and audit ``quota`` (locked, or new) with ``numbers``; the caller has locked the
    department chain already."""
    values = {name: numbers.get(name, getattr(quota, name)) for name in QUOTA_NUMBERS}
    guaranteed, limit = values["guaranteed"], values["limit"]
    assert guaranteed is not None and limit is not None
    quota_check(department_id=quota.department_id, flavor=quota.flavor, guaranteed=guaranteed, limit=limit,
                lending_limit=values["lending_limit"], lock=False)
    created = quota.pk is None
    before = {} if created else _quota_numbers(quota)
    for name, value in values.items():
        setattr(quota, name, value)
    quota.full_clean()
    quota.save()
    after = _quota_numbers(quota)
    if not created:
        before, changed = _changes(before, after)
        after = {"flavor": after["flavor"], **changed}
    audit_record(
        actor=actor, action=actions.QUOTA_SET, target=quota, department_id=quota.department_id,
        before=before, after=after, details={"via": via},
    )
    return quota


def _quota_lock(quota_id: int) -> Quota:
    """The quota's department chain, then the quota itself, locked (the order of ``kernel.locks``)."""
    department_id = Quota.objects.values_list("department_id", flat=True).get(pk=quota_id)
    department_chain(department_id=department_id, lock=True)
    # of=("self",): PostgreSQL refuses FOR UPDATE on the nullable side of the outer join to the flavor.
    return Quota.objects.select_for_update(of=("self",)).select_related("flavor").get(pk=quota_id)


@transaction.atomic
def quota_set(
    *,
    actor: User,
    department: Department,
    flavor: Flavor | None,
    guaranteed: Decimal,
    limit: Decimal,
    lending_limit: Decimal | None = None,
    via: str = "api",
) -> Quota:
    """Create or change the quota of ``department`` for ``flavor`` (None: GPU-equivalents); every
    number is set (``lending_limit`` None: the department lends all of its unused guarantee)."""
    require_platform_admin(actor, to=CATALOGUE)
    department_chain(department_id=department.pk, lock=True)
    scope = _scope(flavor.pk if flavor else None)
    quota = Quota.objects.select_for_update(of=("self",)).select_related("flavor").filter(scope, department=department).first()
    if quota is None:
        quota = Quota(department=department, flavor=flavor)
    numbers = {"guaranteed": guaranteed, "limit": limit, "lending_limit": lending_limit}
    return _quota_save(actor=actor, quota=quota, numbers=numbers, via=via)


@transaction.atomic
def quota_update(*, actor: User, quota_id: int, via: str = "api", **numbers: Decimal | None) -> Quota:
    """Change some of a quota's numbers (``guaranteed``, ``limit``, ``lending_limit``); the others stay."""
    require_platform_admin(actor, to=CATALOGUE)
    unknown = set(numbers) - set(QUOTA_NUMBERS)
    if unknown:
        raise TypeError(f"quota_update() got unexpected fields {sorted(unknown)}")
    return _quota_save(actor=actor, quota=_quota_lock(quota_id), numbers=numbers, via=via)


@transaction.atomic
def quota_delete(*, actor: User, quota_id: int, via: str = "api") -> None:
    """Remove a quota (its department's children's guarantees then fit no limit of it; its own
    guarantee stops counting against its parent's limit)."""
    require_platform_admin(actor, to=CATALOGUE)
    quota = _quota_lock(quota_id)
    audit_record(
        actor=actor, action=actions.QUOTA_DELETED, target=quota, department_id=quota.department_id,
        before=_quota_numbers(quota), details={"via": via},
    )
    quota.delete()
