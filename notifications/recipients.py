"""Who a notification is for, read when the event happens."""

from __future__ import annotations

from django.contrib.auth.models import User
from django.db.models import Q

from tenants.access import DepartmentTree, department_ancestor_ids, department_parent_map
from tenants.models import Membership, Role


def department_admins(*, department_id: int, exclude: int | None = None, tree: DepartmentTree | None = None) -> list[int]:
    """The admins of the department, or, when it has none, of its nearest ancestor that has some
    (a role holds over the department's subtree); ``exclude`` (the requester: nobody decides their
    own request) is left out. Active accounts only. ``tree``: the department tree, when read already."""
    chain = tree.ancestors(department_id) if tree is not None else department_ancestor_ids(
        department_id=department_id, parents=department_parent_map())
    rows = Membership.objects.filter(department_id__in=chain, role=Role.DEPARTMENT_ADMIN, user__is_active=True)
    by_department: dict[int, set[int]] = {}
    for held_in, user_id in rows.values_list("department_id", "user_id"):
        if user_id != exclude:
            by_department.setdefault(held_in, set()).add(user_id)
    for held_in in chain:
        if by_department.get(held_in):
            return sorted(by_department[held_in])
    return []


def platform_admins() -> list[int]:
    """Platform admins (by role, or superusers), active accounts only."""
    return sorted(
        User.objects.filter(is_active=True)
        .filter(Q(is_superuser=True) | Q(memberships__role=Role.PLATFORM_ADMIN))
        .values_list("pk", flat=True)
        .distinct()
    )
