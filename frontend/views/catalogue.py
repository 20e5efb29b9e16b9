"""The catalogue's forms (``frontend.catalogue_forms``): flavors, quotas and priority classes created
and edited by platform admins in the portal, through the services the API calls. A quota or a
priority class goes through ``allocations.rules.changes.rule_change_propose``: with four-eyes on it
waits for another platform admin (on the approvals page), unless it is an emergency with its
reason. A refusal is shown next to the field it names, with the input kept. Others get 403, as on
the other platform pages."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django import forms
from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied
from django.core.exceptions import ValidationError as DjangoValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_http_methods

from allocations.catalogue.selectors import flavor_get, flavor_list, priority_class_get, quota_get
from allocations.models import RuleChangeKind
from allocations.quotas.wording import quota_scope_name
from allocations.rules import catalogue as catalog
from allocations.rules.changes import RuleOutcome, rule_change_propose
from frontend.catalogue_forms import FlavorForm, PriorityClassForm, QuotaForm, QuotaNumbersForm, quota_initial
from frontend.http import form_add_service_error, portal_user
from kernel.errors import ApplicationError
from tenants.access import access_for
from tenants.selectors import department_list

VIA = "portal"


@dataclass(frozen=True)
class FormPage:
    title: str
    intro: str
    submit: str
    rule: bool  # a change of the rules: four-eyes applies


def _platform_admin(request: HttpRequest) -> User:
    user = portal_user(request)
    if not access_for(user).is_platform_admin:
        raise PermissionDenied("Only platform admins change the catalogue.")
    return user


def _render(request: HttpRequest, form: forms.BaseForm, page: FormPage, *, status: int = 200) -> HttpResponse:
    context = {"title": page.title, "page": page, "form": form,
               "four_eyes": page.rule and settings.GPUPORTAL_FOUR_EYES}
    return render(request, "frontend/catalogue_form.html", context, status=status)


def _refused(form: forms.BaseForm, error: Exception) -> None:
    """A service's refusal next to the field it names (``FieldError``, or a model's own check)."""
    if isinstance(error, ApplicationError):
        form_add_service_error(form, error)  # type: ignore[arg-type]
        return
    assert isinstance(error, DjangoValidationError)
    details = error.message_dict if hasattr(error, "error_dict") else {"__all__": error.messages}
    for field, texts in details.items():
        for text in texts:
            form.add_error(field if field in form.fields else None, text)


def _proposed(request: HttpRequest, outcome: RuleOutcome, what: str) -> HttpResponse:
    change = outcome.change
    if outcome.pending and change is not None:
        messages.success(request, f"{what}: rule change #{change.pk} waits for another platform admin's approval.")
        return redirect(f"{reverse('approvals')}#pending-rule-change-{change.pk}")
    if change is not None:
        messages.success(request, f"{what}: applied as an emergency (rule change #{change.pk}).")
    else:
        messages.success(request, f"{what}: saved.")
    return redirect("catalogue")


def _propose(request: HttpRequest, form: Any, page: FormPage, *, what: str, **target: Any) -> HttpResponse:
    """Propose the form's change of the rules; the form again (400) when it or the service refuses."""
    user = _platform_admin(request)
    if form.is_valid():
        proposal = form.proposal()
        if not proposal["fields"] and not target.get("kind", "").endswith((".create", ".set")):
            messages.info(request, f"{what}: nothing changed.")
            return redirect("catalogue")
        try:
            outcome = rule_change_propose(actor=user, via=VIA, **target, **proposal)
        except (ApplicationError, DjangoValidationError) as error:
            _refused(form, error)
        else:
            return _proposed(request, outcome, what)
    return _render(request, form, page, status=400)


# ---------------------------------------------------------------------------- flavors


def _flavor_saved(request: HttpRequest, form: FlavorForm, page: FormPage, *, user: User) -> HttpResponse:
    try:
        if form.instance.pk is None:
            flavor = catalog.flavor_create(actor=user, **form.service_fields())
        else:
            flavor = catalog.flavor_update(actor=user, flavor_id=form.instance.pk, **form.service_fields())
    except (ApplicationError, DjangoValidationError) as error:
        _refused(form, error)
        return _render(request, form, page, status=400)
    messages.success(request, f"Flavor {flavor.name}: saved.")
    return redirect("catalogue")


def _flavor_form(request: HttpRequest, *, flavor_id: int | None) -> HttpResponse:
    user = _platform_admin(request)
    flavor = flavor_get(user=user, flavor_id=flavor_id) if flavor_id is not None else None
    page = FormPage(
        title=f"Edit flavor {flavor.name}" if flavor else "New flavor",
        intro="A GPU model plus a sharing mode, as people request it and clusters advertise it. Saved at once "
              "and audited; a Volcano vGPU flavor's change is pushed to the clusters running Volcano.",
        submit="Save the flavor", rule=False,
    )
    form = FlavorForm(request.POST if request.method == "POST" else None, instance=flavor)
    if request.method == "POST":
        if form.is_valid():
            return _flavor_saved(request, form, page, user=user)
        return _render(request, form, page, status=400)
    return _render(request, form, page)


@require_http_methods(["GET", "POST"])
@login_required
def flavor_new(request: HttpRequest) -> HttpResponse:
    return _flavor_form(request, flavor_id=None)


@require_http_methods(["GET", "POST"])
@login_required
def flavor_edit(request: HttpRequest, flavor_id: int) -> HttpResponse:
    return _flavor_form(request, flavor_id=flavor_id)


# ---------------------------------------------------------------------------- quotas

QUOTA_INTRO = ("A department's guarantee and limit of one flavor's units, or of GPU-equivalents across every flavor. "
               "The guarantees of a department's children must fit within its own.")


@require_http_methods(["GET", "POST"])
@login_required
def quota_new(request: HttpRequest) -> HttpResponse:
    user = _platform_admin(request)
    page = FormPage(title="New quota", intro=QUOTA_INTRO, submit="Set the quota", rule=True)
    form = QuotaForm(request.POST if request.method == "POST" else None, departments=department_list(user=user),
                     flavors=flavor_list(user=user))
    if request.method == "POST":
        return _propose(request, form, page, what="Quota", kind=RuleChangeKind.QUOTA_SET)
    return _render(request, form, page)


@require_http_methods(["GET", "POST"])
@login_required
def quota_edit(request: HttpRequest, quota_id: int) -> HttpResponse:
    user = _platform_admin(request)
    quota = quota_get(user=user, quota_id=quota_id)
    page = FormPage(title=f"Quota of {quota.department.slug} for {quota_scope_name(quota.flavor)}", intro=QUOTA_INTRO, submit="Change the quota",
                    rule=True)
    form = QuotaNumbersForm(request.POST if request.method == "POST" else None, initial=quota_initial(quota))
    if request.method == "POST":
        return _propose(request, form, page, what=f"Quota #{quota.pk}", kind=RuleChangeKind.QUOTA_UPDATE,
                        quota_id=quota.pk)
    return _render(request, form, page)


# ---------------------------------------------------------------------------- priority classes

PRIORITY_INTRO = ("A Kubernetes PriorityClass pushed to every cluster, and how far a grant of it may go over its "
                  "department's quota (its oversubscription factor).")


@require_http_methods(["GET", "POST"])
@login_required
def priority_class_new(request: HttpRequest) -> HttpResponse:
    _platform_admin(request)
    page = FormPage(title="New priority class", intro=PRIORITY_INTRO, submit="Create the class", rule=True)
    form = PriorityClassForm(request.POST if request.method == "POST" else None)
    if request.method == "POST":
        return _propose(request, form, page, what="Priority class", kind=RuleChangeKind.PRIORITY_CLASS_CREATE)
    return _render(request, form, page)


@require_http_methods(["GET", "POST"])
@login_required
def priority_class_edit(request: HttpRequest, priority_class_id: int) -> HttpResponse:
    user = _platform_admin(request)
    found = priority_class_get(user=user, priority_class_id=priority_class_id)
    page = FormPage(title=f"Edit priority class {found.name}", intro=PRIORITY_INTRO, submit="Change the class", rule=True)
    form = PriorityClassForm(request.POST if request.method == "POST" else None, instance=found)
    if request.method == "POST":
        return _propose(request, form, page, what=f"Priority class {found.name}",
                        kind=RuleChangeKind.PRIORITY_CLASS_UPDATE, priority_class_id=found.pk)
    return _render(request, form, page)
