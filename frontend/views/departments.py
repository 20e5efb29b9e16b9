"""The department pages (docs/departments.md): department admins (and platform admins) manage the
roles held on a department, its projects, their members and caps. Outsiders get 404; someone who
reads the department without administering it, 403. Every form posts to its own view, which
answers with a redirect to the page and a message (the page's forms post through HTMX and swap
the page's main part; without JavaScript they post as usual)."""

from __future__ import annotations

from decimal import Decimal

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_POST

from allocations.admission.project_caps import project_caps_set
from allocations.models import Flavor, ProjectQuota
from allocations.quotas.wording import quota_scope_name
from frontend.department_forms import CapForm, MemberAddForm, ProjectCreateForm, ProjectEditForm, ProjectMemberAddForm
from frontend.departments import administered_departments, department_page
from frontend.http import portal_user
from kernel.errors import ApplicationError
from kernel.numbers import plain
from tenants import self_service, services
from tenants.access import access_for
from tenants.models import Department, Project
from tenants.selectors import department_get, membership_get, project_get, project_member_get


def _administered(user: User, department_id: int) -> Department:
    department = department_get(user=user, department_id=department_id)  # 404 for outsiders
    if not access_for(user).can_administer_department(department.pk):
        raise PermissionDenied("Only the department's admins manage it.")
    return department


def _project(user: User, project_id: int) -> Project:
    project = project_get(user=user, project_id=project_id)
    _administered(user, project.department_id)
    return project


def _back(department_id: int) -> HttpResponse:
    return redirect("department", department_id=department_id)


def _form_errors(request: HttpRequest, form: forms.Form) -> None:
    for name, errors in form.errors.items():
        label = "" if name == "__all__" else f"{name}: "
        for error in errors:
            messages.error(request, f"{label}{error}")


def _refused(request: HttpRequest, error: ApplicationError) -> None:
    if error.fields:
        for name, texts in error.fields.items():
            for text in texts:
                messages.error(request, f"{name}: {text}")
    else:
        messages.error(request, error.message)


@require_GET
@login_required
def departments(request: HttpRequest) -> HttpResponse:
    user = portal_user(request)
    listed = list(administered_departments(user=user))
    if not listed and not access_for(user).is_platform_admin:
        raise PermissionDenied("The department pages are for department admins.")
    if len(listed) == 1:
        return _back(listed[0].pk)
    return render(request, "frontend/departments.html", {"title": "Departments", "departments": listed})


@require_GET
@login_required
def department(request: HttpRequest, department_id: int) -> HttpResponse:
    user = portal_user(request)
    found = _administered(user, department_id)
    return render(request, "frontend/department.html", department_page(user=user, department=found))


@require_POST
@login_required
def department_member_add(request: HttpRequest, department_id: int) -> HttpResponse:
    user = portal_user(request)
    found = _administered(user, department_id)
    form = MemberAddForm(request.POST, platform_admin=access_for(user).is_platform_admin)
    if not form.is_valid():
        _form_errors(request, form)
        return _back(found.pk)
    try:
        member = self_service.user_find(query=form.cleaned_data["user"])
        membership = self_service.department_member_add(actor=user, department=found, user=member,
                                                        role=form.cleaned_data["role"])
    except ApplicationError as error:
        _refused(request, error)
    else:
        messages.success(request, f"{member.get_username()} is now {membership.get_role_display().lower()} of {found.slug}.")
    return _back(found.pk)


@require_POST
@login_required
def department_member_remove(request: HttpRequest, department_id: int, membership_id: int) -> HttpResponse:
    user = portal_user(request)
    found = _administered(user, department_id)
    membership = membership_get(user=user, department_id=found.pk, membership_id=membership_id)
    try:
        removed = self_service.department_member_remove(actor=user, membership=membership)
    except ApplicationError as error:
        _refused(request, error)
    else:
        also = f" and from project{'s' if len(removed) > 1 else ''} {', '.join(removed)}" if removed else ""
        messages.success(request, f"{membership.user.get_username()} is no longer "
                         f"{membership.get_role_display().lower()} of {found.slug}{also}.")
    return _back(found.pk)


@require_POST
@login_required
def department_project_new(request: HttpRequest, department_id: int) -> HttpResponse:
    user = portal_user(request)
    found = _administered(user, department_id)
    form = ProjectCreateForm(request.POST)
    if not form.is_valid():
        _form_errors(request, form)
        return _back(found.pk)
    try:
        project = services.project_create(actor=user, department=found, **form.cleaned_data)
    except ApplicationError as error:
        _refused(request, error)
    except ValidationError as error:  # the model's own checks: a slug taken, or not a namespace name
        for name, texts in error.message_dict.items():
            for text in texts:
                messages.error(request, f"{name}: {text}")
    else:
        messages.success(request, f"Project {project.slug} created.")
    return _back(found.pk)


@require_POST
@login_required
def project_edit(request: HttpRequest, project_id: int) -> HttpResponse:
    user = portal_user(request)
    project = _project(user, project_id)
    form = ProjectEditForm(request.POST)
    if form.is_valid():
        services.project_update(actor=user, project_id=project.pk, **form.cleaned_data)
        messages.success(request, f"Project {project.slug} saved.")
    else:
        _form_errors(request, form)
    return _back(project.department_id)


@require_POST
@login_required
def project_member_add(request: HttpRequest, project_id: int) -> HttpResponse:
    user = portal_user(request)
    project = _project(user, project_id)
    form = ProjectMemberAddForm(request.POST)
    if not form.is_valid():
        _form_errors(request, form)
        return _back(project.department_id)
    try:
        member = self_service.user_find(query=form.cleaned_data["user"])
        granted = self_service.project_member_add(actor=user, project=project, user=member)
    except ApplicationError as error:
        _refused(request, error)
    else:
        also = f" (and researcher of {project.department.slug})" if granted else ""
        messages.success(request, f"{member.get_username()} added to project {project.slug}{also}.")
    return _back(project.department_id)


@require_POST
@login_required
def project_member_remove(request: HttpRequest, project_id: int, user_id: int) -> HttpResponse:
    user = portal_user(request)
    project = _project(user, project_id)
    member = project_member_get(project=project, user_id=user_id)
    assert isinstance(member, User)
    try:
        self_service.project_member_remove(actor=user, project=project, user=member)
    except ApplicationError as error:
        _refused(request, error)
    else:
        messages.success(request, f"{member.get_username()} removed from project {project.slug}.")
    return _back(project.department_id)


@require_POST
@login_required
def project_cap_set(request: HttpRequest, project_id: int) -> HttpResponse:
    """Set, change or (with an empty limit) remove one of the project's caps."""
    user = portal_user(request)
    project = _project(user, project_id)
    form = CapForm(request.POST)
    if not form.is_valid():
        _form_errors(request, form)
        return _back(project.department_id)
    flavor_id, limit = form.cleaned_data["flavor"], form.cleaned_data["limit"]
    flavor = Flavor.objects.filter(pk=flavor_id).first() if flavor_id is not None else None
    if flavor_id is not None and flavor is None:
        messages.error(request, "flavor: No such flavor.")
        return _back(project.department_id)
    with transaction.atomic():
        Project.objects.select_for_update(no_key=True).get(pk=project.pk)  # the service's lock, taken first: one order
        caps: list[tuple[Flavor | None, Decimal]] = [
            (row.flavor, row.limit) for row in
            ProjectQuota.objects.filter(project=project).select_related("flavor").order_by("pk")
            if row.flavor_id != flavor_id
        ]
        if limit is not None:
            caps.append((flavor, limit))
        try:
            project_caps_set(actor=user, project=project, caps=caps)
        except ApplicationError as error:
            _refused(request, error)
            return _back(project.department_id)
    what = quota_scope_name(flavor)
    done = f"capped at {plain(limit)} {what}" if limit is not None else f"no longer capped in {what}"
    messages.success(request, f"Project {project.slug} is {done}.")
    return _back(project.department_id)
