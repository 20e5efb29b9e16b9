"""Tenant-scoped reads. Every list is filtered by what the user may see; outsiders get 404."""

from __future__ import annotations

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db.models import QuerySet
from django.http import Http404

from tenants.access import access_for
from tenants.models import Department, Project


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


def project_is_member(*, project: Project, user: AbstractBaseUser | AnonymousUser) -> bool:
    if not user.is_authenticated:
        return False
    return project.members.filter(pk=user.pk).exists()
