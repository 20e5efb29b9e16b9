"""Webhooks: where departments' webhooks may call, the three body formats, the signature, and one POST.

A department's webhook may call a URL whose scheme, host and port an entry of
``GPUPORTAL_WEBHOOK_ALLOWED_HOSTS`` allows, and whose host stands for global addresses only (an IP
literal, or every address its name resolves to), unless ``GPUPORTAL_WEBHOOK_ALLOWED_NETWORKS`` names
them (``notifications.allowlist``). The check runs when a webhook is created or changed (400 naming
``url``, saying which part is refused) and again before every send, after resolving the name once:
the call connects to an address just checked (no second lookup a rebinding DNS server could answer
differently), with the ``Host`` header and TLS (SNI, certificate) naming the host. A refused send
fails at once. Redirects are never followed (a 3xx is a failure), connect and read time out, and at
most a short excerpt of the answer is kept.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import datetime
import hashlib
import hmac
import ipaddress
import json
import socket
import ssl
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import requests
import urllib3
from requests.utils import DEFAULT_CA_BUNDLE_PATH

from notifications import allowlist, conf
from notifications.messages import Message

EXCERPT = 200
_MAX_ADDRESSES = 4  # the resolved addresses tried in turn when one cannot be connected to
SIGNATURE_HEADER = "X-GPUPortal-Signature"
TIMESTAMP_HEADER = "X-GPUPortal-Timestamp"
DELIVERY_HEADER = "X-GPUPortal-Delivery"
EVENT_HEADER = "X-GPUPortal-Event"


class SendError(Exception):
    """A send that failed; ``permanent``: trying again cannot help."""

    def __init__(self, message: str, *, permanent: bool = False) -> None:
        super().__init__(message)
        self.permanent = permanent


class Refused(Exception):
    """A destination a department's webhook may not call; ``part`` is what is not allowed: ``url``
    (not a usable URL), ``scheme``, ``host``, ``port`` or ``address``."""

    def __init__(self, part: str, message: str) -> None:
        super().__init__(message)
        self.part = part
        self.message = message


class Unresolved(Exception):
    """The host's name gave no address (now, or within the timeout)."""


@dataclass(frozen=True)
class Destination:
    """Where one call goes: the URL's parts, and the addresses checked for it (a name resolved once)."""

    scheme: str
    host: str
    port: int
    target: str
    addresses: tuple[str, ...] = ()

    @property
    def host_header(self) -> str:
        shown = f"[{self.host}]" if ":" in self.host else self.host
        return shown if self.port == allowlist.DEFAULT_PORTS[self.scheme] else f"{shown}:{self.port}"


def destination_parse(url: str) -> Destination:
    """The scheme, host, port and path of ``url``; ``Refused`` (part ``url`` or ``scheme``) when it is
    not an http(s) URL one may call."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        raise Refused("url", "Not a valid URL.") from None
    if parts.scheme not in allowlist.DEFAULT_PORTS:
        raise Refused("scheme", f"The scheme {parts.scheme or '(none)'} is not allowed: use https.")
    if not parts.hostname:
        raise Refused("url", "Not a valid URL: it names no host.")
    if parts.username is not None or parts.password is not None:
        raise Refused("url", "Must not carry a user name or password; put a token in the path or query instead.")
    if port == 0:
        raise Refused("port", "Port 0 is not allowed.")
    target = parts.path or "/"
    if parts.query:
        target += "?" + parts.query
    return Destination(scheme=parts.scheme, host=allowlist.host_normal(parts.hostname),
                       port=port or allowlist.DEFAULT_PORTS[parts.scheme], target=target)  # fmt: skip


def destination_listed(destination: Destination) -> None:
    """``Refused`` unless an allow-list entry takes the destination's host, scheme and port."""
    entries = [entry for entry in conf.webhook_allowed_entries() if entry.matches(destination.host)]
    if not entries:
        raise Refused("host", f"Host not allowed: {destination.host} is not on the webhook allow-list "
                              "(GPUPORTAL_WEBHOOK_ALLOWED_HOSTS).")  # fmt: skip
    ports = sorted({port for entry in entries if (port := entry.port_for(destination.scheme)) is not None})
    if not ports:
        raise Refused("scheme", f"Scheme not allowed: plain http is not allowed for {destination.host}; use https "
                                "(the allow-list names this host without http://).")  # fmt: skip
    if destination.port not in ports:
        allowed = ", ".join(str(port) for port in ports)
        raise Refused("port", f"Port not allowed: port {destination.port} is not allowed for {destination.scheme}://"
                              f"{destination.host} (allowed: {allowed}; GPUPORTAL_WEBHOOK_ALLOWED_HOSTS names a "
                              "port as host:port).")  # fmt: skip


def addresses_check(destination: Destination, addresses: list[str]) -> Destination:
    """The destination with ``addresses``, each of them allowed; ``Refused`` (part ``address``) at
    the first that is not."""
    networks = conf.webhook_allowed_networks()
    for text in addresses:
        address = ipaddress.ip_address(text.split("%", 1)[0])
        kind = allowlist.address_refusal(address, allowed=networks)
        if kind is not None:
            named = destination.host if destination.host == address.compressed else f"{destination.host} resolves to {address}"
            raise Refused("address", f"Address not allowed: {named}, a {kind} address (only global addresses, or "
                                     "those of GPUPORTAL_WEBHOOK_ALLOWED_NETWORKS).")  # fmt: skip
    return dataclasses.replace(destination, addresses=tuple(addresses))


def destination_check(url: str, *, resolve_names: bool = True) -> Destination:
    """The destination of a department's webhook, checked: URL, scheme, host and port against the
    allow-list, then every address it stands for (an IP literal; a name resolved once, now).

    ``Refused`` when a part is not allowed; ``Unresolved`` when the name gives no address. Without
    ``resolve_names`` a name's addresses are neither looked up nor checked (listing webhooks)."""
    destination = destination_parse(url)
    destination_listed(destination)
    try:
        literal = ipaddress.ip_address(destination.host)
    except ValueError:
        literal = None
    if literal is not None:
        return addresses_check(destination, [literal.compressed])
    if not resolve_names:
        return destination
    return addresses_check(destination, resolve(destination.host, destination.port))


_resolver = concurrent.futures.ThreadPoolExecutor(max_workers=4, thread_name_prefix="webhook-dns")


def resolve(host: str, port: int) -> list[str]:
    """Every address ``host`` resolves to (TCP), in the resolver's order, within the webhook timeout;
    ``Unresolved`` otherwise. The one name lookup of a call: the connection goes to these addresses."""
    future = _resolver.submit(socket.getaddrinfo, host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP)
    try:
        answers = future.result(timeout=conf.webhook_timeout_seconds())
    except concurrent.futures.TimeoutError:
        raise Unresolved(f"resolving {host} took longer than {conf.webhook_timeout_seconds():g}s") from None
    except (OSError, UnicodeError) as error:
        raise Unresolved(f"{host} does not resolve ({error.__class__.__name__})") from None
    addresses: list[str] = []
    for family, _type, _proto, _name, sockaddr in answers:
        if family in (socket.AF_INET, socket.AF_INET6) and str(sockaddr[0]) not in addresses:
            addresses.append(str(sockaddr[0]))
    if not addresses:
        raise Unresolved(f"{host} resolves to no IPv4 or IPv6 address")
    return addresses


def url_refusal(url: str) -> Refused | None:
    """Why ``url`` may not be used as a department's webhook (with the part refused), or None when it
    may. A name that does not resolve now is not refused: every send resolves it again and checks
    what it finds."""
    try:
        destination_check(url)
    except Refused as refused:
        return refused
    except Unresolved:
        return None
    return None


def url_blocked(url: str) -> str | None:
    """Why a stored webhook's URL is refused as the settings stand, without a name lookup (URL,
    scheme, host, port, an IP literal's address); None when nothing short of its send refuses it."""
    try:
        destination_check(url, resolve_names=False)
    except Refused as refused:
        return refused.message
    return None


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
    """POST ``body`` once; raises ``SendError`` unless the receiver answered 2xx.

    A department's webhook is checked again first (allow-list, then every address its name resolves
    to now) and the call connects to a checked address: no second lookup between the check and the
    connection, the ``Host`` header and TLS (SNI, certificate) still name the host. A refusal is a
    permanent failure; a name that does not resolve is retried like an unreachable receiver."""
    raw = json.dumps(body, separators=(",", ":"), sort_keys=True).encode()
    headers = {"Content-Type": "application/json", "User-Agent": "gpuportal-webhooks/1", DELIVERY_HEADER: delivery_key,
               EVENT_HEADER: event, TIMESTAMP_HEADER: str(int(sent_at.timestamp()))}
    if target.format == "json" and target.secret:
        headers[SIGNATURE_HEADER] = sign(target.secret, raw)
    if target.checked:
        try:
            destination = destination_check(target.url)
        except Refused as refused:
            raise SendError(f"refused: {refused.message}", permanent=True) from None
        except Unresolved as error:
            raise SendError(f"Unresolved: {error}") from None
        status, excerpt = _post_pinned(destination, raw, headers)
    else:
        status, excerpt = _post_operator(target.url, raw, headers)
    if 200 <= status < 300:
        return
    if 300 <= status < 400:
        raise SendError(f"HTTP {status}: redirects are not followed", permanent=True)
    permanent = 400 <= status < 500 and status not in (408, 425, 429)
    raise SendError(f"HTTP {status}: {excerpt}".strip(), permanent=permanent)


_CONNECT_ERRORS = (urllib3.exceptions.NewConnectionError, urllib3.exceptions.ConnectTimeoutError)


def tls_context() -> ssl.SSLContext:
    """The TLS context of webhook calls: the system's trust store, else certifi's (as requests)."""
    bundle = conf.webhook_ca_bundle() or DEFAULT_CA_BUNDLE_PATH
    return ssl.create_default_context(cafile=bundle)


def _post_pinned(destination: Destination, raw: bytes, headers: dict[str, str]) -> tuple[int, str]:
    """POST to the destination's checked addresses in order (the next only when one cannot be
    connected to), never following a redirect; (status, excerpt of the answer)."""
    timeout = conf.webhook_timeout_seconds()
    error: Exception | None = None
    for address in destination.addresses[:_MAX_ADDRESSES]:
        pool: urllib3.HTTPConnectionPool
        if destination.scheme == "https":
            pool = urllib3.HTTPSConnectionPool(
                address, destination.port, timeout=urllib3.Timeout(connect=timeout, read=timeout), retries=False,
                maxsize=1, ssl_context=tls_context(), server_hostname=destination.host, assert_hostname=destination.host,
            )
        else:
            pool = urllib3.HTTPConnectionPool(address, destination.port, retries=False, maxsize=1,
                                              timeout=urllib3.Timeout(connect=timeout, read=timeout))  # fmt: skip
        try:
            response = pool.urlopen("POST", destination.target, body=raw, headers={**headers, "Host": destination.host_header},
                                    redirect=False, retries=False, preload_content=False, assert_same_host=False)  # fmt: skip
        except _CONNECT_ERRORS as failure:
            error = failure
            pool.close()
            continue
        except (urllib3.exceptions.HTTPError, OSError) as failure:
            pool.close()
            raise SendError(f"{failure.__class__.__name__}: could not reach {destination.host}") from None
        try:
            excerpt = response.read(EXCERPT)[:EXCERPT].decode(errors="replace")
        except (urllib3.exceptions.HTTPError, OSError):
            excerpt = ""
        finally:
            response.release_conn()
            pool.close()
        return response.status, excerpt
    name = error.__class__.__name__ if error is not None else "NoAddress"
    raise SendError(f"{name}: could not reach {destination.host}")


def _post_operator(url: str, raw: bytes, headers: dict[str, str]) -> tuple[int, str]:
    """The platform-wide webhook: the operator's URL as configured (its proxy variables honoured)."""
    timeout = conf.webhook_timeout_seconds()
    try:
        response = requests.post(url, data=raw, headers=headers, timeout=(timeout, timeout),
                                 allow_redirects=False, stream=True)
    except requests.RequestException as error:
        raise SendError(f"{error.__class__.__name__}: could not reach {url_host(url)}") from None
    try:
        excerpt = next(response.iter_content(EXCERPT), b"")[:EXCERPT].decode(errors="replace")
    except requests.RequestException:
        excerpt = ""
    finally:
        response.close()
    return response.status_code, excerpt
