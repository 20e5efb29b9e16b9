"""Who a notification is for, read when the event happens."""

from __future__ import annotations

from django.contrib.auth.models import User
from django.db import connection
from django.db.models import Q

from tenants.access import DepartmentTree
from tenants.models import Department, Membership, Role

# The department and its ancestors (``depth`` 0 for itself, nearest first), walked up in the
# database, joined with the active department admins of each: one query where reading the tree and
# then the memberships took two (the tree read whole inside the caller's transaction). A chain
# cannot be longer than there are departments, which also ends the walk if the tree ever held a
# cycle (a department seen again is further up than where it was first found, so changes nothing).
# Plain SQL that PostgreSQL and SQLite both run.
_ADMINS_UP_THE_TREE = """
WITH RECURSIVE chain (id, parent_id, depth) AS (
    SELECT id, parent_id, 0 FROM {department} WHERE id = %s
    UNION ALL
    SELECT up.id, up.parent_id, chain.depth + 1 FROM {department} up JOIN chain ON up.id = chain.parent_id
    WHERE chain.depth < (SELECT COUNT(*) FROM {department})
)
SELECT chain.depth, held.user_id FROM chain
JOIN {membership} held ON held.department_id = chain.id
JOIN {user} account ON account.id = held.user_id
WHERE held.role = %s AND account.is_active = %s
"""


def department_admins(*, department_id: int, exclude: int | None = None, tree: DepartmentTree | None = None) -> list[int]:
    """The admins of the department, or, when it has none, of its nearest ancestor that has some
    (a role holds over the department's subtree); ``exclude`` (the requester: nobody decides their
    own request) is left out. Active accounts only. ``tree``: the department tree, when the caller
    has read it already (the chain is then known and one query reads the memberships); else the
    chain is walked up in the database, joined with the memberships, in one query."""
    if tree is not None:
        return _admins_of_chain(chain=tree.ancestors(department_id), exclude=exclude)
    sql = _ADMINS_UP_THE_TREE.format(
        department=connection.ops.quote_name(Department._meta.db_table),
        membership=connection.ops.quote_name(Membership._meta.db_table),
        user=connection.ops.quote_name(User._meta.db_table),
    )
    by_depth: dict[int, set[int]] = {}
    with connection.cursor() as cursor:
        cursor.execute(sql, [department_id, Role.DEPARTMENT_ADMIN.value, True])
        for depth, user_id in cursor.fetchall():
            if user_id != exclude:
                by_depth.setdefault(int(depth), set()).add(int(user_id))
    return sorted(by_depth[min(by_depth)]) if by_depth else []


def _admins_of_chain(*, chain: list[int], exclude: int | None) -> list[int]:
    """The active department admins of the first department of ``chain`` (nearest first) that has any."""
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
