"""``GPUPORTAL_EMAIL_URL`` read into Django's ``EMAIL_*`` settings (pure: the settings import it).

* ``smtp://user:pass@host:25`` plain SMTP (port 25 by default);
* ``smtp+starttls://user:pass@host:587`` STARTTLS (port 587 by default);
* ``smtps://user:pass@host:465`` implicit TLS (port 465 by default).

User name and password are percent-decoded; both may be left out.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import unquote, urlsplit

SCHEMES = {"smtp": (25, False, False), "smtp+starttls": (587, True, False), "smtps": (465, False, True)}


def email_settings(url: str | None, *, timeout: float) -> dict[str, Any]:
    """The ``EMAIL_*`` settings for ``url``; without one, the dummy backend (e-mail off)."""
    if not url:
        return {"EMAIL_BACKEND": "django.core.mail.backends.dummy.EmailBackend"}
    parts = urlsplit(url)
    if parts.scheme not in SCHEMES or not parts.hostname:
        raise ValueError("GPUPORTAL_EMAIL_URL must be smtp://, smtp+starttls:// or smtps:// with a host")
    default_port, starttls, implicit_tls = SCHEMES[parts.scheme]
    return {
        "EMAIL_BACKEND": "django.core.mail.backends.smtp.EmailBackend",
        "EMAIL_HOST": parts.hostname,
        "EMAIL_PORT": parts.port or default_port,
        "EMAIL_HOST_USER": unquote(parts.username or ""),
        "EMAIL_HOST_PASSWORD": unquote(parts.password or ""),
        "EMAIL_USE_TLS": starttls,
        "EMAIL_USE_SSL": implicit_tls,
        "EMAIL_TIMEOUT": timeout,
    }
