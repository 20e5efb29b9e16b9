"""The auditor's writes: publishing a checkpoint on request."""

from __future__ import annotations

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db import transaction

from audit import actions
from audit.checkpoints import checkpoint_publish
from audit.models import AuditCheckpoint, AuditEvent
from audit.services import audit_record


@transaction.atomic
def _checkpoint_request_record(*, actor: AbstractBaseUser | AnonymousUser, via: str | None = None) -> AuditEvent:
    """The audit event of a checkpoint requested by a person (``via`` recorded when given)."""
    return audit_record(
        actor=actor, action=actions.AUDIT_CHECKPOINT_REQUESTED, details={"via": via} if via is not None else None
    )


def audit_checkpoint_publish(*, actor: AbstractBaseUser | AnonymousUser, via: str | None = None) -> AuditCheckpoint:
    """Record the request (in its own transaction, so it stays recorded when signing fails), then
    sign a checkpoint of everything committed so far. ``AuditIntegrityError`` and
    ``ImproperlyConfigured`` propagate, for the caller to answer in its own way."""
    _checkpoint_request_record(actor=actor, via=via)
    return checkpoint_publish()
