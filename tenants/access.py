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
_KNOWN_SUBTREES = 4096  # subtrees one tree keeps (a few per user's roles): bounded, whatever asks


@dataclass(frozen=True)
class DepartmentTree:
    """Each department's parent, and its children indexed once: the tree one access check was
    computed from, which the scoped reads of the same request ask for subtrees and ancestors
    instead of reading the tree again. Treat it as read only: it may be shared by the process."""

    parents: dict[int, int | None]
    children: dict[int, tuple[int, ...]] = field(repr=False, compare=False)
    # subtrees already asked for (the same roles' roots on every request of a user): kept with the tree
    known: dict[frozenset[int], frozenset[int]] = field(default_factory=dict, repr=False, compare=False)

    @staticmethod
    def of(parents: dict[int, int | None]) -> DepartmentTree:
        children: dict[int, list[int]] = defaultdict(list)
        for child, parent in parents.items():
            if parent is not None:
                children[parent].append(child)
        return DepartmentTree(parents=parents, children={parent: tuple(kids) for parent, kids in children.items()})

    def subtree(self, *root_ids: int) -> frozenset[int]:
        """What ``department_subtree_ids`` answers, from the index (no pass over every department),
        and kept for the next request that asks for the same roots while the tree stands."""
        roots = frozenset(root_ids)
        found = self.known.get(roots)
        if found is not None:
            return found
        seen: set[int] = set()
        stack = list(root_ids)
        while stack:
            current = stack.pop()
            if current not in seen:
                seen.add(current)
                stack.extend(self.children.get(current, ()))
        found = frozenset(seen)
        if len(self.known) < _KNOWN_SUBTREES:
            self.known[roots] = found
        return found

    def ancestors(self, department_id: int) -> list[int]:
        """The department itself and its ancestors, nearest first."""
        return department_ancestor_ids(department_id=department_id, parents=self.parents)


EMPTY_TREE = DepartmentTree(parents={}, children={})


@dataclass(frozen=True)
class _Tree:
    signature: Signature
    tree: DepartmentTree


_tree: _Tree | None = None
_tree_guard = threading.Lock()


def department_tree_signature() -> Signature:
    """(count, highest id, sum of stamps) of the departments: it changes with every department
    added, removed or moved (``tenants.tree_stamp``); one aggregate."""
    found = Department.objects.order_by().aggregate(count=Count("id"), top=Max("id"), stamps=Sum("tree_stamp"))
    return int(found["count"]), int(found["top"] or 0), int(found["stamps"] or 0)


def _parents_read() -> dict[int, int | None]:
    return dict(Department.objects.order_by().values_list("id", "parent_id"))  # unordered: no sort by slug


def department_tree() -> DepartmentTree:
    """The department tree. Outside a transaction, kept in the process and read again only when
    the tree's signature changed (one small aggregate); inside one, always read (the transaction's
    own writes would make the signature ambiguous). Within a request, ask ``access_for(user).tree``
    instead: the tree that request's access check was computed from, read once."""
    global _tree
    if transaction.get_connection().in_atomic_block:
        return DepartmentTree.of(_parents_read())
    signature = department_tree_signature()  # before the parents: a tree moved meanwhile is read again next time
    kept = _tree
    if kept is None or kept.signature != signature:
        kept = _Tree(signature=signature, tree=DepartmentTree.of(_parents_read()))
        with _tree_guard:
            _tree = kept
    return kept.tree


def department_parent_map() -> dict[int, int | None]:
    """Each department's parent (``department_tree``), a copy the caller may change."""
    return dict(department_tree().parents)


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
    # the tree the sets were computed from: the request's scoped reads take subtrees from it
    tree: DepartmentTree = field(default=EMPTY_TREE, repr=False, compare=False)

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


def access_for(user: AbstractBaseUser | AnonymousUser, *, tree: DepartmentTree | None = None) -> Access:
    """What ``user`` may do, kept on the user object for the request. ``tree``: a department tree
    this request read already (another user's access check's), else the tree is read here."""
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
    if not (roles or is_platform_admin):
        tree = EMPTY_TREE
    elif tree is None:
        tree = department_tree()

    def subtree(*role_names: str) -> frozenset[int]:
        return tree.subtree(*[dep for name in role_names for dep in roles.get(name, [])])

    access = Access(
        user_id=user.pk,
        is_platform_admin=is_platform_admin,
        readable=subtree(Role.RESEARCHER, Role.DEPARTMENT_ADMIN, Role.AUDITOR, Role.PLATFORM_ADMIN),
        administered=subtree(Role.DEPARTMENT_ADMIN),
        audited=subtree(Role.AUDITOR),
        tree=tree,
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
