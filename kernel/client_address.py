"""The client's address, as seen through a configured number of trusted reverse proxies.

``GPUPORTAL_TRUSTED_PROXIES`` says how many reverse proxies stand in front of the portal, each of
which appends the address it received the request from to ``X-Forwarded-For``:

- ``0`` (the default): the peer of the connection (``REMOTE_ADDR``) is the client, and
  ``X-Forwarded-For`` is ignored entirely, since anyone can send it.
- ``N > 0``: the client is the address ``N`` hops from the right of ``X-Forwarded-For``. The entries
  further left were written by whoever sent the request to the outermost proxy, so they are never
  read. A header with fewer than ``N`` entries, or an entry there that is not an IP address, falls
  back to ``REMOTE_ADDR``: never to a value the client chose.

Used for the sign-in lockout's per-address counts and for the audit log's ``source_ip``.
"""

from __future__ import annotations

import ipaddress
from typing import Any

from kernel.conf import setting_int


def ip_normalised(text: str | None) -> str | None:
    """``text`` as a canonical IP address (an IPv6 address compressed, an IPv4-mapped one as IPv4), with
    a port (``1.2.3.4:80``, ``[::1]:443``) dropped; ``None`` when it is no IP address."""
    if text is None:
        return None
    value = text.strip()
    if value.startswith("["):
        end = value.find("]")
        value = value[1:end] if end > 0 else ""
    elif value.count(":") == 1:
        value = value.split(":", 1)[0]
    try:
        address = ipaddress.ip_address(value)
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return str(address.ipv4_mapped)
    return str(address)


def address_through_proxies(*, remote_addr: str | None, forwarded_for: str | None, trusted_proxies: int) -> str | None:
    """The client's address from the connection's peer and ``X-Forwarded-For`` (see the module)."""
    peer = ip_normalised(remote_addr) or (remote_addr.strip() if remote_addr and remote_addr.strip() else None)
    if trusted_proxies <= 0 or not forwarded_for:
        return peer
    hops = forwarded_for.split(",")
    if len(hops) < trusted_proxies:
        return peer
    return ip_normalised(hops[-trusted_proxies]) or peer


def client_address(request: Any) -> str | None:
    """The address of the client behind ``request`` (a Django or DRF request), or ``None`` when unknown."""
    meta = getattr(request, "META", None) or {}
    return address_through_proxies(
        remote_addr=meta.get("REMOTE_ADDR"),
        forwarded_for=meta.get("HTTP_X_FORWARDED_FOR"),
        trusted_proxies=setting_int("GPUPORTAL_TRUSTED_PROXIES"),
    )
