"""The auditor's custody page: who held a device, what a pod or a grant held, between two times,
with the gaps of the nodes involved, and the downloads (CSV, JSON Lines, a verifiable bundle)."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from django import forms
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_GET

from compliance.access import audit_visibility_for
from compliance.custody_reads import custody_export_response, custody_query_for
from custody.selectors import CustodyQuery, custody_answer
from frontend.forms import DATETIME_INPUT_FORMATS, DateTimeLocalInput
from frontend.http import portal_user
from kernel.errors import FieldError
from kernel.words import counted

OUTPUTS = (("csv", "CSV"), ("jsonl", "JSON Lines"), ("bundle", "Verifiable bundle"))


class CustodyForm(forms.Form):
    device = forms.CharField(required=False, max_length=128, label="Device (GPU UUID, MIG device or replica ID)")
    pod = forms.CharField(required=False, max_length=320, label="Pod (UID, or namespace/name)")
    allocation = forms.IntegerField(required=False, min_value=1, max_value=2**31 - 1, label="Allocation (grant) id")
    start = forms.DateTimeField(required=False, input_formats=DATETIME_INPUT_FORMATS, widget=DateTimeLocalInput(),
                                label="From (UTC)")  # fmt: skip
    end = forms.DateTimeField(required=False, input_formats=DATETIME_INPUT_FORMATS, widget=DateTimeLocalInput(),
                              label="Until (UTC)")  # fmt: skip


def _query(request: HttpRequest, form: CustodyForm) -> CustodyQuery | None:
    """The page's query, or None while the form asks for nothing valid (its errors say why)."""
    if not form.is_valid() or not any(form.cleaned_data.get(name) for name in ("device", "pod", "allocation")):
        return None
    data = form.cleaned_data
    try:
        return custody_query_for(user=portal_user(request), device=data["device"], pod=data["pod"],
                                 allocation_id=data["allocation"], time_from=data["start"], time_to=data["end"])  # fmt: skip
    except FieldError as error:
        for name, texts in (error.fields or {}).items():
            form.add_error("end" if name == "to" else name if name in form.fields else None, texts[0])
        return None


def _visible(request: HttpRequest) -> None:
    if not audit_visibility_for(user=portal_user(request)).any:
        raise PermissionDenied("Only auditors, platform admins and department admins read GPU custody.")


@login_required
@require_GET
def custody_page(request: HttpRequest) -> HttpResponse:
    _visible(request)
    form = CustodyForm(request.GET or None)
    try:
        query = _query(request, form) if request.GET else None
    except Http404:
        query = None
        form.add_error("allocation", "No such allocation among those you may read.")
    rows, truncated = custody_answer(query=query) if query is not None else ([], False)
    base = reverse("custody-export")
    filters = {key: value for key, value in request.GET.items() if value and key != "output"}
    context: dict[str, Any] = {
        "form": form, "rows": rows, "truncated": truncated, "asked": query is not None, "row_count": counted(len(rows), "row"),
        "exports": [(label, f"{base}?{urlencode({**filters, 'output': output})}") for output, label in OUTPUTS]
        if query is not None else [],
    }
    return render(request, "frontend/custody.html", context)


@login_required
@require_GET
def custody_export_download(request: HttpRequest) -> HttpResponse:
    _visible(request)
    form = CustodyForm(request.GET)
    query = _query(request, form)
    output = request.GET.get("output", "")
    if query is None or output not in dict(OUTPUTS):
        return HttpResponse("Name a device, a pod or an allocation, and an output (csv, jsonl, bundle).", status=400,
                            content_type="text/plain; charset=utf-8")  # fmt: skip
    return custody_export_response(actor=portal_user(request), query=query, output=output)
