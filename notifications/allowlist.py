"""Where departments' webhooks may call: the allow-list's entries and the addresses refused.

Pure (no Django); the app refuses a malformed ``GPUPORTAL_WEBHOOK_ALLOWED_HOSTS`` or
``GPUPORTAL_WEBHOOK_ALLOWED_NETWORKS`` at start (``notifications.apps``).

An entry of ``GPUPORTAL_WEBHOOK_ALLOWED_HOSTS`` is ``[scheme://]host[:port]``:

* ``hooks.example.org`` or ``https://hooks.example.org``: https on port 443;
* ``hooks.example.org:8443``: https on port 8443 only;
* ``http://chat.internal``: plain http on port 80 as well as https on port 443 (the meaning an
  ``http://`` entry always had: "this host over plain http too");
* ``http://chat.internal:8065``: http or https on port 8065 only;
* ``*.example.org``: every host under ``example.org`` (not ``example.org`` itself), same rules;
* an IP literal (``10.1.2.3``, ``[2001:db8::1]:8443``), same rules.

One port per entry: list the host again for another port. Entries written before ports were part of
an entry (a host, ``*.domain``, ``http://host``) keep working and allow their scheme's default port.

Whatever the host, the addresses it stands for (the literal, or every address its name resolves to)
must be global unicast addresses: loopback, link-local, private, shared (carrier-grade NAT),
multicast, unspecified, documentation, reserved and other non-global addresses are refused, IPv4
and IPv6 alike, an IPv4 address inside an IPv6 one (IPv4-mapped, NAT64, 6to4, Teredo) judged as
the IPv4 address it carries, unless ``GPUPORTAL_WEBHOOK_ALLOWED_NETWORKS`` names a network that
holds it (``10.20.0.0/16``, ``fd00:1::/64``).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

DEFAULT_PORTS = {"https": 443, "http": 80}
_LABEL = re.compile(r"^[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?$")
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
_SHARED = ipaddress.IPv4Network("100.64.0.0/10")


@dataclass(frozen=True)
class Entry:
    """One allow-list entry: a host pattern, whether plain http is allowed, and its port (None: the
    default port of the scheme used)."""

    pattern: str
    plain_http: bool
    port: int | None

    def matches(self, host: str) -> bool:
        """``pattern`` is a host or an IP literal, or ``*.domain`` for every host under the domain."""
        if self.pattern.startswith("*."):
            return host.endswith(self.pattern[1:]) and len(host) > len(self.pattern) - 1
        return host == self.pattern

    def port_for(self, scheme: str) -> int | None:
        """The one port this entry allows for ``scheme`` (None: not this scheme at all)."""
        if scheme == "http" and not self.plain_http:
            return None
        return self.port if self.port is not None else DEFAULT_PORTS[scheme]


def host_normal(host: str) -> str:
    """A host as compared: lower case, no trailing dot, an IP literal in its compressed form."""
    host = host.strip().lower().rstrip(".").removeprefix("[").removesuffix("]")
    try:
        return ipaddress.ip_address(host).compressed
    except ValueError:
        return host


def entry_parse(raw: str) -> Entry:
    """One entry of ``GPUPORTAL_WEBHOOK_ALLOWED_HOSTS``; ValueError saying what is wrong."""
    text = raw.strip().lower()
    plain_http = False
    if "://" in text:
        scheme, _, text = text.partition("://")
        if scheme not in DEFAULT_PORTS:
            raise ValueError(f"{raw!r}: the scheme must be https:// or http://")
        plain_http = scheme == "http"
    text = text.rstrip("/")
    if not text or any(mark in text for mark in "/?#@ "):
        raise ValueError(f"{raw!r}: an entry is [scheme://]host[:port], without a path, query or user")
    try:  # a bare IPv6 literal (no brackets, so no port)
        return Entry(pattern=ipaddress.IPv6Address(text).compressed, plain_http=plain_http, port=None)
    except ValueError:
        pass
    parts = urlsplit("//" + text)
    try:
        port = parts.port
    except ValueError:
        raise ValueError(f"{raw!r}: the port must be a number from 1 to 65535") from None
    if port == 0 or (port is None and text.endswith(":")):
        raise ValueError(f"{raw!r}: the port must be a number from 1 to 65535")
    host = parts.hostname or ""
    pattern = host_normal(host)
    if not _valid_host(pattern.removeprefix("*.")):
        raise ValueError(f"{raw!r}: {pattern!r} is neither a host name nor an IP address")
    return Entry(pattern=pattern, plain_http=plain_http, port=port)


def _valid_host(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
        return True
    except ValueError:
        pass
    labels = host.split(".")
    return bool(host) and len(host) <= 253 and all(_LABEL.match(label) for label in labels)


def entries_parse(raws: Iterable[str]) -> list[Entry]:
    return [entry_parse(raw) for raw in raws if str(raw).strip()]


def networks_parse(raws: Iterable[str]) -> list[IPNetwork]:
    """``GPUPORTAL_WEBHOOK_ALLOWED_NETWORKS``: CIDR networks (a bare address is a /32 or /128)."""
    networks: list[IPNetwork] = []
    for raw in raws:
        text = str(raw).strip()
        if not text:
            continue
        try:
            networks.append(ipaddress.ip_network(text, strict=False))
        except ValueError:
            raise ValueError(f"{text!r} is not a network (10.20.0.0/16, fd00::/64 or an address)") from None
    return networks


def embedded_ipv4(address: IPAddress) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address stands for or carries (IPv4-mapped, NAT64, 6to4, Teredo)."""
    if not isinstance(address, ipaddress.IPv6Address):
        return None
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address in _NAT64:
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    if address.sixtofour is not None:
        return address.sixtofour
    if address.teredo is not None:
        return address.teredo[1]
    return None


def _kind(address: IPAddress) -> str | None:
    if address.is_unspecified:
        return "unspecified"
    if address.is_loopback:
        return "loopback"
    if address.is_link_local:
        return "link-local"
    if address.is_multicast:
        return "multicast"
    if isinstance(address, ipaddress.IPv4Address) and address in _SHARED:
        return "shared (carrier-grade NAT)"
    if address.is_reserved:
        return "reserved"
    if address.is_private:
        return "private"
    if not address.is_global:
        return "not globally routable"
    return None


def address_refusal(address: IPAddress, *, allowed: Iterable[IPNetwork] = ()) -> str | None:
    """Why a webhook may not call ``address`` ("loopback", "private", ...), or None when it may."""
    networks = list(allowed)
    inner = embedded_ipv4(address)
    candidates = [address] if inner is None else [address, inner]
    if any(candidate in network for candidate in candidates for network in networks if candidate.version == network.version):
        return None
    if inner is not None:
        inner_kind = _kind(inner)
        if inner_kind is not None:
            return f"{inner_kind} (the IPv4 address {inner} inside it)"
        if isinstance(address, ipaddress.IPv6Address) and (address.ipv4_mapped is not None or address in _NAT64):
            return None  # it stands for a global IPv4 address, and is judged as that
    return _kind(address)


def webhook_allowlist_check(hosts: Iterable[str], networks: Iterable[str]) -> None:
    """ValueError naming the first malformed entry of either setting."""
    entries_parse(hosts)
    networks_parse(networks)
