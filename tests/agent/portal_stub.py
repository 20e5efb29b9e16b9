"""A real HTTP(S) server on 127.0.0.1 standing in for the portal's report endpoint."""

from __future__ import annotations

import json
import ssl
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class ReceivedRequest:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class ScriptedResponse:
    status: int
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""


class PortalStub:
    """Records every request; answers from ``responses`` in order, then with 202.

    Created bound but not listening when ``listening=False``: connections are refused (the
    portal is down) until ``start_listening()``, on the same port.
    """

    def __init__(self, *, listening: bool = True, tls: ssl.SSLContext | None = None) -> None:
        self.requests: list[ReceivedRequest] = []
        self.responses: list[ScriptedResponse] = []
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                stub.requests.append(ReceivedRequest("POST", self.path, dict(self.headers.items()), body))
                reply = stub.responses.pop(0) if stub.responses else ScriptedResponse(202, body=b'{"accepted":true}')
                self.send_response(reply.status)
                for name, value in reply.headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(reply.body)))
                self.end_headers()
                self.wfile.write(reply.body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler, bind_and_activate=False)
        self._server.server_bind()
        if tls is not None:
            self._server.socket = tls.wrap_socket(self._server.socket, server_side=True)
        self.port = self._server.server_address[1]
        scheme = "https" if tls else "http"
        self.url = f"{scheme}://127.0.0.1:{self.port}"
        self._thread: threading.Thread | None = None
        if listening:
            self.start_listening()

    def start_listening(self) -> None:
        self._server.server_activate()
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()

    def close(self) -> None:
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join(timeout=5)
        self._server.server_close()
