"""What the department page shows (``/departments/<id>/``): the roles held on the department with
their sources, its teams, and its projects with their members and caps, in a fixed number of
queries whatever their numbers."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django.contrib.auth.models import User
from django.db.models import Prefetch, QuerySet

from allocations.admission.project_caps import department_caps
from allocations.models import Flavor
from kernel.clock import clock_now
from tenants.access import access_for
from tenants.models import Department, Project, Role
from tenants.selectors import department_list, department_memberships


@dataclass(frozen=True)
class Refused:
    """A form of the page that was refused, shown again as it was filled in, each error by its
    field: ``form`` names it (member-add, project-new, project-edit, project-member, project-cap),
    ``project`` says whose for a project's forms."""

    form: str
    project: int | None = None
    values: dict[str, str] = field(default_factory=dict)
    errors: dict[str, list[str]] = field(default_factory=dict)


def _state(refused: Refused | None, form: str, project: int | None = None) -> Refused:
    """The form's refused state, or an empty one (nothing typed kept, no errors)."""
    if refused is not None and refused.form == form and refused.project == project:
        return refused
    return Refused(form=form, project=project)


def administered_departments(*, user: User) -> QuerySet[Department]:
    """The departments whose page the user may open: those they administer (with their teams)."""
    access = access_for(user)
    departments = department_list(user=user).select_related("parent")
    return departments if access.is_platform_admin else departments.filter(pk__in=access.administered)


def department_page(*, user: User, department: Department, refused: Refused | None = None) -> dict[str, Any]:
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
        "projects": [
            {"project": project, "key": str(project.pk), "caps": caps.get(project.pk, []), "edit": _state(refused, "project-edit", project.pk),
             "member": _state(refused, "project-member", project.pk), "cap": _state(refused, "project-cap", project.pk)}
            for project in projects
        ],
        "flavors": list(Flavor.objects.filter(is_active=True).order_by("name").only("pk", "name")),
        "roles": roles,
        "member_add": _state(refused, "member-add"),
        "project_new": _state(refused, "project-new"),
    }
