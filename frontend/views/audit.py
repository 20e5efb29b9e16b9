"""The auditor's page: the audit log with filters, export downloads, the latest checkpoint and a
verification of the whole log on demand."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import urlencode

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.cache import cache
from django.core.exceptions import ImproperlyConfigured, PermissionDenied
from django.core.paginator import Paginator
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, StreamingHttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from audit.actions import get_action
from audit.checkpoints import AuditIntegrityError
from audit.integrity.errors import VerificationFailure
from audit.models import AuditCheckpoint, AuditEvent
from audit.selectors import AuditFilters, audit_event_list
from audit.verification import audit_log_verify
from compliance.access import (
    AuditVisibility,
    audit_event_get,
    audit_event_neighbours,
    audit_filters_for,
    audit_visibility_for,
)
from compliance.bundle_checks import audit_bundle_verify
from compliance.exports import audit_export_response
from compliance.services import audit_checkpoint_publish
from frontend.audit_links import target_links
from frontend.forms import AuditFilterForm, action_family
from frontend.http import portal_user
from kernel.clock import clock_now
from kernel.words import counted
from tenants.models import Department

PAGE_SIZE = 50
EXPORT_OUTPUTS = (("csv", "CSV"), ("jsonl", "JSON Lines"), ("bundle", "Verifiable bundle"))
VERIFICATION_CACHE_KEY = "gpuportal:audit:last-verification"


def _visibility(request: HttpRequest) -> AuditVisibility:
    visibility = audit_visibility_for(user=portal_user(request))
    if not visibility.any:
        raise PermissionDenied("Only auditors, platform admins and department admins read the audit log.")
    return visibility


def _departments(visibility: AuditVisibility) -> QuerySet[Department]:
    departments = Department.objects.order_by("slug")
    return departments if visibility.everything else departments.filter(id__in=visibility.department_ids)


def _export_links(request: HttpRequest) -> list[tuple[str, str]]:
    """Download links carrying the page's filters (all but the outcome, which exports do not filter)."""
    query = {key: value for key, value in request.GET.items() if value and key not in ("page", "outcome", "output")}
    base = reverse("audit-export")
    return [(label, f"{base}?{urlencode({**query, 'output': output})}") for output, label in EXPORT_OUTPUTS]


def _filters(visibility: AuditVisibility, data: dict[str, Any]) -> AuditFilters:
    return audit_filters_for(
        visibility=visibility,
        department_id=data["department"].pk if data.get("department") else None,
        time_from=data.get("start"), time_to=data.get("end"),
        actor=data.get("actor") or None, action=data.get("action") or None,
    )


def _events(visibility: AuditVisibility, data: dict[str, Any]) -> QuerySet[AuditEvent]:
    events = audit_event_list(filters=_filters(visibility, data))
    if data.get("outcome"):
        events = events.filter(outcome=data["outcome"])
    return events.order_by("-pk")


@require_GET
@login_required
def audit_log(request: HttpRequest) -> HttpResponse:
    visibility = _visibility(request)
    form = AuditFilterForm(request.GET or None, departments=_departments(visibility))
    data = form.cleaned_data if form.is_bound and form.is_valid() else {}
    events = _events(visibility, data) if not form.errors else AuditEvent.objects.none()
    page = Paginator(events, PAGE_SIZE).get_page(request.GET.get("page"))
    links = target_links(user=portal_user(request), events=page.object_list)
    context = {
        "title": "Audit log",
        "form": form,
        "page": page,
        "rows": [(event, links.get(event.seq)) for event in page.object_list],
        "query": urlencode({k: v for k, v in request.GET.items() if k != "page" and v}),
        "exports": _export_links(request) if not form.errors else [],
        "department_slugs": dict(Department.objects.values_list("id", "slug")),
        "checkpoint": AuditCheckpoint.objects.order_by("-number").first(),
        "last_seq": AuditEvent.objects.order_by("-pk").values_list("pk", flat=True).first() or 0,
        "verification": cache.get(VERIFICATION_CACHE_KEY),
        "can_verify": visibility.everything,
    }
    return render(request, "frontend/audit_log.html", context, status=400 if form.errors else 200)


@require_GET
@login_required
def audit_event(request: HttpRequest, seq: int) -> HttpResponse:
    """One event with all its fields and its place in the hash chain, for whoever may list it (the
    list's rules exactly); an event outside the reader's view, or any event for someone who reads
    none, is 404, so that nobody learns whether it exists."""
    user = portal_user(request)
    visibility = audit_visibility_for(user=user)
    event = audit_event_get(visibility=visibility, seq=seq)
    previous, following = audit_event_neighbours(visibility=visibility, seq=seq)
    try:
        description = get_action(event.action).description
    except ValueError:  # a code no longer registered still reads as recorded
        description = ""
    context = {
        "title": f"Audit event {event.seq}",
        "event": event,
        "description": description,
        "family": action_family(event.action),
        "target_url": target_links(user=user, events=[event]).get(event.seq),
        "department": Department.objects.filter(pk=event.department_id).values_list("slug", flat=True).first()
        if event.department_id is not None else None,
        "previous": previous,
        "following": following,
        "checkpoint": AuditCheckpoint.objects.filter(size__gte=event.seq).order_by("number").first(),
        "changes": [(label, json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False))
                    for label, value in (("Before", event.before), ("After", event.after), ("Details", event.details))
                    if value],  # fmt: skip
    }
    return render(request, "frontend/audit_event.html", context)


@require_POST
@login_required
def audit_verify(request: HttpRequest) -> HttpResponse:
    """Replay the whole log against its checkpoints now (auditors and platform admins)."""
    if not _visibility(request).everything:
        raise PermissionDenied("Only auditors of the whole organisation and platform admins verify the log.")
    result: dict[str, Any] = {"at": clock_now(), "by": portal_user(request).get_username()}
    try:
        report = audit_log_verify()
    except ImproperlyConfigured as error:
        messages.error(request, f"Verification cannot run: {error}")
        return redirect("audit-log")
    except VerificationFailure as failure:
        result.update(ok=False, summary=str(failure))
        messages.error(request, f"Verification FAILED: {failure}")
    else:
        result.update(ok=True, summary=report.summary())
        messages.success(request, "Verification passed: " + report.summary().splitlines()[0])
    cache.set(VERIFICATION_CACHE_KEY, result, timeout=None)
    return redirect("audit-log")


@require_POST
@login_required
def audit_bundle_verify_upload(request: HttpRequest) -> HttpResponse:
    """Verify an uploaded export bundle with the offline verifier's two answers: genuine, and
    complete as of now (against the portal's latest checkpoint). Anyone who reads the audit log."""
    _visibility(request)
    upload = request.FILES.get("bundle")
    if upload is None:
        messages.error(request, "Choose an export bundle (the JSON Lines file of a \"Verifiable bundle\" download).")
        return redirect("audit-log")
    try:
        verdict = audit_bundle_verify(lines=iter(upload))
    except ImproperlyConfigured as error:
        messages.error(request, f"Verification cannot run: {error}")
        return redirect("audit-log")
    context = {"title": "Bundle verification", "verdict": verdict, "name": upload.name}
    return render(request, "frontend/audit_bundle_verify.html", context)


@require_GET
@login_required
def audit_export_download(request: HttpRequest) -> HttpResponse | StreamingHttpResponse:
    """The filtered events as CSV, JSON Lines or a verifiable bundle; the export itself is audited."""
    visibility = _visibility(request)
    output = request.GET.get("output", "csv")
    form = AuditFilterForm(request.GET, departments=_departments(visibility))
    if output not in dict(EXPORT_OUTPUTS) or not form.is_valid():
        messages.error(request, "The export filters are not valid; correct them and try again.")
        return redirect("audit-log")
    department = form.cleaned_data.get("department")
    try:
        return audit_export_response(
            actor=portal_user(request), filters=_filters(visibility, form.cleaned_data), output=output,
            department_id=department.pk if department else None, via="portal",
        )
    except (AuditIntegrityError, ImproperlyConfigured) as error:
        messages.error(request, f"No bundle: a checkpoint cannot be signed ({error}).")
        return redirect("audit-log")


@require_POST
@login_required
def audit_checkpoint(request: HttpRequest) -> HttpResponse:
    """Sign a checkpoint of everything recorded so far (auditors and platform admins)."""
    if not _visibility(request).everything:
        raise PermissionDenied("Only auditors of the whole organisation and platform admins publish checkpoints.")
    try:
        checkpoint = audit_checkpoint_publish(actor=portal_user(request), via="portal")
    except (AuditIntegrityError, ImproperlyConfigured) as error:
        messages.error(request, f"No checkpoint published: {error}")
    else:
        messages.success(request, f"Checkpoint #{checkpoint.number} signed over {counted(checkpoint.size, 'event')}.")
    return redirect("audit-log")
