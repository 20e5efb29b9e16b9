"""The one way an audit export is served, over HTTP for the API and the portal alike and to a file
or standard output for ``manage.py audit_export``: the export is audited first (in its own
transaction, ``audit_export_record``), a bundle gets a signed checkpoint, then the events stream."""

from __future__ import annotations

from collections.abc import Iterator
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
def audit_export_record(
    *, actor: AbstractBaseUser | AnonymousUser | None, filters: AuditFilters, output: str, department_id: int | None,
    via: str | None = None, extra: dict[str, Any] | None = None,
) -> AuditEvent:
    """The audit event of an export: its output, its scope, ``via`` when given ("portal", "cli")
    and what else the caller knows (the command line's destination and operating-system user)."""
    details: dict[str, Any] = {"output": output, "scope": filters.scope().to_json()}
    if via is not None:
        details["via"] = via
    details.update(extra or {})
    return audit_record(actor=actor, action=actions.AUDIT_EXPORTED, department_id=department_id, details=details)


def audit_export_stream(
    *, actor: AbstractBaseUser | AnonymousUser | None, filters: AuditFilters, output: str, department_id: int | None,
    via: str | None = None, extra: dict[str, Any] | None = None,
) -> Iterator[bytes]:
    """Record the export, sign a checkpoint for a bundle, and return the stream of its bytes.
    ``AuditIntegrityError`` and ``ImproperlyConfigured`` propagate (no checkpoint can be signed);
    the export's event stays recorded."""
    audit_export_record(
        actor=actor, filters=filters, output=output, department_id=department_id, via=via, extra=extra
    )
    checkpoint = checkpoint_for_export() if output == "bundle" else None
    return audit_export(filters=filters, output=output, checkpoint=checkpoint)


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
    stream = audit_export_stream(actor=actor, filters=filters, output=output, department_id=department_id, via=via)
    response = StreamingHttpResponse(stream, content_type=CONTENT_TYPES[output])
    response["Content-Disposition"] = f'attachment; filename="{export_filename(output)}"'
    response["Cache-Control"] = "no-store"
    return response
