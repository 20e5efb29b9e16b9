"""Changes people make: their notification preferences, and departments' webhooks. Each writes its
audit event in the same transaction; a webhook's URL and secret are never in the audit log."""

from __future__ import annotations

import hashlib
import secrets

from django.contrib.auth.models import User
from django.db import transaction

from audit import actions
from audit.services import audit_record
from kernel.errors import FieldError, NotAllowed
from notifications import crypto
from notifications.events import EVENTS
from notifications.models import Mode, Preference, Webhook, WebhookFormat
from notifications.webhooks import url_host, url_refusal
from tenants.access import access_for


def preferences_of(*, user: User) -> dict[str, str]:
    """Every event's mode for ``user`` (immediate where no choice was made)."""
    chosen = dict(Preference.objects.filter(user=user).values_list("event", "mode"))
    return {code: chosen.get(code, Mode.IMMEDIATE) for code in EVENTS}


@transaction.atomic
def preferences_set(*, actor: User, modes: dict[str, str]) -> dict[str, str]:
    """Replace the caller's preferences: each event named gets its mode, every other one comes at
    once. An approval or security event turned off is refused (400 naming it)."""
    for code, mode in modes.items():
        if code not in EVENTS:
            raise FieldError(code, "Unknown event.")
        if mode not in Mode.values:
            raise FieldError(code, f"Must be one of {', '.join(Mode.values)}.")
        if mode == Mode.OFF and EVENTS[code].mandatory:
            raise FieldError(code, "Approval and security notifications cannot be turned off (a digest is allowed).")
    before = preferences_of(user=actor)
    Preference.objects.filter(user=actor).delete()
    Preference.objects.bulk_create(
        [Preference(user=actor, event=code, mode=mode) for code, mode in sorted(modes.items()) if mode != Mode.IMMEDIATE]
    )
    after = preferences_of(user=actor)
    changed = sorted(code for code in EVENTS if before[code] != after[code])
    if changed:
        audit_record(actor=actor, action=actions.NOTIFICATION_PREFERENCES_SET, target=actor,
                     before={code: before[code] for code in changed}, after={code: after[code] for code in changed})  # fmt: skip
    return after


def _require_admin(actor: User, department_id: int) -> None:
    if not access_for(actor).can_administer_department(department_id):
        raise NotAllowed("Only the department's admins and platform admins may manage its webhooks.")


def _events_check(events: list[str]) -> list[str]:
    unknown = [code for code in events if code not in EVENTS]
    if unknown:
        raise FieldError("events", f"Unknown event(s): {', '.join(unknown)}.")
    return sorted(set(events))


def _fingerprint(url: str) -> str:
    return "sha256:" + hashlib.sha256(url.encode()).hexdigest()[:16]


def _url_check(url: str) -> None:
    """400 naming ``url``, its message and ``details.refused`` saying which part is not allowed
    (``url``, ``scheme``, ``host``, ``port`` or ``address``)."""
    refused = url_refusal(url)
    if refused is not None:
        error = FieldError("url", refused.message)
        error.details = {"refused": refused.part}
        raise error


@transaction.atomic
def webhook_create(
    *, actor: User, department_id: int, name: str, url: str, format: str = WebhookFormat.JSON, events: list[str] | None = None,
) -> tuple[Webhook, str]:
    """Add a webhook to a department; returns it and its signing secret (shown this once)."""
    _require_admin(actor, department_id)
    _url_check(url)
    chosen = _events_check(events or [])
    secret = secrets.token_urlsafe(32)
    hook = Webhook.objects.create(
        department_id=department_id, name=name, url_encrypted=crypto.close_text(url), url_host=url_host(url),
        secret_encrypted=crypto.close_text(secret), format=format, events=chosen, created_by=actor,
    )
    audit_record(actor=actor, action=actions.WEBHOOK_CREATED, target=hook, department_id=department_id,
                 after={"name": name, "host": hook.url_host, "url_fingerprint": _fingerprint(url), "format": format,
                        "events": chosen})  # fmt: skip
    return hook, secret


@transaction.atomic
def webhook_update(
    *, actor: User, webhook_id: int, name: str | None = None, url: str | None = None, format: str | None = None,
    events: list[str] | None = None, is_active: bool | None = None,
) -> Webhook:
    hook = Webhook.objects.select_for_update().get(pk=webhook_id)
    _require_admin(actor, hook.department_id)
    before = {"name": hook.name, "host": hook.url_host, "format": hook.format, "events": hook.events, "is_active": hook.is_active}
    if url is not None:
        _url_check(url)
        hook.url_encrypted, hook.url_host = crypto.close_text(url), url_host(url)
    if events is not None:
        hook.events = _events_check(events)
    if name is not None:
        hook.name = name
    if format is not None:
        hook.format = format
    if is_active is not None:
        hook.is_active = is_active
    hook.save()
    after = {"name": hook.name, "host": hook.url_host, "format": hook.format, "events": hook.events, "is_active": hook.is_active}
    changed = [key for key in after if before[key] != after[key]]
    details = {"url_fingerprint": _fingerprint(url)} if url is not None else None
    audit_record(actor=actor, action=actions.WEBHOOK_UPDATED, target=hook, department_id=hook.department_id,
                 before={k: before[k] for k in changed}, after={k: after[k] for k in changed}, details=details)  # fmt: skip
    return hook


@transaction.atomic
def webhook_delete(*, actor: User, webhook_id: int) -> None:
    hook = Webhook.objects.select_for_update().get(pk=webhook_id)
    _require_admin(actor, hook.department_id)
    audit_record(actor=actor, action=actions.WEBHOOK_DELETED, target=hook, department_id=hook.department_id,
                 before={"name": hook.name, "host": hook.url_host, "format": hook.format})  # fmt: skip
    hook.delete()
