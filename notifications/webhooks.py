"""Webhooks: which URLs are allowed, the three body formats, the signature, and one POST.

A URL is allowed when its host is on ``GPUPORTAL_WEBHOOK_ALLOWED_HOSTS``: an exact host
(``hooks.slack.com``) or every subdomain of one (``*.example.org``). Only ``https`` is taken,
unless the entry itself says ``http://host`` (an internal receiver without TLS, named on
purpose). The check runs when a webhook is created or changed (400 naming ``url``) and again
before every send, so narrowing the list stops webhooks already stored. Redirects are never
followed (a 3xx is a failure), connect and read time out, and at most a short excerpt of the
answer is kept.
"""

from __future__ import annotations

import datetime
import hashlib
import hmac
import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import requests

from notifications import conf
from notifications.messages import Message

EXCERPT = 200
SIGNATURE_HEADER = "X-GPUPortal-Signature"
TIMESTAMP_HEADER = "X-GPUPortal-Timestamp"
DELIVERY_HEADER = "X-GPUPortal-Delivery"
EVENT_HEADER = "X-GPUPortal-Event"


class SendError(Exception):
    """A send that failed; ``permanent``: trying again cannot help."""

    def __init__(self, message: str, *, permanent: bool = False) -> None:
        super().__init__(message)
        self.permanent = permanent


def url_refusal(url: str) -> str | None:
    """Why ``url`` may not be used as a webhook, or None when it may."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises on a port that is not a number
    except ValueError:
        return "Not a valid URL."
    if parts.scheme not in ("https", "http") or not parts.hostname:
        return "Must be an https:// URL."
    if parts.username or parts.password:
        return "Must not carry a user name or password; put a token in the path or query instead."
    host = parts.hostname.lower().rstrip(".")
    listed = False
    for entry in conf.webhook_allowed_hosts():
        http_ok = entry.startswith("http://")
        pattern = entry.removeprefix("http://").removeprefix("https://").rstrip("/")
        if host_matches(host, pattern):
            listed = True
            if parts.scheme == "https" or http_ok:
                return None
    if listed:
        return "Plain http is not allowed for this host; use https."
    return f"The host {host} is not on the webhook allow-list (GPUPORTAL_WEBHOOK_ALLOWED_HOSTS)."


def host_matches(host: str, pattern: str) -> bool:
    """``pattern`` is a host, or ``*.domain`` for every host under the domain (not the domain itself)."""
    if pattern.startswith("*."):
        return host.endswith(pattern[1:]) and len(host) > len(pattern) - 1
    return host == pattern


def url_host(url: str) -> str:
    return (urlsplit(url).hostname or "").lower()


def sign(secret: str, body: bytes) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def body_for(*, format: str, delivery_key: str, event: str, message: Message, link: str | None,
             notification: dict[str, Any], sent_at: datetime.datetime) -> dict[str, Any]:  # fmt: skip
    """The JSON body of one webhook call in ``format``."""
    text = message.title + (f" <{link}|open>" if link and format == "slack" else f" ({link})" if link else "")
    if format == "slack":
        lines = "\n".join(line for line in message.lines if line)
        return {"text": text, "blocks": [
            {"type": "section", "text": {"type": "mrkdwn", "text": f"*{message.title}*\n{lines}"}},
            *([{"type": "context", "elements": [{"type": "mrkdwn", "text": f"<{link}|Open in GPU Portal>"}]}] if link else []),
        ]}
    if format == "mattermost":
        return {"text": "\n".join([f"**{message.title}**", *[line for line in message.lines if line],
                                   *([f"[Open in GPU Portal]({link})"] if link else [])]),
                "username": "GPU Portal", "props": {"event": event, "delivery": delivery_key}}
    return {
        "delivery": delivery_key, "event": event, "sent_at": sent_at.isoformat(), **notification,
        "title": message.title, "lines": message.lines, "url": link,
    }


@dataclass(frozen=True)
class Target:
    url: str
    format: str
    secret: str
    checked: bool = True  # against the allow-list; the platform-wide URL is the operator's own setting


def post(*, target: Target, body: dict[str, Any], delivery_key: str, event: str, sent_at: datetime.datetime) -> None:
    """POST ``body`` once; raises ``SendError`` unless the receiver answered 2xx."""
    refusal = url_refusal(target.url) if target.checked else None
    if refusal is not None:
        raise SendError(refusal, permanent=True)
    raw = json.dumps(body, separators=(",", ":"), sort_keys=True).encode()
    headers = {"Content-Type": "application/json", "User-Agent": "gpuportal-webhooks/1", DELIVERY_HEADER: delivery_key,
               EVENT_HEADER: event, TIMESTAMP_HEADER: str(int(sent_at.timestamp()))}
    if target.format == "json" and target.secret:
        headers[SIGNATURE_HEADER] = sign(target.secret, raw)
    timeout = conf.webhook_timeout_seconds()
    try:
        response = requests.post(target.url, data=raw, headers=headers, timeout=(timeout, timeout),
                                 allow_redirects=False, stream=True)
    except requests.RequestException as error:
        raise SendError(f"{error.__class__.__name__}: could not reach {url_host(target.url)}") from None
    try:
        excerpt = next(response.iter_content(EXCERPT), b"")[:EXCERPT].decode(errors="replace")
    except requests.RequestException:
        excerpt = ""
    finally:
        response.close()
    status = response.status_code
    if 200 <= status < 300:
        return
    if 300 <= status < 400:
        raise SendError(f"HTTP {status}: redirects are not followed", permanent=True)
    permanent = 400 <= status < 500 and status not in (408, 425, 429)
    raise SendError(f"HTTP {status}: {excerpt}".strip(), permanent=permanent)

