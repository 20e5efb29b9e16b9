"""What the department page shows (``/departments/<id>/``): the roles held on the department with
their sources, its teams, and its projects with their members and caps, in a fixed number of
queries whatever their numbers."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import User
from django.db.models import Prefetch, QuerySet

from allocations.admission.project_caps import department_caps
from allocations.models import Flavor
from kernel.clock import clock_now
from tenants.access import access_for
from tenants.models import Department, Project, Role
from tenants.selectors import department_list, department_memberships


def administered_departments(*, user: User) -> QuerySet[Department]:
    """The departments whose page the user may open: those they administer (with their teams)."""
    access = access_for(user)
    departments = department_list(user=user).select_related("parent")
    return departments if access.is_platform_admin else departments.filter(pk__in=access.administered)


def department_page(*, user: User, department: Department) -> dict[str, Any]:
    access = access_for(user)
    projects = list(
        Project.objects.filter(department=department).order_by("slug")
        .prefetch_related(Prefetch("members", queryset=User.objects.order_by("username")))
    )
    caps = department_caps(project_ids=[project.pk for project in projects], at=clock_now())
    roles = Role.choices if access.is_platform_admin else [
        (Role.RESEARCHER.value, Role.RESEARCHER.label), (Role.DEPARTMENT_ADMIN.value, Role.DEPARTMENT_ADMIN.label)]
    return {
        "title": f"Department {department.slug}",
        "department": department,
        "memberships": list(department_memberships(user=user, department_id=department.pk)),
        "teams": list(Department.objects.filter(parent=department).order_by("slug")),
        "projects": [(project, caps.get(project.pk, [])) for project in projects],
        "flavors": list(Flavor.objects.filter(is_active=True).order_by("name").only("pk", "name")),
        "roles": roles,
    }
