"""Where a department's webhook may call: scheme, host and port on the allow-list, global addresses
only (unless GPUPORTAL_WEBHOOK_ALLOWED_NETWORKS names them), checked when the webhook is saved and
again at every send after one name lookup, the connection made to the address just checked (DNS
rebinding), with the Host header and TLS still naming the host."""

from __future__ import annotations

import datetime
import http.server
import ipaddress
import json
import socket
import ssl
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from django.utils import timezone

from allocations.grants import services
from allocations.models import Allocation
from notifications import allowlist, webhooks
from notifications.models import Delivery, DeliveryState, Webhook
from notifications.services import webhook_create
from tests.conftest import World
from tests.notifications.conftest import Dns, Receiver

pytestmark = pytest.mark.django_db

PUBLIC = "93.184.216.34"  # a global unicast address (nothing is ever sent to it: the tests resolve names)


def _request(world: World) -> Allocation:
    start = timezone.now()
    return services.allocation_request(
        actor=world.users["nlp_member"], project=world.llm, flavor=world.a100, quantity=1, priority_class=world.standard,
        starts_at=start, ends_at=start + datetime.timedelta(days=2), justification="fine-tuning",
    )


def _post(world: World, url: str, persona: str = "nlp_admin") -> Any:
    return world.client(persona).post(f"/api/v1/departments/{world.nlp.pk}/webhooks/", {"name": "hook", "url": url},
                                      format="json")  # fmt: skip


def _refused(response: Any, part: str) -> str:
    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert list(error["fields"]) == ["url"]
    assert error["details"] == {"refused": part}, error
    return str(error["fields"]["url"][0])


# --- ports ---------------------------------------------------------------------------------------


def test_a_port_the_allow_list_does_not_name_is_a_400_naming_url(world: World, settings: Any, dns: Dns) -> None:
    settings.GPUPORTAL_WEBHOOK_ALLOWED_HOSTS = ["hooks.example.org", "http://chat.example.org"]
    dns.answers = {"hooks.example.org": [PUBLIC], "chat.example.org": [PUBLIC]}
    # the database's port, the portal's own API port: the entry allows https on 443 only
    for url in ("https://hooks.example.org:5432/x", "https://hooks.example.org:8000/api/v1/", "http://chat.example.org:5432/"):
        message = _refused(_post(world, url), "port")
        assert message.startswith("Port not allowed: port ") and "(allowed: " in message, message
    assert "allowed: 443" in _refused(_post(world, "https://hooks.example.org:5432/x"), "port")
    assert _post(world, "https://hooks.example.org/x").status_code == 201
    assert _post(world, "https://hooks.example.org:443/x").status_code == 201
    # an http:// entry: plain http on 80, https on 443, as before ports were part of an entry
    assert _post(world, "http://chat.example.org/x").status_code == 201
    assert _post(world, "https://chat.example.org/x").status_code == 201

    hook = Webhook.objects.filter(name="hook").first()
    assert hook is not None
    patched = world.client("nlp_admin").patch(f"/api/v1/webhooks/{hook.pk}/", {"url": "https://hooks.example.org:6379/"},
                                              format="json")  # fmt: skip
    assert "Port not allowed" in _refused(patched, "port")


def test_an_entry_naming_a_port_allows_that_port_only(world: World, settings: Any, dns: Dns) -> None:
    settings.GPUPORTAL_WEBHOOK_ALLOWED_HOSTS = ["hooks.example.org:8443", "hooks.example.org:9443", "http://*.internal.example.org:8065"]
    dns.answers = {"hooks.example.org": [PUBLIC], "chat.internal.example.org": [PUBLIC]}
    assert _post(world, "https://hooks.example.org:8443/x").status_code == 201
    assert _post(world, "https://hooks.example.org:9443/x").status_code == 201
    assert "allowed: 8443, 9443" in _refused(_post(world, "https://hooks.example.org/x"), "port")
    assert _post(world, "http://chat.internal.example.org:8065/hooks/x").status_code == 201
    assert "allowed: 8065" in _refused(_post(world, "http://chat.internal.example.org/hooks/x"), "port")


def test_scheme_and_host_refusals_say_which_part(world: World, settings: Any, dns: Dns) -> None:
    settings.GPUPORTAL_WEBHOOK_ALLOWED_HOSTS = ["hooks.example.org"]
    dns.answers = {"hooks.example.org": [PUBLIC]}
    assert _refused(_post(world, "http://hooks.example.org/x"), "scheme").startswith("Scheme not allowed")
    assert _refused(_post(world, "ftp://hooks.example.org/x"), "scheme").startswith("The scheme ftp is not allowed")
    assert _refused(_post(world, "https://evil.example.net/x"), "host").startswith("Host not allowed")
    assert "user name or password" in _refused(_post(world, "https://u:p@hooks.example.org/x"), "url")


# --- addresses -----------------------------------------------------------------------------------

REFUSED_LITERALS = [
    ("http://127.0.0.1/", "loopback"),
    ("http://127.1.2.3/", "loopback"),
    ("http://[::1]/", "loopback"),
    ("http://10.0.0.5/", "private"),
    ("http://172.16.4.4/", "private"),
    ("http://192.168.1.1/", "private"),
    ("http://[fc00::1]/", "private"),
    ("http://169.254.169.254/", "link-local"),
    ("http://[fe80::1]/", "link-local"),
    ("http://0.0.0.0/", "unspecified"),
    ("http://[::]/", "unspecified"),
    ("http://224.0.0.1/", "multicast"),
    ("http://[ff02::1]/", "multicast"),
    ("http://240.0.0.1/", "reserved"),
    ("http://100.64.0.1/", "shared (carrier-grade NAT)"),
    ("http://[::ffff:127.0.0.1]/", "loopback (the IPv4 address 127.0.0.1 inside it)"),
    ("http://[::ffff:10.1.2.3]/", "private (the IPv4 address 10.1.2.3 inside it)"),
    ("http://[::ffff:169.254.169.254]/", "link-local (the IPv4 address 169.254.169.254 inside it)"),
    ("http://[64:ff9b::a00:1]/", "private (the IPv4 address 10.0.0.1 inside it)"),
    ("http://[2002:7f00:1::1]/", "loopback (the IPv4 address 127.0.0.1 inside it)"),
]


@pytest.mark.parametrize(("url", "kind"), REFUSED_LITERALS)
def test_an_ip_literal_that_is_not_a_global_address_is_a_400(world: World, settings: Any, url: str, kind: str) -> None:
    host = url.removeprefix("http://").rstrip("/")
    settings.GPUPORTAL_WEBHOOK_ALLOWED_HOSTS = [f"http://{host}"]  # the host itself on the list: the address still counts
    message = _refused(_post(world, url), "address")
    assert message.startswith("Address not allowed: ") and f"a {kind} address" in message, message


def test_ipv4_mapped_ipv6_is_refused_as_a_literal_and_as_a_resolved_address(world: World, settings: Any, dns: Dns) -> None:
    settings.GPUPORTAL_WEBHOOK_ALLOWED_HOSTS = ["http://[::ffff:127.0.0.1]", "hooks.example.org"]
    assert "loopback" in _refused(_post(world, "http://[::ffff:127.0.0.1]/x"), "address")
    assert "loopback" in _refused(_post(world, "http://[::ffff:7f00:1]/x"), "address")  # the same address, written in hex
    dns.answers = {"hooks.example.org": ["::ffff:169.254.169.254"]}
    message = _refused(_post(world, "https://hooks.example.org/x"), "address")
    assert "hooks.example.org resolves to ::ffff:a9fe:a9fe" in message and "link-local" in message
    # a global IPv4 address, mapped, is that address
    dns.answers = {"hooks.example.org": [f"::ffff:{PUBLIC}"]}
    assert _post(world, "https://hooks.example.org/x").status_code == 201


def test_a_name_resolving_to_a_private_address_is_a_400_when_saved(world: World, settings: Any, dns: Dns) -> None:
    settings.GPUPORTAL_WEBHOOK_ALLOWED_HOSTS = ["hooks.example.org"]
    dns.answers = {"hooks.example.org": [PUBLIC, "10.0.0.7"]}  # every address counts, not only the first
    message = _refused(_post(world, "https://hooks.example.org/x"), "address")
    assert message.startswith("Address not allowed: hooks.example.org resolves to 10.0.0.7, a private address"), message
    dns.answers = {"hooks.example.org": [PUBLIC, "2606:4700::1111"]}
    assert _post(world, "https://hooks.example.org/x").status_code == 201
    # a name that does not resolve now is taken: every send resolves it again and checks what it finds
    settings.GPUPORTAL_WEBHOOK_ALLOWED_HOSTS = ["hooks.example.org", "later.example.org"]
    assert _post(world, "https://later.example.org/x").status_code == 201


def test_allowed_networks_let_an_internal_receiver_through(world: World, settings: Any, dns: Dns) -> None:
    settings.GPUPORTAL_WEBHOOK_ALLOWED_HOSTS = ["http://chat.internal:8065", "http://10.20.0.9"]
    dns.answers = {"chat.internal": ["10.20.0.8"]}
    assert _refused(_post(world, "http://chat.internal:8065/x"), "address")
    settings.GPUPORTAL_WEBHOOK_ALLOWED_NETWORKS = ["10.20.0.0/24"]
    assert _post(world, "http://chat.internal:8065/x").status_code == 201
    assert _post(world, "http://10.20.0.9/x").status_code == 201
    dns.answers = {"chat.internal": ["10.20.0.8", "10.30.0.1"]}  # one address outside the network
    assert "10.30.0.1" in _refused(_post(world, "http://chat.internal:8065/x"), "address")


# --- at send time --------------------------------------------------------------------------------


def test_a_name_that_resolves_to_a_private_address_at_send_is_not_called_and_the_delivery_fails(
    world: World, receiver: Receiver, settings: Any, dns: Dns, django_capture_on_commit_callbacks: Any,
) -> None:
    settings.GPUPORTAL_WEBHOOK_ALLOWED_HOSTS = [f"http://hooks.test:{receiver.port}"]
    settings.GPUPORTAL_WEBHOOK_ALLOWED_NETWORKS = []
    dns.answers = {"hooks.test": [PUBLIC]}  # when it is saved
    hook, _ = webhook_create(actor=world.users["nlp_admin"], department_id=world.nlp.pk, name="ops",
                             url=f"http://hooks.test:{receiver.port}/hook")  # fmt: skip
    dns.answers = {"hooks.test": ["127.0.0.1"]}  # rebound to the portal's own machine
    with django_capture_on_commit_callbacks(execute=True):
        _request(world)
    delivery = Delivery.objects.get(channel=f"webhook:{hook.pk}")
    assert (delivery.state, delivery.attempts) == (DeliveryState.FAILED, 1)  # refused for good, not retried
    assert delivery.last_error == (
        "refused: Address not allowed: hooks.test resolves to 127.0.0.1, a loopback address "
        "(only global addresses, or those of GPUPORTAL_WEBHOOK_ALLOWED_NETWORKS)."
    )
    assert receiver.requests == []
    assert Webhook.objects.filter(pk=hook.pk).exists()
    listed = world.client("platform").get("/api/v1/notification-deliveries/?state=failed").json()["results"]
    assert [row["last_error"] for row in listed] == [delivery.last_error]


def test_the_call_goes_to_the_address_checked_without_a_second_lookup(
    world: World, receiver: Receiver, settings: Any, dns: Dns, monkeypatch: pytest.MonkeyPatch,
    django_capture_on_commit_callbacks: Any,
) -> None:
    settings.GPUPORTAL_WEBHOOK_ALLOWED_HOSTS = [f"http://hooks.test:{receiver.port}"]
    dns.answers = {"hooks.test": ["127.0.0.1"]}  # allowed: the receiver fixture names 127.0.0.1/32
    hook, _ = webhook_create(actor=world.users["nlp_admin"], department_id=world.nlp.pk, name="ops",
                             url=f"http://hooks.test:{receiver.port}/hook?token=abc")  # fmt: skip
    real_getaddrinfo = socket.getaddrinfo

    def no_second_lookup(host: Any, *args: Any, **kwargs: Any) -> Any:
        assert host != "hooks.test", "the name was looked up again after its check"
        return real_getaddrinfo(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", no_second_lookup)
    dns.asked.clear()
    with django_capture_on_commit_callbacks(execute=True):
        _request(world)
    assert dns.asked == ["hooks.test"]  # one lookup for the send: its answer was checked and connected to
    assert Delivery.objects.get(channel=f"webhook:{hook.pk}").state == DeliveryState.SENT
    [call] = receiver.requests
    assert call.path == "/hook?token=abc"
    assert call.headers["Host"] == f"hooks.test:{receiver.port}"
    assert json.loads(call.body)["event"] == "allocation.submitted"


def test_a_name_that_does_not_resolve_at_send_is_retried(
    world: World, receiver: Receiver, settings: Any, dns: Dns, django_capture_on_commit_callbacks: Any,
) -> None:
    settings.GPUPORTAL_WEBHOOK_ALLOWED_HOSTS = ["hooks.test"]
    hook, _ = webhook_create(actor=world.users["nlp_admin"], department_id=world.nlp.pk, name="ops",
                             url="https://hooks.test/hook")  # fmt: skip
    with django_capture_on_commit_callbacks(execute=True):
        _request(world)
    delivery = Delivery.objects.get(channel=f"webhook:{hook.pk}")
    assert (delivery.state, delivery.attempts) == (DeliveryState.PENDING, 1)
    assert delivery.last_error == "Unresolved: hooks.test does not resolve (gaierror)"


def test_a_stored_webhook_the_rules_now_refuse_is_kept_shown_refused_and_not_called(
    world: World, receiver: Receiver, settings: Any, django_capture_on_commit_callbacks: Any,
) -> None:
    hook, _ = webhook_create(actor=world.users["nlp_admin"], department_id=world.nlp.pk, name="ops", url=receiver.url())
    client = world.client("nlp_admin")
    assert client.get(f"/api/v1/webhooks/{hook.pk}/").json()["refused"] is None
    settings.GPUPORTAL_WEBHOOK_ALLOWED_HOSTS = ["http://127.0.0.1"]  # the port is no longer named
    refused = client.get(f"/api/v1/webhooks/{hook.pk}/").json()["refused"]
    assert refused.startswith(f"Port not allowed: port {receiver.port} is not allowed for http://127.0.0.1")
    listed = client.get(f"/api/v1/departments/{world.nlp.pk}/webhooks/").json()["results"]
    assert [row["refused"] for row in listed] == [refused]
    with django_capture_on_commit_callbacks(execute=True):
        _request(world)
    delivery = Delivery.objects.get(channel=f"webhook:{hook.pk}")
    assert (delivery.state, delivery.attempts, delivery.last_error) == (DeliveryState.FAILED, 1, f"refused: {refused}")
    assert receiver.requests == []
    # it stays stored; a change that leaves its URL alone is still taken
    assert client.patch(f"/api/v1/webhooks/{hook.pk}/", {"name": "ops-old"}, format="json").status_code == 200
    assert Webhook.objects.get(pk=hook.pk).name == "ops-old"


# --- TLS: the certificate and SNI of the name, the connection to the address ----------------------


def _certificate(tmp_path: Path, name: str) -> tuple[Path, Path]:
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder().subject_name(subject).issuer_name(subject).public_key(key.public_key())
        .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(name)]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = tmp_path / f"{name}.pem", tmp_path / f"{name}.key"
    cert_path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))  # fmt: skip
    return cert_path, key_path


@pytest.fixture
def tls_receiver(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    """An https receiver on 127.0.0.1 serving a certificate for hooks.test (trusted by webhook calls);
    it records the SNI name of each handshake and the Host of each call."""
    cert, key = _certificate(tmp_path, "hooks.test")
    seen: dict[str, Any] = {"sni": [], "hosts": [], "port": 0}
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    context.sni_callback = lambda sock, name, ctx: seen["sni"].append(name)

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's hook name
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            seen["hosts"].append(self.headers["Host"])
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    seen["port"] = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    monkeypatch.setattr(webhooks, "tls_context", lambda: ssl.create_default_context(cafile=str(cert)))
    try:
        yield seen
    finally:
        server.shutdown()
        server.server_close()


def test_tls_names_the_host_while_connecting_to_the_checked_address(
    world: World, tls_receiver: dict[str, Any], settings: Any, dns: Dns, django_capture_on_commit_callbacks: Any,
) -> None:
    port = tls_receiver["port"]
    settings.GPUPORTAL_WEBHOOK_ALLOWED_HOSTS = [f"hooks.test:{port}", f"other.test:{port}"]
    settings.GPUPORTAL_WEBHOOK_ALLOWED_NETWORKS = ["127.0.0.1/32"]
    dns.answers = {"hooks.test": ["127.0.0.1"], "other.test": ["127.0.0.1"]}
    good, _ = webhook_create(actor=world.users["nlp_admin"], department_id=world.nlp.pk, name="good",
                             url=f"https://hooks.test:{port}/hook")  # fmt: skip
    wrong, _ = webhook_create(actor=world.users["nlp_admin"], department_id=world.nlp.pk, name="wrong",
                              url=f"https://other.test:{port}/hook")  # the certificate is not for this name
    with django_capture_on_commit_callbacks(execute=True):
        _request(world)
    assert Delivery.objects.get(channel=f"webhook:{good.pk}").state == DeliveryState.SENT
    failed = Delivery.objects.get(channel=f"webhook:{wrong.pk}")
    assert (failed.state, failed.last_error) == (DeliveryState.PENDING, "SSLError: could not reach other.test")
    assert tls_receiver["hosts"] == [f"hooks.test:{port}"]
    assert "hooks.test" in tls_receiver["sni"] and "other.test" in tls_receiver["sni"]


# --- the allow-list's format ---------------------------------------------------------------------


def test_entries_written_before_ports_keep_their_meaning_with_the_default_port() -> None:
    assert allowlist.entry_parse("hooks.slack.com") == allowlist.Entry("hooks.slack.com", plain_http=False, port=None)
    assert allowlist.entry_parse("https://Hooks.Slack.com/") == allowlist.Entry("hooks.slack.com", False, None)
    plain = allowlist.entry_parse("http://chat.internal")
    assert (plain.port_for("http"), plain.port_for("https")) == (80, 443)
    assert allowlist.entry_parse("hooks.slack.com").port_for("http") is None
    wildcard = allowlist.entry_parse("*.example.org")
    assert wildcard.matches("a.example.org") and not wildcard.matches("example.org")
    named = allowlist.entry_parse("http://chat.internal:8065")
    assert (named.port_for("http"), named.port_for("https")) == (8065, 8065)
    assert allowlist.entry_parse("[2001:DB8::1]:8443") == allowlist.Entry("2001:db8::1", False, 8443)
    assert allowlist.entry_parse("::1") == allowlist.Entry("::1", False, None)


@pytest.mark.parametrize("raw", ["ftp://x.org", "x.org:0", "x.org:99999", "x.org:", "x.org/path", "u@x.org",
                                 "x.org:80:80", "bad_host!.org", "http://"])  # fmt: skip
def test_a_malformed_entry_is_refused_at_start(raw: str) -> None:
    with pytest.raises(ValueError, match="entry|scheme|port|host"):
        allowlist.webhook_allowlist_check([raw], [])


def test_a_malformed_network_is_refused_at_start() -> None:
    with pytest.raises(ValueError, match="not a network"):
        allowlist.webhook_allowlist_check(["hooks.example.org"], ["10.0.0.0/33"])
    allowlist.webhook_allowlist_check(["hooks.example.org"], ["10.0.0.0/8", "fd00::/64", "127.0.0.1"])


@pytest.mark.parametrize(("address", "kind"), [
    ("8.8.8.8", None), ("2606:4700::1111", None), (f"::ffff:{PUBLIC}", None), ("64:ff9b::808:808", None),
    ("127.0.0.1", "loopback"), ("::1", "loopback"), ("10.1.1.1", "private"), ("fd12::1", "private"),
    ("169.254.1.1", "link-local"), ("fe80::1", "link-local"), ("0.0.0.0", "unspecified"), ("::", "unspecified"),  # noqa: S104
    ("239.1.1.1", "multicast"), ("ff0e::1", "multicast"), ("255.255.255.255", "reserved"), ("192.0.2.1", "private"),
    ("2001:db8::1", "private"), ("::7f00:1", "reserved"),
    ("::ffff:127.0.0.1", "loopback (the IPv4 address 127.0.0.1 inside it)"),
    ("2001:0:4136:e378:8000:63bf:f5ff:fffe", "private (the IPv4 address 10.0.0.1 inside it)"),
])  # fmt: skip
def test_addresses_are_judged_by_their_class(address: str, kind: str | None) -> None:
    assert allowlist.address_refusal(ipaddress.ip_address(address)) == kind
    assert allowlist.address_refusal(ipaddress.ip_address(address), allowed=[ipaddress.ip_network("::/0"),
                                                                               ipaddress.ip_network("0.0.0.0/0")]) is None
