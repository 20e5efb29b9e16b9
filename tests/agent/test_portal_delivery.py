"""Delivering reports to a real HTTP server on 127.0.0.1: success, failures, backoff, latest-only."""

from __future__ import annotations

import datetime
import ipaddress
import ssl
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from agent.backoff import Backoff
from agent.outbox import PortalOutbox
from agent.portal_client import Outcome, PortalClient
from agent.report import AgentReport
from agent.runner import run_loop
from tests.agent.conftest import NODE_NAME, TOKEN
from tests.agent.portal_stub import PortalStub, ScriptedResponse


def a_report(sequence: int) -> AgentReport:
    return {
        "schema_version": 1,
        "agent_version": "0.1.0",
        "node_name": NODE_NAME,
        "sequence": sequence,
        "agent_started_at": "2026-11-29T08:00:00.000Z",
        "collected_at": f"2026-11-29T08:00:{sequence:02d}.000Z",
        "interval_seconds": 30,
        "undelivered_reports": 0,
        "driver_version": "550.90.07",
        "cuda_driver_version": "12.4",
        "gpus": [],
        "errors": [],
    }


def client_for(portal: PortalStub, token_file: Path, **options: object) -> PortalClient:
    return PortalClient(
        portal_url=portal.url,
        node_name=NODE_NAME,
        token_file=token_file,
        timeout_seconds=5,
        allow_plain_http=True,
        **options,  # type: ignore[arg-type]
    )


class FakeTime:
    """A clock that only moves when the code under test sleeps."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.sleeps: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def no_jitter() -> float:
    return 1.0  # the top of each backoff range, so delays are exact


def test_it_posts_the_report_with_the_node_token(portal: PortalStub, token_file: Path) -> None:
    outbox = PortalOutbox(client_for(portal, token_file), Backoff(initial=1, maximum=60))
    outbox.submit(a_report(0))
    result = outbox.attempt()
    assert result is not None and result.outcome is Outcome.DELIVERED and result.status == 202
    [request] = portal.requests
    assert request.path == f"/api/v1/nodes/{NODE_NAME}/report"
    assert request.headers["Authorization"] == f"Bearer {TOKEN}"
    assert request.headers["Content-Type"] == "application/json"
    assert request.headers["User-Agent"].startswith("gpuportal-agent/")
    assert request.json() == a_report(0)
    assert outbox.pending is None


def test_it_rereads_the_token_file_so_a_rotated_secret_takes_effect(portal: PortalStub, token_file: Path) -> None:
    client = client_for(portal, token_file)
    client.post_report(b"{}")
    token_file.write_text("rotated-token", encoding="utf-8")
    client.post_report(b"{}")
    assert [r.headers["Authorization"] for r in portal.requests] == [f"Bearer {TOKEN}", "Bearer rotated-token"]


def test_while_the_portal_fails_it_backs_off_and_sends_only_the_latest_report(
    portal: PortalStub, token_file: Path
) -> None:
    portal.responses = [ScriptedResponse(503)] * 4
    time = FakeTime()
    outbox = PortalOutbox(
        client_for(portal, token_file), Backoff(initial=4, maximum=20, random_unit=no_jitter), time.clock
    )
    collected: list[int] = []

    def collect(sequence: int) -> AgentReport:
        collected.append(sequence)
        return a_report(sequence)

    run_loop(
        collect=collect,
        outbox=outbox,
        interval_seconds=10,
        clock=time.clock,
        wait=time.sleep,
        should_stop=lambda: time.now >= 1000 + 65,
    )
    # t=0 report 0: 503, retry in 4 | t=4: 503, in 8 | t=10 report 1 replaces 0 | t=12: 503, in 16
    # t=20, 30 reports 2, 3 | t=28: report 2, 503, in 20 (capped) | t=40 report 4 | t=48: report 4, 202
    # then the portal is back: reports 5 and 6 go out as they are collected, at t=50 and t=60
    received = [(r.json()["sequence"], r.json()["undelivered_reports"]) for r in portal.requests]
    assert received == [(0, 0), (0, 0), (1, 1), (2, 2), (4, 4), (5, 0), (6, 0)]
    assert collected == [0, 1, 2, 3, 4, 5, 6]  # collection kept its 10 s rhythm throughout
    assert all(seconds <= 10 for seconds in time.sleeps)
    assert outbox.pending is None and outbox.undelivered == 0


def test_it_keeps_only_the_latest_report_while_the_portal_is_unreachable(no_proxy: None, token_file: Path) -> None:
    down = PortalStub(listening=False)  # bound, not listening: connections are refused
    try:
        time = FakeTime()
        outbox = PortalOutbox(
            client_for(down, token_file), Backoff(initial=2, maximum=8, random_unit=no_jitter), time.clock
        )
        delays = []
        for sequence in range(5):
            outbox.submit(a_report(sequence))
            result = outbox.attempt()
            assert result is not None and result.outcome is Outcome.RETRY
            assert "unreachable" in result.detail
            delays.append(outbox.seconds_until_attempt())
        assert delays == [2, 4, 8, 8, 8]  # doubling, capped
        assert outbox.undelivered == 4

        down.start_listening()
        result = outbox.attempt()
        assert result is not None and result.outcome is Outcome.DELIVERED
        [request] = down.requests
        assert request.json()["sequence"] == 4
        assert request.json()["undelivered_reports"] == 4
        assert outbox.undelivered == 0 and outbox.pending is None
    finally:
        down.close()


def test_it_waits_as_long_as_retry_after_asks_within_the_cap(portal: PortalStub, token_file: Path) -> None:
    portal.responses = [ScriptedResponse(429, {"Retry-After": "30"}), ScriptedResponse(503, {"Retry-After": "9999"})]
    time = FakeTime()
    outbox = PortalOutbox(
        client_for(portal, token_file), Backoff(initial=1, maximum=120, random_unit=no_jitter), time.clock
    )
    outbox.submit(a_report(0))
    outbox.attempt()
    assert outbox.seconds_until_attempt() == 30
    outbox.attempt()
    assert outbox.seconds_until_attempt() == 120


@pytest.mark.parametrize("status", [400, 401, 403, 404, 422])
def test_a_rejected_report_is_dropped_and_counted(portal: PortalStub, token_file: Path, status: int) -> None:
    portal.responses = [ScriptedResponse(status, body=b'{"detail":"no"}')]
    time = FakeTime()
    outbox = PortalOutbox(
        client_for(portal, token_file), Backoff(initial=5, maximum=60, random_unit=no_jitter), time.clock
    )
    outbox.submit(a_report(0))
    result = outbox.attempt()
    assert result is not None and result.outcome is Outcome.REJECTED and result.status == status
    assert '{"detail":"no"}' in result.detail
    assert outbox.pending is None
    assert outbox.seconds_until_attempt() is None
    outbox.submit(a_report(1))
    assert outbox.seconds_until_attempt() == 5  # still backing off: a revoked token must not hammer the portal
    time.sleep(5)
    outbox.attempt()
    assert portal.requests[-1].json()["undelivered_reports"] == 1


def test_it_does_not_follow_redirects_with_the_token(portal: PortalStub, token_file: Path) -> None:
    portal.responses = [ScriptedResponse(307, {"Location": "https://elsewhere.invalid/collect"})]
    result = client_for(portal, token_file).post_report(b"{}")
    assert result.outcome is Outcome.REJECTED
    assert "redirect" in result.detail and "elsewhere.invalid" in result.detail
    assert len(portal.requests) == 1


def test_a_missing_token_file_is_retried_not_fatal(portal: PortalStub, tmp_path: Path) -> None:
    result = client_for(portal, tmp_path / "absent").post_report(b"{}")
    assert result.outcome is Outcome.RETRY and "token" in result.detail
    assert portal.requests == []


def test_it_refuses_a_plain_http_portal_unless_allowed(token_file: Path) -> None:
    with pytest.raises(ValueError, match="https"):
        PortalClient(portal_url="http://portal.example", node_name=NODE_NAME, token_file=token_file)
    with pytest.raises(ValueError, match="https"):
        PortalClient(
            portal_url="ftp://portal.example", node_name=NODE_NAME, token_file=token_file, allow_plain_http=True
        )


def test_the_node_name_is_escaped_in_the_path(portal: PortalStub, token_file: Path) -> None:
    client = PortalClient(portal_url=portal.url + "/", node_name="a/b?c", token_file=token_file, allow_plain_http=True)
    assert client.url == f"{portal.url}/api/v1/nodes/a%2Fb%3Fc/report"


# --- TLS -----------------------------------------------------------------------------------


def _certificate_authority_and_server(directory: Path) -> tuple[Path, ssl.SSLContext]:
    """A throwaway CA and a server certificate for 127.0.0.1 signed by it."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "agent test CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    server_key = ec.generate_private_key(ec.SECP256R1())
    server = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]))
        .issuer_name(ca_name)
        .public_key(server_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
        .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    ca_file = directory / "ca.pem"
    ca_file.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    chain = directory / "server.pem"
    chain.write_bytes(
        server.public_bytes(serialization.Encoding.PEM)
        + server_key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(chain)
    return ca_file, context


def test_it_verifies_the_portal_certificate_against_the_ca_bundle(
    no_proxy: None, tmp_path: Path, token_file: Path
) -> None:
    ca_file, server_tls = _certificate_authority_and_server(tmp_path)
    portal = PortalStub(tls=server_tls)
    try:
        trusted = PortalClient(portal_url=portal.url, node_name=NODE_NAME, token_file=token_file, ca_bundle=ca_file)
        assert trusted.post_report(b"{}").outcome is Outcome.DELIVERED

        untrusted = PortalClient(portal_url=portal.url, node_name=NODE_NAME, token_file=token_file)
        result = untrusted.post_report(b"{}")
        assert result.outcome is Outcome.RETRY
        assert "CERTIFICATE_VERIFY_FAILED" in result.detail
        assert len(portal.requests) == 1  # the token never reached an unverified server
    finally:
        portal.close()


# --- backoff ---------------------------------------------------------------------------------


def test_backoff_doubles_up_to_the_cap_with_jitter_in_the_upper_half() -> None:
    draws = iter([0.0, 1.0, 0.5, 0.0, 1.0, 0.25])
    backoff = Backoff(initial=2, maximum=10, random_unit=lambda: next(draws))
    # nominal 2, 4, 8, 10, 10, 10 -> each delay in [nominal / 2, nominal]
    assert [backoff.next_delay() for _ in range(6)] == [1.0, 4.0, 6.0, 5.0, 10.0, 6.25]
    backoff.reset()
    assert backoff.failures == 0
    assert Backoff(initial=2, maximum=10, random_unit=lambda: 1.0).next_delay() == 2.0


def test_backoff_survives_a_very_long_outage() -> None:
    backoff = Backoff(initial=1, maximum=300, random_unit=lambda: 1.0)
    assert [backoff.next_delay() for _ in range(5000)][-1] == 300


def test_backoff_rejects_nonsense() -> None:
    with pytest.raises(ValueError):
        Backoff(initial=0, maximum=1)
    with pytest.raises(ValueError):
        Backoff(initial=10, maximum=1)
