"""Who may see and do what, computed once per request from memberships (and the department tree,
kept per process and read again only when it changed: ``department_parent_map``).

A role held on a department applies to that department's whole subtree. Platform admins see and
manage everything; auditors read their subtree (everything when held on the root) and change
nothing; department admins read and decide in their subtree; researchers read their subtree and
request for projects they are members of. Everything else is invisible (404).
"""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db import transaction
from django.db.models import Count, Max, Sum

from kernel.errors import NotAllowed
from tenants.models import Department, Membership, Role


def department_subtree_ids(*, root_ids: Iterable[int], parents: dict[int, int | None]) -> frozenset[int]:
    """All departments under (and including) ``root_ids``, given each department's parent."""
    children: dict[int, list[int]] = defaultdict(list)
    for child, parent in parents.items():
        if parent is not None:
            children[parent].append(child)
    seen: set[int] = set()
    stack = list(root_ids)
    while stack:
        current = stack.pop()
        if current in seen:
            continue
        seen.add(current)
        stack.extend(children[current])
    return frozenset(seen)


def department_ancestor_ids(*, department_id: int, parents: dict[int, int | None]) -> list[int]:
    """The department itself and its ancestors, nearest first."""
    chain: list[int] = []
    current: int | None = department_id
    while current is not None and current not in chain:
        chain.append(current)
        current = parents.get(current)
    return chain


Signature = tuple[int, int, int]


@dataclass(frozen=True)
class _Tree:
    signature: Signature
    parents: dict[int, int | None]


_tree: _Tree | None = None
_tree_guard = threading.Lock()


def department_tree_signature() -> Signature:
    """(count, highest id, sum of stamps) of the departments: it changes with every department
    added, removed or moved (``tenants.tree_stamp``); one aggregate."""
    found = Department.objects.order_by().aggregate(count=Count("id"), top=Max("id"), stamps=Sum("tree_stamp"))
    return int(found["count"]), int(found["top"] or 0), int(found["stamps"] or 0)


def department_parent_map() -> dict[int, int | None]:
    """Each department's parent. Outside a transaction, kept in the process and read again only
    when the tree's signature changed (the access check of every scoped request reads it); inside
    one, always read (the transaction's own writes would make the signature ambiguous)."""
    global _tree
    if transaction.get_connection().in_atomic_block:
        return dict(Department.objects.values_list("id", "parent_id"))
    signature = department_tree_signature()  # before the parents: a tree moved meanwhile is read again next time
    kept = _tree
    if kept is None or kept.signature != signature:
        kept = _Tree(signature=signature, parents=dict(Department.objects.values_list("id", "parent_id")))
        with _tree_guard:
            _tree = kept
    return dict(kept.parents)


def department_chain(*, department_id: int, lock: bool = False) -> tuple[list[Department], dict[int, int | None]]:
    """The department and its ancestors, nearest first, and the parent map they were read from;
    ``lock`` row-locks them in primary-key order (call it inside a transaction)."""
    parents = department_parent_map()
    chain_ids = department_ancestor_ids(department_id=department_id, parents=parents)
    rows = Department.objects.filter(pk__in=chain_ids).order_by("pk")
    if lock:
        rows = rows.select_for_update(no_key=True)
    by_id = {department.pk: department for department in rows}
    return [by_id[pk] for pk in chain_ids if pk in by_id], parents


@dataclass(frozen=True)
class Access:
    """What one user may do. Department sets already include subtrees."""

    user_id: int | None
    is_platform_admin: bool = False
    readable: frozenset[int] = field(default_factory=frozenset)
    administered: frozenset[int] = field(default_factory=frozenset)
    audited: frozenset[int] = field(default_factory=frozenset)

    @property
    def reads_everything(self) -> bool:
        return self.is_platform_admin

    @property
    def has_any_role(self) -> bool:
        return self.is_platform_admin or bool(self.readable)

    def can_read_department(self, department_id: int) -> bool:
        return self.is_platform_admin or department_id in self.readable

    def can_administer_department(self, department_id: int) -> bool:
        return self.is_platform_admin or department_id in self.administered

    def can_audit_department(self, department_id: int) -> bool:
        return self.is_platform_admin or department_id in self.audited


def access_for(user: AbstractBaseUser | AnonymousUser) -> Access:
    if not user.is_authenticated:
        return Access(user_id=None)
    cached: Access | None = getattr(user, "_gpuportal_access", None)
    if cached is not None:
        return cached
    roles: dict[str, list[int]] = defaultdict(list)
    # Unordered: the model's ordering (by department slug and username) would join both tables.
    for department_id, role in Membership.objects.filter(user_id=user.pk).order_by().values_list("department_id", "role"):
        roles[role].append(department_id)
    is_platform_admin = bool(roles.get(Role.PLATFORM_ADMIN)) or bool(getattr(user, "is_superuser", False))
    parents = department_parent_map() if roles else {}

    def subtree(*role_names: str) -> frozenset[int]:
        return department_subtree_ids(
            root_ids=[dep for name in role_names for dep in roles.get(name, [])], parents=parents
        )

    access = Access(
        user_id=user.pk,
        is_platform_admin=is_platform_admin,
        readable=subtree(Role.RESEARCHER, Role.DEPARTMENT_ADMIN, Role.AUDITOR, Role.PLATFORM_ADMIN),
        administered=subtree(Role.DEPARTMENT_ADMIN),
        audited=subtree(Role.AUDITOR),
    )
    setattr(user, "_gpuportal_access", access)  # noqa: B010 - a per-request cache on the user object
    return access


def require_platform_admin(user: AbstractBaseUser | AnonymousUser, *, to: str) -> None:
    """Raise ``NotAllowed`` (403) unless ``user`` is a platform admin; ``to`` completes the message."""
    if not access_for(user).is_platform_admin:
        raise NotAllowed(f"Only platform admins may {to}.")


def access_forget(user: AbstractBaseUser | AnonymousUser) -> None:
    """Drop the cached access after a membership change, so it applies immediately."""
    if hasattr(user, "_gpuportal_access"):
        delattr(user, "_gpuportal_access")
