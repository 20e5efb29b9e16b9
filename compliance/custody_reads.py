"""Who may read which custody: as the audit log (``compliance.access``): auditors of an
organisation and platform admins everything, department admins and auditors of a department its
subtree's projects' intervals (rows of no department, such as a GPU used outside any project, only
the former); everybody else nothing (404). One audited download for the API and the page."""

from __future__ import annotations

import datetime
from typing import Any

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db import transaction
from django.http import Http404, HttpResponse

from allocations.models import Allocation
from audit import actions
from audit.services import audit_record
from compliance.access import audit_visibility_for
from custody.anchors import custody_anchor
from custody.chain import time_text
from custody.exports import bundle_lines, csv_text, jsonl_lines
from custody.selectors import CustodyQuery, custody_answer
from kernel.clock import clock_now
from kernel.errors import FieldError

CONTENT_TYPES = {"csv": "text/csv; charset=utf-8", "jsonl": "application/x-ndjson", "bundle": "application/x-ndjson"}
SUFFIXES = {"csv": "csv", "jsonl": "jsonl", "bundle": "custody-bundle.jsonl"}


def custody_query_for(
    *, user: AbstractBaseUser | AnonymousUser, device: str = "", pod: str = "", allocation_id: int | None = None,
    time_from: datetime.datetime | None = None, time_to: datetime.datetime | None = None,
) -> CustodyQuery:
    """The query a reader may run: 404 for a reader of no custody and for a grant outside their view."""
    visibility = audit_visibility_for(user=user)
    if not visibility.any:
        raise Http404("No custody is visible to you.")
    if not (device or pod or allocation_id is not None):
        raise FieldError("device", "Name a device (GPU, MIG device or replica ID), a pod or an allocation.")
    if time_from is not None and time_to is not None and time_from >= time_to:
        raise FieldError("to", "to must be after from.")
    departments = None if visibility.everything else visibility.department_ids
    if allocation_id is not None and departments is not None:
        department = Allocation.objects.filter(pk=allocation_id).values_list("project__department_id", flat=True).first()
        if department not in departments:
            raise Http404("No such allocation.")
    return CustodyQuery(device=device, pod=pod, allocation_id=allocation_id, time_from=time_from, time_to=time_to,
                        department_ids=departments)  # fmt: skip


def query_words(query: CustodyQuery) -> dict[str, Any]:
    return {"device": query.device or None, "pod": query.pod or None, "allocation": query.allocation_id,
            "from": time_text(query.time_from), "to": time_text(query.time_to)}  # fmt: skip


@transaction.atomic
def custody_export_response(*, actor: AbstractBaseUser | AnonymousUser, query: CustodyQuery, output: str) -> HttpResponse:
    """The answer as CSV, JSON Lines or a bundle; recorded (and, for a bundle, the chain heads
    anchored in the audit log) in the same transaction."""
    rows, truncated = custody_answer(query=query)
    audit_record(actor=actor, action=actions.CUSTODY_EXPORTED,
                 details={"output": output, "query": query_words(query), "rows": len(rows), "truncated": truncated})  # fmt: skip
    if output == "csv":
        body = csv_text(rows)
    elif output == "jsonl":
        body = "".join(jsonl_lines(rows))
    else:
        custody_anchor()
        body = "".join(bundle_lines(rows=rows, query=query_words(query), exported_at=str(time_text(clock_now()))))
    response = HttpResponse(body, content_type=CONTENT_TYPES[output])
    response["Content-Disposition"] = f'attachment; filename="custody.{SUFFIXES[output]}"'
    response["Cache-Control"] = "no-store"
    if truncated:
        response["X-Custody-Truncated"] = "true"
    return response
