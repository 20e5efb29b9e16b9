"""The one way an audit export is served over HTTP, for the API and the portal alike: the export is
audited first (in its own transaction), a bundle gets a signed checkpoint, then the events stream."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db import transaction
from django.http import StreamingHttpResponse

from audit import actions
from audit.export import CONTENT_TYPES, audit_export, checkpoint_for_export, export_filename
from audit.models import AuditEvent
from audit.selectors import AuditFilters
from audit.services import audit_record


@transaction.atomic
def _export_record(
    *, actor: AbstractBaseUser | AnonymousUser, filters: AuditFilters, output: str, department_id: int | None,
    via: str | None = None,
) -> AuditEvent:
    """The audit event of an export: its output, its scope, and ``via`` when given ("portal")."""
    details: dict[str, Any] = {"output": output, "scope": filters.scope().to_json()}
    if via is not None:
        details["via"] = via
    return audit_record(actor=actor, action=actions.AUDIT_EXPORTED, department_id=department_id, details=details)


def audit_export_response(
    *, actor: AbstractBaseUser | AnonymousUser, filters: AuditFilters, output: str, department_id: int | None,
    via: str | None = None,
) -> StreamingHttpResponse:
    """The streamed download of ``filters``' events as ``output`` ("jsonl", "csv" or "bundle").

    The export is recorded before anything else. A bundle needs a signed checkpoint: when none can
    be signed, ``AuditIntegrityError`` (the log failed its own check) or ``ImproperlyConfigured``
    (no signing key or checkpoint folder) propagates, for the caller to answer in its own way; the
    export's event stays recorded.
    """
    _export_record(actor=actor, filters=filters, output=output, department_id=department_id, via=via)
    checkpoint = checkpoint_for_export() if output == "bundle" else None
    response = StreamingHttpResponse(
        audit_export(filters=filters, output=output, checkpoint=checkpoint), content_type=CONTENT_TYPES[output]
    )
    response["Content-Disposition"] = f'attachment; filename="{export_filename(output)}"'
    response["Cache-Control"] = "no-store"
    return response
