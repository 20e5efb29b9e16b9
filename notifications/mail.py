"""E-mail: one message (plain text and HTML, from templates) to one person, over the SMTP server of
``GPUPORTAL_EMAIL_URL``, with a ``List-Unsubscribe`` link that turns that event off (RFC 8058's
one-click POST, or a page to confirm) where the event may be turned off."""

from __future__ import annotations

import smtplib
from typing import Any

from django.core import signing
from django.core.mail import EmailMultiAlternatives, get_connection
from django.template.loader import render_to_string
from django.urls import reverse

from notifications import conf
from notifications.email_url import email_settings
from notifications.events import event_get
from notifications.messages import Message
from notifications.webhooks import SendError

UNSUBSCRIBE_SALT = "gpuportal.notifications.unsubscribe"


def unsubscribe_token(*, user_id: int, event: str) -> str:
    return signing.dumps({"u": user_id, "e": event}, salt=UNSUBSCRIBE_SALT, compress=True)


def unsubscribe_read(token: str, *, max_age_days: int = 60) -> tuple[int, str]:
    """The (user id, event) a token was made for; ``signing.BadSignature`` when forged or too old."""
    data = signing.loads(token, salt=UNSUBSCRIBE_SALT, max_age=max_age_days * 86400)
    return int(data["u"]), str(data["e"])


def absolute(path: str) -> str | None:
    base = conf.public_url()
    return f"{base}{path}" if base and path else None


def mail_send(*, to: str, user_id: int, event: str, message: Message, delivery_key: str,
              items: list[dict[str, Any]] | None = None) -> None:  # fmt: skip
    """Send one message; raises ``SendError`` (permanent when the server refused the address)."""
    url = conf.email_url()
    if url is None:
        raise SendError("e-mail is not configured (GPUPORTAL_EMAIL_URL)", permanent=True)
    options = email_settings(url, timeout=conf.email_timeout_seconds())
    headers = {"X-GPUPortal-Delivery": delivery_key, "X-GPUPortal-Event": event}
    unsubscribe = None
    if not event_get(event).mandatory:
        unsubscribe = absolute(reverse("notification-unsubscribe", kwargs={"token": unsubscribe_token(user_id=user_id, event=event)}))
        if unsubscribe:
            headers["List-Unsubscribe"] = f"<{unsubscribe}>"
            headers["List-Unsubscribe-Post"] = "List-Unsubscribe=One-Click"
    context = {"message": message, "link": absolute(message.path), "path": message.path, "items": items or [],
               "unsubscribe": unsubscribe, "preferences": absolute(reverse("notification-preferences"))}
    email = EmailMultiAlternatives(
        subject=f"[GPU Portal] {message.title}"[:200],
        body=render_to_string("notifications/email/message.txt", context),
        from_email=conf.email_from(), to=[to], headers=headers,
        connection=get_connection(
            options["EMAIL_BACKEND"], host=options["EMAIL_HOST"], port=options["EMAIL_PORT"],
            username=options["EMAIL_HOST_USER"] or None, password=options["EMAIL_HOST_PASSWORD"] or None,
            use_tls=options["EMAIL_USE_TLS"], use_ssl=options["EMAIL_USE_SSL"], timeout=options["EMAIL_TIMEOUT"],
        ),
    )
    email.attach_alternative(render_to_string("notifications/email/message.html", context), "text/html")
    try:
        email.send()
    except smtplib.SMTPRecipientsRefused as error:
        raise SendError(f"the mail server refused {to}: {error.recipients}"[:500], permanent=True) from None
    except (smtplib.SMTPException, OSError) as error:
        raise SendError(f"{error.__class__.__name__}: {error}"[:500]) from None
