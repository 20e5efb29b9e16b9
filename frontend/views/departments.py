"""The department pages (docs/departments.md): department admins (and platform admins) manage the
roles held on a department, its projects, their members and caps. Outsiders get 404; someone who
reads the department without administering it, 403. Every form posts to its own view, which
answers with a redirect to the page and a message, or, when it refuses, with the page again (400):
the form as it was filled in, each error next to its field. Removing someone asks first: a post
without ``confirm=yes`` answers with a page that asks (the page's script asks in a dialog before
posting, with it). The page's forms post through HTMX and swap the page's main part; without
JavaScript they post as usual."""

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
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from allocations.admission.project_caps import project_caps_set
from allocations.models import Flavor, ProjectQuota
from allocations.quotas.wording import quota_scope_name
from frontend.department_forms import CapForm, MemberAddForm, ProjectCreateForm, ProjectEditForm, ProjectMemberAddForm
from frontend.departments import Refused, administered_departments, department_page
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


def _refused(
    request: HttpRequest, department: Department, *, form: str, errors: dict[str, list[str]], main: str,
    project: Project | None = None,
) -> HttpResponse:
    """The page again (400) with the refused form as it was filled in; an error that names no field
    of the form stands next to its ``main`` field."""
    values = {name: str(value) for name, value in request.POST.items() if name != "csrfmiddlewaretoken"}
    placed: dict[str, list[str]] = {}
    for name, texts in errors.items():
        placed.setdefault(name if name in values and name != "__all__" else main, []).extend(texts)
    refused = Refused(form=form, project=project.pk if project is not None else None, values=values, errors=placed)
    context = department_page(user=portal_user(request), department=department, refused=refused)
    return render(request, "frontend/department.html", context, status=400)


def _service_errors(error: ApplicationError) -> dict[str, list[str]]:
    return {name: list(texts) for name, texts in error.fields.items()} or {"__all__": [error.message]}


def _form_errors(form: forms.Form) -> dict[str, list[str]]:
    return {name: [str(text) for text in texts] for name, texts in form.errors.items()}


def _confirm_first(request: HttpRequest, *, question: str, consequence: str, yes: str, back: str) -> HttpResponse | None:
    """Without ``confirm=yes``, the page that asks (a removal is never one click)."""
    if request.POST.get("confirm") == "yes":
        return None
    context = {"title": question, "question": question, "consequence": consequence, "yes": yes, "back": back,
               "action": request.path}
    return render(request, "frontend/confirm_action.html", context)


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
        return _refused(request, found, form="member-add", errors=_form_errors(form), main="user")
    try:
        member = self_service.user_find(query=form.cleaned_data["user"])
        membership = self_service.department_member_add(actor=user, department=found, user=member,
                                                        role=form.cleaned_data["role"])
    except ApplicationError as error:
        return _refused(request, found, form="member-add", errors=_service_errors(error), main="user")
    messages.success(request, f"{member.get_username()} is now {membership.get_role_display().lower()} of {found.slug}.")
    return _back(found.pk)


@require_POST
@login_required
def department_member_remove(request: HttpRequest, department_id: int, membership_id: int) -> HttpResponse:
    user = portal_user(request)
    found = _administered(user, department_id)
    membership = membership_get(user=user, department_id=found.pk, membership_id=membership_id)
    name, role = membership.user.get_username(), membership.get_role_display().lower()
    asked = _confirm_first(
        request, question=f"Remove {name} as {role} of {found.slug}?",
        consequence=f"{name} loses this role at once; without a role left in {found.slug} they also leave its "
        "projects. Adding them again gives the role back, not the projects.",
        yes=f"Yes, remove {name}", back=reverse("department", args=[found.pk]) + "#members",
    )
    if asked is not None:
        return asked
    try:
        removed = self_service.department_member_remove(actor=user, membership=membership)
    except ApplicationError as error:
        messages.error(request, error.message)
    else:
        also = f" and from project{'s' if len(removed) > 1 else ''} {', '.join(removed)}" if removed else ""
        messages.success(request, f"{name} is no longer {role} of {found.slug}{also}.")
    return _back(found.pk)


@require_POST
@login_required
def department_project_new(request: HttpRequest, department_id: int) -> HttpResponse:
    user = portal_user(request)
    found = _administered(user, department_id)
    form = ProjectCreateForm(request.POST)
    if not form.is_valid():
        return _refused(request, found, form="project-new", errors=_form_errors(form), main="slug")
    try:
        project = services.project_create(actor=user, department=found, **form.cleaned_data)
    except ApplicationError as error:
        return _refused(request, found, form="project-new", errors=_service_errors(error), main="slug")
    except ValidationError as error:  # the model's own checks: a slug taken, or not a namespace name
        return _refused(request, found, form="project-new", errors=dict(error.message_dict), main="slug")
    messages.success(request, f"Project {project.slug} created.")
    return _back(found.pk)


@require_POST
@login_required
def project_edit(request: HttpRequest, project_id: int) -> HttpResponse:
    user = portal_user(request)
    project = _project(user, project_id)
    form = ProjectEditForm(request.POST)
    if not form.is_valid():
        return _refused(request, project.department, form="project-edit", project=project,
                        errors=_form_errors(form), main="name")
    services.project_update(actor=user, project_id=project.pk, **form.cleaned_data)
    messages.success(request, f"Project {project.slug} saved.")
    return _back(project.department_id)


@require_POST
@login_required
def project_member_add(request: HttpRequest, project_id: int) -> HttpResponse:
    user = portal_user(request)
    project = _project(user, project_id)
    form = ProjectMemberAddForm(request.POST)
    if not form.is_valid():
        return _refused(request, project.department, form="project-member", project=project,
                        errors=_form_errors(form), main="user")
    try:
        member = self_service.user_find(query=form.cleaned_data["user"])
        granted = self_service.project_member_add(actor=user, project=project, user=member)
    except ApplicationError as error:
        return _refused(request, project.department, form="project-member", project=project,
                        errors=_service_errors(error), main="user")
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
    name = member.get_username()
    asked = _confirm_first(
        request, question=f"Remove {name} from project {project.slug}?",
        consequence=f"{name} is no longer a member of {project.slug} and can no longer request GPUs for it. "
        "They keep their role in the department.",
        yes=f"Yes, remove {name} from {project.slug}", back=reverse("department", args=[project.department_id])
        + f"#project-{project.pk}",
    )
    if asked is not None:
        return asked
    try:
        self_service.project_member_remove(actor=user, project=project, user=member)
    except ApplicationError as error:
        messages.error(request, error.message)
    else:
        messages.success(request, f"{name} removed from project {project.slug}.")
    return _back(project.department_id)


@require_POST
@login_required
def project_cap_set(request: HttpRequest, project_id: int) -> HttpResponse:
    """Set, change or (with an empty limit) remove one of the project's caps."""
    user = portal_user(request)
    project = _project(user, project_id)
    form = CapForm(request.POST)
    if not form.is_valid():
        return _refused(request, project.department, form="project-cap", project=project,
                        errors=_form_errors(form), main="limit")
    flavor_id, limit = form.cleaned_data["flavor"], form.cleaned_data["limit"]
    flavor = Flavor.objects.filter(pk=flavor_id).first() if flavor_id is not None else None
    if flavor_id is not None and flavor is None:
        return _refused(request, project.department, form="project-cap", project=project,
                        errors={"flavor": ["No such flavor."]}, main="limit")
    with transaction.atomic():
        Project.objects.select_for_update(no_key=True).get(pk=project.pk)  # the service's lock, taken first: one order
        caps: list[tuple[Flavor | None, Decimal]] = [
            (row.flavor, row.limit) for row in
            ProjectQuota.objects.filter(project=project).select_related("flavor").order_by("pk")
            if row.flavor_id != flavor_id
        ]
        if limit is not None:
            caps.append((flavor, limit))
        refusal: ApplicationError | None = None
        try:
            project_caps_set(actor=user, project=project, caps=caps)
        except ApplicationError as error:
            refusal = error
    if refusal is not None:
        return _refused(request, project.department, form="project-cap", project=project,
                        errors=_service_errors(refusal), main="limit")
    what = quota_scope_name(flavor)
    done = f"capped at {plain(limit)} {what}" if limit is not None else f"no longer capped in {what}"
    messages.success(request, f"Project {project.slug} is {done}.")
    return _back(project.department_id)
