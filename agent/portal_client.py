"""One HTTPS POST of a report to the portal, classified as delivered, retry later, or rejected."""

from __future__ import annotations

import email.utils
import enum
import http.client
import logging
import ssl
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from agent import AGENT_NAME, AGENT_VERSION

REPORT_PATH = "/api/v1/nodes/{node_name}/report"
# Worth retrying: the portal is down, overloaded or restarting; anything else will fail again.
RETRYABLE_STATUSES = frozenset({408, 425, 429, 500, 502, 503, 504})
_MAX_DETAIL = 300
# report_schema.json's bounds for clock_offset_seconds: a Date further off is not believed.
MAX_CLOCK_OFFSET_SECONDS = 86400

logger = logging.getLogger(__name__)


class Outcome(enum.Enum):
    DELIVERED = "delivered"
    RETRY = "retry"  # keep the report and try again after a backoff
    REJECTED = "rejected"  # the portal refused this report; retrying it would not help


@dataclass(frozen=True)
class DeliveryResult:
    outcome: Outcome
    detail: str
    status: int | None = None
    retry_after_seconds: float | None = None


class TokenUnavailable(Exception):
    pass


def read_token(path: Path) -> str:
    """The node token from its file, read on every send so that a rotated Secret takes effect."""
    try:
        token = path.read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise TokenUnavailable(f"cannot read the node token file {path}: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise TokenUnavailable(f"the node token file {path} is not UTF-8 text") from exc
    if not token:
        raise TokenUnavailable(f"the node token file {path} is empty")
    if any(ch.isspace() or not ch.isprintable() for ch in token):
        raise TokenUnavailable(f"the node token in {path} contains whitespace or control characters")
    return token


def report_url(portal_url: str, node_name: str) -> str:
    return portal_url.rstrip("/") + REPORT_PATH.format(node_name=urllib.parse.quote(node_name, safe=""))


class _RefuseRedirects(urllib.request.HTTPRedirectHandler):
    """A redirect would carry the bearer token to wherever it points: treat it as an error."""

    def redirect_request(
        self,
        req: urllib.request.Request,
        fp: IO[bytes],
        code: int,
        msg: str,
        headers: Any,
        newurl: str,
    ) -> urllib.request.Request | None:
        return None


class PortalClient:
    def __init__(
        self,
        *,
        portal_url: str,
        node_name: str,
        token_file: Path,
        ca_bundle: Path | None = None,
        timeout_seconds: float = 10.0,
        allow_plain_http: bool = False,
    ) -> None:
        scheme = urllib.parse.urlsplit(portal_url).scheme
        if scheme != "https" and not (scheme == "http" and allow_plain_http):
            raise ValueError(f"the portal URL must be https:// (got {portal_url!r})")
        self.url = report_url(portal_url, node_name)
        self.token_file = token_file
        self.timeout_seconds = timeout_seconds
        #: The clock whose offset is measured (a test replaces it).
        self.wall_clock: Callable[[], float] = time.time
        #: This machine's clock minus the portal's, from the last response's Date header (None before).
        self.clock_offset_seconds: float | None = None
        tls = ssl.create_default_context(cafile=str(ca_bundle) if ca_bundle else None)
        self._opener = urllib.request.build_opener(urllib.request.HTTPSHandler(context=tls), _RefuseRedirects())

    def post_report(self, body: bytes) -> DeliveryResult:
        try:
            token = read_token(self.token_file)
        except TokenUnavailable as exc:
            return DeliveryResult(Outcome.RETRY, str(exc))
        request = urllib.request.Request(  # noqa: S310 (the scheme is checked in __init__)
            self.url,
            data=body,
            method="POST",
            headers={
                "Authorization": f"Bearer {token}",
                "Content-Type": "application/json",
                "Accept": "application/json",
                "User-Agent": f"{AGENT_NAME}/{AGENT_VERSION}",
            },
        )
        sent_at = self.wall_clock()
        try:
            with self._opener.open(request, timeout=self.timeout_seconds) as response:
                response.read()
                self._measure_clock(response.headers.get("Date"), sent_at)
                return DeliveryResult(Outcome.DELIVERED, f"HTTP {response.status}", status=response.status)
        except urllib.error.HTTPError as exc:
            self._measure_clock(exc.headers.get("Date") if exc.headers else None, sent_at)
            return _classify_http_error(exc)
        except urllib.error.URLError as exc:
            return DeliveryResult(Outcome.RETRY, f"portal unreachable: {exc.reason}")
        except (OSError, http.client.HTTPException, ValueError) as exc:  # timeouts, resets, TLS, bad responses
            return DeliveryResult(Outcome.RETRY, f"portal unreachable: {type(exc).__name__}: {exc}")

    def _measure_clock(self, date_header: str | None, sent_at: float) -> None:
        """Offset from the response's Date: the portal's time is taken at the middle of the request.

        Date has whole seconds (RFC 9110), so the portal's clock read somewhere in [Date, Date + 1):
        its middle is used, and the figure is good to about half a second plus half the round trip.
        """
        offset = clock_offset(date_header, sent_at, self.wall_clock())
        if offset is not None:
            self.clock_offset_seconds = offset


def clock_offset(date_header: str | None, sent_at: float, received_at: float) -> float | None:
    """Local clock minus the portal's, in seconds (3 decimals), or None without a usable Date."""
    if not date_header:
        return None
    try:
        portal = email.utils.parsedate_to_datetime(date_header)
    except (TypeError, ValueError):
        logger.warning("the portal sent an unreadable Date header: %r", date_header[:60])
        return None
    if portal.tzinfo is None:  # "-0000" in the header: UTC by RFC 5322
        return None
    offset = (sent_at + received_at) / 2 - (portal.timestamp() + 0.5)
    if abs(offset) > MAX_CLOCK_OFFSET_SECONDS:
        logger.warning("the portal's Date header is %.0f s away from this clock; not reported", offset)
        return None
    return round(offset, 3)


def _classify_http_error(exc: urllib.error.HTTPError) -> DeliveryResult:
    status = exc.code
    try:
        excerpt = exc.read(_MAX_DETAIL).decode("utf-8", errors="replace").strip()
    except (OSError, http.client.HTTPException):
        excerpt = ""
    finally:
        exc.close()
    detail = f"HTTP {status}" + (f": {excerpt}" if excerpt else "")
    if 300 <= status < 400:
        location = exc.headers.get("Location", "?") if exc.headers else "?"
        return DeliveryResult(Outcome.REJECTED, f"HTTP {status} redirect to {location} not followed", status=status)
    if status in RETRYABLE_STATUSES:
        retry_after = _retry_after_seconds(exc.headers.get("Retry-After") if exc.headers else None)
        return DeliveryResult(Outcome.RETRY, detail, status=status, retry_after_seconds=retry_after)
    return DeliveryResult(Outcome.REJECTED, detail, status=status)


def _retry_after_seconds(value: str | None) -> float | None:
    """Retry-After in seconds; the HTTP-date form is ignored (the backoff applies instead)."""
    if value is None or not value.strip().isdigit():
        return None
    return float(value.strip())
