"""Tenant-scoped reads. Every list is filtered by what the user may see; outsiders get 404."""

from __future__ import annotations

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db.models import Exists, OuterRef, QuerySet, Value
from django.http import Http404

from tenants.access import access_for, department_ancestor_ids, department_parent_map
from tenants.models import Department, Membership, Project, Role


def department_list(*, user: AbstractBaseUser | AnonymousUser) -> QuerySet[Department]:
    access = access_for(user)
    queryset = Department.objects.all()
    if not access.reads_everything:
        queryset = queryset.filter(id__in=access.readable)
    return queryset.order_by("slug")


def department_get(*, user: AbstractBaseUser | AnonymousUser, department_id: int) -> Department:
    try:
        return department_list(user=user).get(id=department_id)
    except Department.DoesNotExist:
        raise Http404("No such department.") from None


def project_list(
    *, user: AbstractBaseUser | AnonymousUser, department_id: int | None = None
) -> QuerySet[Project]:
    access = access_for(user)
    queryset = Project.objects.select_related("department")
    if not access.reads_everything:
        queryset = queryset.filter(department_id__in=access.readable)
    if department_id is not None:
        queryset = queryset.filter(department_id=department_id)
    return queryset.order_by("slug")


def project_get(*, user: AbstractBaseUser | AnonymousUser, project_id: int) -> Project:
    try:
        return project_list(user=user).get(id=project_id)
    except Project.DoesNotExist:
        raise Http404("No such project.") from None


def project_list_for_requester(*, user: AbstractBaseUser | AnonymousUser) -> QuerySet[Project]:
    """``project_list``, each project read with whether ``user`` is one of its members, so that
    ``project_is_member`` of the same user answers without a second query (a request's body names
    its project, and the request is then allowed for members)."""
    user_id = int(user.pk) if user.is_authenticated else 0  # no account has id 0: nobody's member
    members = Project.members.through.objects.filter(project_id=OuterRef("pk"), user_id=user_id)
    return project_list(user=user).annotate(member_checked_for=Value(user_id), checked_user_is_member=Exists(members))


def project_is_member(*, project: Project, user: AbstractBaseUser | AnonymousUser) -> bool:
    if not user.is_authenticated:
        return False
    known = project.__dict__
    if "checked_user_is_member" in known and known.get("member_checked_for") == user.pk:
        return bool(known["checked_user_is_member"])
    return project.members.filter(pk=user.pk).exists()


def department_memberships(*, user: AbstractBaseUser | AnonymousUser, department_id: int) -> QuerySet[Membership]:
    """The roles held on the department itself (not inherited from above), for whoever reads it."""
    department = department_get(user=user, department_id=department_id)
    return (
        Membership.objects.filter(department=department).select_related("user", "department")
        .order_by("user__username", "role", "pk")
    )


def membership_get(*, user: AbstractBaseUser | AnonymousUser, department_id: int, membership_id: int) -> Membership:
    try:
        return department_memberships(user=user, department_id=department_id).get(pk=membership_id)
    except Membership.DoesNotExist:
        raise Http404("No such membership.") from None


def project_member_get(*, project: Project, user_id: int) -> AbstractBaseUser:
    try:
        found: AbstractBaseUser = project.members.get(pk=user_id)
    except project.members.model.DoesNotExist:
        raise Http404("No such project member.") from None
    return found


def admins_to_ask(*, user: AbstractBaseUser | AnonymousUser) -> tuple[list[str], str]:
    """Who can add ``user`` to a project or a department: the department admins of the
    departments they read (on them or above them), else the platform admins. Returns the
    usernames and which of the two they are (``department`` or ``platform``)."""
    access = access_for(user)
    if access.readable and access.user_id is not None:
        parents = department_parent_map()
        chain = {up for department_id in access.readable
                 for up in department_ancestor_ids(department_id=department_id, parents=parents)}
        names = sorted(set(
            Membership.objects.filter(department_id__in=chain, role=Role.DEPARTMENT_ADMIN, user__is_active=True)
            .exclude(user_id=access.user_id).values_list("user__username", flat=True)
        ))
        if names:
            return names, "department"
    platform = Membership.objects.filter(role=Role.PLATFORM_ADMIN, user__is_active=True).values_list(
        "user__username", flat=True)
    return sorted(set(platform)), "platform"
