"""The notification preferences page (under the user's menu) and the unsubscribe link of e-mails
(docs/notifications.md). Saving posts the form with HTMX and swaps it back with its outcome."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.contrib.auth.models import User
from django.core import signing
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_http_methods

from frontend.http import portal_user
from kernel.errors import ApplicationError
from notifications.events import EVENTS, Event, events_for
from notifications.mail import unsubscribe_read
from notifications.models import Mode
from notifications.services import preferences_of, preferences_set
from tenants.access import access_for


def _events(user: User) -> dict[str, Event]:
    """The events this person can receive: a researcher is not offered the admins' events."""
    access = access_for(user)
    return events_for(department_admin=bool(access.administered), platform_admin=access.is_platform_admin)


def _rows(events: dict[str, Event], modes: dict[str, str]) -> list[dict[str, object]]:
    return [{"event": event, "mode": modes[code], "modes": [(value, label) for value, label in Mode.choices
                                                               if not (event.mandatory and value == Mode.OFF)]}
            for code, event in events.items()]  # fmt: skip


@require_http_methods(["GET", "POST"])
@login_required
def notification_preferences(request: HttpRequest) -> HttpResponse:
    user = portal_user(request)
    saved, error = False, ""
    events = _events(user)
    if request.method == "POST":  # the events not listed keep their choice
        chosen = {code: str(request.POST.get(code, Mode.IMMEDIATE)) for code in events}
        try:
            modes = preferences_set(actor=user, modes={**preferences_of(user=user), **chosen})
            saved = True
        except ApplicationError as refusal:
            modes, error = {**preferences_of(user=user), **chosen}, refusal.message
    else:
        modes = preferences_of(user=user)
    context = {"title": "Notifications", "rows": _rows(events, modes), "saved": saved, "error": error, "email": user.email}
    template = "frontend/_notification_form.html" if request.headers.get("HX-Request") else "frontend/notifications.html"
    return render(request, template, context, status=400 if error else 200)


@csrf_exempt  # the link's signature is the proof; mail clients post RFC 8058's one-click without a form
@require_http_methods(["GET", "POST"])
def notification_unsubscribe(request: HttpRequest, token: str) -> HttpResponse:
    try:
        user_id, code = unsubscribe_read(token)
        user = User.objects.get(pk=user_id, is_active=True)
        event = EVENTS[code]
    except (signing.BadSignature, User.DoesNotExist, KeyError, ValueError):
        return render(request, "frontend/notification_unsubscribe.html", {"title": "Unsubscribe", "invalid": True},
                      status=400)  # fmt: skip
    done = False
    if request.method == "POST" and not event.mandatory:
        preferences_set(actor=user, modes={**preferences_of(user=user), code: Mode.OFF})
        done = True
    return render(request, "frontend/notification_unsubscribe.html",
                  {"title": "Unsubscribe", "event": event, "done": done, "token": token})  # fmt: skip
