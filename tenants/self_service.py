"""Department self-service: department admins manage their departments' people and projects
(docs/departments.md). Each change is audited in its own transaction.

- Project members: anyone who already has an account (users come from sign-in through the
  identity provider or the directory, or from a platform admin; nobody is invited from here). A
  user who holds no role where the project's department is readable is made a researcher of that
  department at the same time, so that they can see the project they were added to.
- Department roles: researcher and department admin (platform admin and auditor: platform admins
  only, as ``membership_grant`` says). A role that came from an identity provider cannot be removed
  here: the next sign-in would grant it again; its group or the group mapping must change. A
  department admin cannot remove the last admin role that administers a department (nobody would
  be left to manage it); a platform admin can.
- Removing someone's last role that lets them read a department also takes them off its projects.
"""

from __future__ import annotations

from django.contrib.auth.models import User
from django.db import transaction

from audit import actions
from audit.services import audit_record
from kernel.errors import Conflict, FieldError, NotAllowed
from tenants.access import access_for, department_ancestor_ids, department_parent_map
from tenants.models import Department, Membership, MembershipSource, Project, Role
from tenants.services import membership_grant, membership_revoke, project_members_unreadable_remove

SELF_SERVICE_ROLES = (Role.RESEARCHER, Role.DEPARTMENT_ADMIN)
NOT_FOUND_HINT = (
    "Accounts come from signing in (single sign-on or the directory) or from a platform admin: "
    "ask them to sign in to the portal once, then add them."
)


def user_find(*, query: str, field: str = "user") -> User:
    """An active account by its username, or else by its e-mail address (case-insensitive).
    ``FieldError`` on ``field`` when there is none, or when an address belongs to several."""
    text = query.strip()
    if not text:
        raise FieldError(field, "Give a username or an e-mail address.")
    found = User.objects.filter(is_active=True, username=text).first()
    if found is not None:
        return found
    if "@" in text:
        matches = list(User.objects.filter(is_active=True, email__iexact=text)[:2])
        if len(matches) == 1:
            return matches[0]
        if len(matches) > 1:
            raise FieldError(field, f"Several accounts use {text}: give the username instead.")
    raise FieldError(field, f"No account named {text}. {NOT_FOUND_HINT}")


def _require_admin(actor: User, department_id: int, *, to: str) -> None:
    if not access_for(actor).can_administer_department(department_id):
        raise NotAllowed(f"Only an admin of this department may {to}.")


@transaction.atomic
def project_member_add(*, actor: User, project: Project, user: User) -> bool:
    """Add ``user`` to ``project``. Returns whether they were also made a researcher of the
    project's department (they could not read it before)."""
    _require_admin(actor, project.department_id, to="add project members")
    project = Project.objects.select_for_update(no_key=True).get(pk=project.pk)
    if project.members.filter(pk=user.pk).exists():
        raise Conflict(f"{user.get_username()} is already a member of project {project.slug}.",
                       details={"project": project.slug, "user": user.get_username()})
    granted = False
    if not access_for(user).can_read_department(project.department_id):
        membership_grant(actor=actor, user=user, department=project.department, role=Role.RESEARCHER)
        granted = True
    project.members.add(user)
    audit_record(
        actor=actor, action=actions.PROJECT_MEMBER_ADDED, target=project, department_id=project.department_id,
        after={"user": user.get_username()}, details={"department_role_granted": granted},
    )
    return granted


@transaction.atomic
def project_member_remove(*, actor: User, project: Project, user: User) -> None:
    _require_admin(actor, project.department_id, to="remove project members")
    project = Project.objects.select_for_update(no_key=True).get(pk=project.pk)
    if not project.members.filter(pk=user.pk).exists():
        raise Conflict(f"{user.get_username()} is not a member of project {project.slug}.",
                       details={"project": project.slug, "user": user.get_username()})
    project.members.remove(user)
    audit_record(
        actor=actor, action=actions.PROJECT_MEMBER_REMOVED, target=project, department_id=project.department_id,
        before={"user": user.get_username()},
    )


@transaction.atomic
def department_member_add(*, actor: User, department: Department, user: User, role: str) -> Membership:
    """Grant ``role`` in ``department`` (manual source). Granting a role the user already holds
    there is a 409 naming where it came from."""
    _require_admin(actor, department.pk, to="add members")
    if role not in Role.values:
        raise FieldError("role", f"Must be one of {', '.join(Role.values)}.")
    held = Membership.objects.filter(user=user, department=department, role=role).first()
    if held is not None:
        raise Conflict(
            f"{user.get_username()} already is {Role(role).label.lower()} of {department.slug} "
            f"({MembershipSource(held.source).label.lower()}).",
            details={"membership_id": held.pk, "source": held.source},
        )
    return membership_grant(actor=actor, user=user, department=department, role=role)


def _administered_after(*, department_id: int, removing: int) -> bool:
    """Whether anyone still administers the department (a department admin role on it or on an
    ancestor) once membership ``removing`` is gone."""
    chain = department_ancestor_ids(department_id=department_id, parents=department_parent_map())
    return (
        Membership.objects.filter(department_id__in=chain, role=Role.DEPARTMENT_ADMIN, user__is_active=True)
        .exclude(pk=removing).exists()
    )


@transaction.atomic
def department_member_remove(*, actor: User, membership: Membership) -> list[str]:
    """Remove a manually granted role. Returns the slugs of the projects the user was taken off
    because they can no longer read the department."""
    department_id = membership.department_id
    _require_admin(actor, department_id, to="remove members")
    # Lock the department's roles: two admins removing each other at once cannot both succeed.
    list(Membership.objects.select_for_update().filter(department_id=department_id).order_by("pk"))
    membership = Membership.objects.select_related("user", "department").get(pk=membership.pk)
    if membership.source != MembershipSource.MANUAL:
        raise Conflict(
            f"This role comes from the identity provider ({membership.source}): it would be granted again at "
            f"{membership.user.get_username()}'s next sign-in. Change their groups, or the group mapping, instead.",
            details={"source": membership.source, "membership_id": membership.pk},
        )
    if (
        membership.role == Role.DEPARTMENT_ADMIN
        and not access_for(actor).is_platform_admin
        and not _administered_after(department_id=department_id, removing=membership.pk)
    ):
        raise Conflict(
            f"This is the last admin role of {membership.department.slug}: nobody would be left to manage it. "
            "Make someone else an admin first, or ask a platform admin.",
            details={"department": membership.department.slug},
        )
    membership_revoke(actor=actor, membership=membership)
    return project_members_unreadable_remove(actor=actor, user=membership.user)
