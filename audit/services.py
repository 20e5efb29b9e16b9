"""Writing audit events. Call from inside the service's transaction so the event and the change
commit or roll back together."""

from __future__ import annotations

import re
from typing import Any

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db import models
from django.utils import timezone

from audit.actions import AuditAction
from audit.models import AuditEvent, Outcome
from gpuportal.request_context import current_request_context

_SECRET_KEY_PATTERN = re.compile(r"pass(word)?|secret|token|kubeconfig|private|credential", re.IGNORECASE)
_CONTROL_CHARACTERS = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def _escape(text: str) -> str:
    """Escape control characters (CR, LF, ANSI escapes) so a log line cannot be forged."""
    return _CONTROL_CHARACTERS.sub(lambda match: f"\\x{ord(match.group()):02x}", text)


def _scrub(value: Any) -> Any:
    if isinstance(value, dict):
        return {
            _escape(str(key)): ("[redacted]" if _SECRET_KEY_PATTERN.search(str(key)) else _scrub(inner))
            for key, inner in value.items()
        }
    if isinstance(value, (list, tuple)):
        return [_scrub(item) for item in value]
    if isinstance(value, str):
        return _escape(value)
    if value is None or isinstance(value, (bool, int, float)):
        return value
    return _escape(str(value))


def audit_record(
    *,
    actor: AbstractBaseUser | AnonymousUser | None,
    action: AuditAction,
    target: models.Model | None = None,
    department_id: int | None = None,
    before: dict[str, Any] | None = None,
    after: dict[str, Any] | None = None,
    details: dict[str, Any] | None = None,
    outcome: str = Outcome.SUCCESS,
) -> AuditEvent:
    context = current_request_context()
    authenticated = actor is not None and actor.is_authenticated
    return AuditEvent.objects.create(
        occurred_at=timezone.now(),
        actor_id=actor.pk if authenticated and actor is not None else None,
        actor_username=_escape(actor.get_username()) if authenticated and actor is not None else "",
        action=action.code,
        target_type=target._meta.label_lower if target is not None else "",
        target_id=str(target.pk) if target is not None else "",
        department_id=department_id,
        before=_scrub(before or {}),
        after=_scrub(after or {}),
        details=_scrub(details or {}),
        outcome=outcome,
        request_id=context.request_id,
        source_ip=context.source_ip or "",
        user_agent=_escape(context.user_agent),
    )
