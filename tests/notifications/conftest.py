"""Real components for the notification tests: an SMTP server (aiosmtpd) and an HTTP receiver
(``http.server`` on a thread), both on loopback with a free port, and the settings that point the
portal at them."""

from __future__ import annotations

import email
import email.message
import email.policy
import http.server
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiosmtpd.controller import Controller

from tests.conftest import World


class _Inbox:
    def __init__(self) -> None:
        self.messages: list[email.message.EmailMessage] = []
        self.lock = threading.Lock()

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:  # noqa: N802 - aiosmtpd's hook name
        message = email.message_from_bytes(envelope.content, policy=email.policy.default)
        assert isinstance(message, email.message.EmailMessage)
        message["X-Envelope-To"] = ", ".join(envelope.rcpt_tos)
        with self.lock:
            self.messages.append(message)
        return "250 OK"

    def to(self, address: str) -> list[email.message.EmailMessage]:
        with self.lock:
            return [m for m in self.messages if address in m["X-Envelope-To"]]


@pytest.fixture
def smtp(settings: Any) -> Iterator[_Inbox]:
    """A running SMTP server; e-mail is on and goes there."""
    inbox = _Inbox()
    with socket.socket() as probe:  # a free port (the controller checks it is up by connecting to it)
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    controller = Controller(inbox, hostname="127.0.0.1", port=port)
    controller.start()
    try:
        settings.GPUPORTAL_EMAIL_URL = f"smtp://127.0.0.1:{controller.port}"
        settings.GPUPORTAL_PUBLIC_URL = "https://gpu.example.org"
        yield inbox
    finally:
        controller.stop()


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class Receiver:
    """Answers each POST with the next scripted status (then 200), and records every request."""

    port: int = 0
    script: list[int] = field(default_factory=list)
    requests: list[Received] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def url(self, path: str = "/hook") -> str:
        return f"http://127.0.0.1:{self.port}{path}"


@pytest.fixture
def receiver(settings: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[Receiver]:
    """A running HTTP receiver; http://127.0.0.1 on its port is on the webhook allow-list, and the
    loopback address is allowed (GPUPORTAL_WEBHOOK_ALLOWED_NETWORKS)."""
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    state = Receiver()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's hook name
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            with state.lock:
                state.requests.append(Received(self.path, dict(self.headers.items()), body))
                status = state.script.pop(0) if state.script else 200
            self.send_response(status)
            if 300 <= status < 400:
                self.send_header("Location", f"http://127.0.0.1:{state.port}/elsewhere")
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    state.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    settings.GPUPORTAL_WEBHOOK_ALLOWED_HOSTS = [f"http://127.0.0.1:{state.port}"]
    settings.GPUPORTAL_WEBHOOK_ALLOWED_NETWORKS = ["127.0.0.1/32"]  # loopback is refused unless named
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def mailed_world(world: World) -> World:
    """The shared world, every persona with an e-mail address (``<name>@example.org``)."""
    for name, user in world.users.items():
        user.email = f"{name}@example.org"
        user.save(update_fields=["email"])
    return world


@dataclass
class Dns:
    """The resolver webhooks use, answering from ``answers`` (a name missing from it does not
    resolve); ``asked`` records every lookup, in order."""

    answers: dict[str, list[str]] = field(default_factory=dict)
    asked: list[str] = field(default_factory=list)

    def resolve(self, host: str, port: int) -> list[str]:
        from notifications.webhooks import Unresolved

        self.asked.append(host)
        if host not in self.answers:
            raise Unresolved(f"{host} does not resolve (gaierror)")
        return list(self.answers[host])


@pytest.fixture(autouse=True)
def dns(monkeypatch: pytest.MonkeyPatch) -> Dns:
    """No real name lookups in these tests: webhooks resolve names through a scripted resolver."""
    fake = Dns()
    monkeypatch.setattr("notifications.webhooks.resolve", fake.resolve)
    return fake
