"""Writes to departments, memberships and projects; each audited in its own transaction."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import User
from django.db import transaction

from audit import actions
from audit.services import audit_record
from kernel.errors import FieldError, NotAllowed
from tenants.access import access_for, access_forget, require_platform_admin
from tenants.models import RESERVED_NAMESPACES, Department, Isolation, Membership, Project, Role


@transaction.atomic
def department_create(
    *, actor: User, slug: str, name: str, parent: Department | None = None
) -> Department:
    require_platform_admin(actor, to="create departments")
    department = Department(slug=slug, name=name, parent=parent)
    department.full_clean()
    department.save()
    audit_record(
        actor=actor,
        action=actions.DEPARTMENT_CREATED,
        target=department,
        department_id=department.pk,
        after={"slug": slug, "name": name, "parent": parent.slug if parent else None},
    )
    return department


@transaction.atomic
def membership_grant(*, actor: User, user: User, department: Department, role: str) -> Membership:
    access = access_for(actor)
    if role in (Role.PLATFORM_ADMIN, Role.AUDITOR) and not access.is_platform_admin:
        raise NotAllowed("Only platform admins may grant platform admin or auditor roles.")
    if not access.can_administer_department(department.pk):
        raise NotAllowed("You may grant roles only in departments you administer.")
    membership, created = Membership.objects.get_or_create(user=user, department=department, role=role)
    if created:
        membership.full_clean()
        audit_record(
            actor=actor,
            action=actions.MEMBERSHIP_GRANTED,
            target=membership,
            department_id=department.pk,
            after={"user": user.get_username(), "role": role},
        )
        access_forget(user)
    return membership


@transaction.atomic
def membership_revoke(*, actor: User, membership: Membership) -> None:
    access = access_for(actor)
    if membership.role in (Role.PLATFORM_ADMIN, Role.AUDITOR) and not access.is_platform_admin:
        raise NotAllowed("Only platform admins may revoke platform admin or auditor roles.")
    if not access.can_administer_department(membership.department_id):
        raise NotAllowed("You may revoke roles only in departments you administer.")
    audit_record(
        actor=actor,
        action=actions.MEMBERSHIP_REVOKED,
        target=membership,
        department_id=membership.department_id,
        before={"user": membership.user.get_username(), "role": membership.role},
    )
    access_forget(membership.user)
    membership.delete()


@transaction.atomic
def project_members_unreadable_remove(*, actor: User, user: User, details: dict[str, Any] | None = None) -> list[str]:
    """Take ``user`` off every project whose department they can no longer read, once a role of
    theirs has gone: each removal audited ``project.member_removed`` (``why``: no role left in the
    department, plus ``details``). Returns the slugs of those projects."""
    access_forget(user)
    readable = access_for(user)
    removed: list[str] = []
    for project in Project.objects.filter(members=user).order_by("slug"):
        if not readable.can_read_department(project.department_id):
            project.members.remove(user)
            audit_record(
                actor=actor, action=actions.PROJECT_MEMBER_REMOVED, target=project,
                department_id=project.department_id, before={"user": user.get_username()},
                details={"why": "no role left in the department", **(details or {})},
            )
            removed.append(project.slug)
    return removed


@transaction.atomic
def project_create(
    *,
    actor: User,
    department: Department,
    slug: str,
    name: str,
    description: str = "",
    members: list[User] | None = None,
) -> Project:
    if not access_for(actor).can_administer_department(department.pk):
        raise NotAllowed("You may create projects only in departments you administer.")
    if slug in RESERVED_NAMESPACES or slug.startswith("kube-"):
        raise FieldError("slug", f"'{slug}' is reserved for the cluster's own namespaces.")
    project = Project(department=department, slug=slug, name=name, description=description)
    project.full_clean()
    project.save()
    member_list = list(members or [])
    readable_by = {user.pk: access_for(user) for user in member_list}
    for user in member_list:
        if not readable_by[user.pk].can_read_department(department.pk):
            raise FieldError("members", f"{user.get_username()} is not a member of department {department.slug}.")
    project.members.set(member_list)
    audit_record(
        actor=actor,
        action=actions.PROJECT_CREATED,
        target=project,
        department_id=department.pk,
        after={
            "slug": slug,
            "name": name,
            "department": department.slug,
            "members": sorted(user.get_username() for user in member_list),
        },
    )
    return project


def _isolation_check(isolation: str) -> None:
    if isolation not in Isolation.values:
        raise FieldError("isolation", f"Must be one of {', '.join(Isolation.values)}.")


def _isolation_change(*, actor: User, target: Department | Project, isolation: str, department_id: int) -> None:
    """Set ``target``'s isolation (row-locked by the caller) and audit the change, if any."""
    if target.isolation == isolation:
        return
    before = target.isolation
    target.isolation = isolation
    target.save(update_fields=["isolation"])
    action = actions.DEPARTMENT_UPDATED if isinstance(target, Department) else actions.PROJECT_UPDATED
    audit_record(actor=actor, action=action, target=target, department_id=department_id,
                 before={"isolation": before}, after={"isolation": isolation})


@transaction.atomic
def department_isolation_set(*, actor: User, department_id: int, isolation: str) -> Department:
    """Mark a department (its whole subtree) dedicated, or shared again. Platform admins only: a
    dedicated pool takes GPUs or nodes away from everyone else. New bookings follow it at once;
    units already booked stay where they are until they end or are moved (defragmentation)."""
    require_platform_admin(actor, to="change a department's isolation")
    _isolation_check(isolation)
    department = Department.objects.select_for_update(no_key=True).get(pk=department_id)
    _isolation_change(actor=actor, target=department, isolation=isolation, department_id=department.pk)
    return department


@transaction.atomic
def project_isolation_set(*, actor: User, project_id: int, isolation: str) -> Project:
    """Mark a project dedicated (its units share no GPU, or node, with any other project's), or
    shared again; platform admins only, as for departments."""
    require_platform_admin(actor, to="change a project's isolation")
    _isolation_check(isolation)
    project = Project.objects.select_for_update(no_key=True).get(pk=project_id)
    _isolation_change(actor=actor, target=project, isolation=isolation, department_id=project.department_id)
    return project


PROJECT_EDITABLE = ("name", "description")


@transaction.atomic
def project_update(*, actor: User, project_id: int, name: str | None = None, description: str | None = None) -> Project:
    """Change a project's name or description (department admins; the slug is its namespace on
    every cluster and never changes). Audited with what changed; nothing changed, nothing recorded."""
    project = Project.objects.select_for_update(no_key=True).get(pk=project_id)
    if not access_for(actor).can_administer_department(project.department_id):
        raise NotAllowed("Only an admin of the project's department may change it.")
    wanted = {"name": name, "description": description}
    before: dict[str, str] = {}
    after: dict[str, str] = {}
    for key in PROJECT_EDITABLE:
        value = wanted[key]
        if value is None or getattr(project, key) == value:
            continue
        before[key], after[key] = getattr(project, key), value
        setattr(project, key, value)
    if not after:
        return project
    project.full_clean()
    project.save(update_fields=list(after))
    audit_record(actor=actor, action=actions.PROJECT_UPDATED, target=project, department_id=project.department_id,
                 before=before, after=after)
    return project
