"""A loopback TCP proxy that can refuse connections: an API server outage, seen from the client."""

from __future__ import annotations

import socket
import threading
from types import TracebackType
from typing import Self


class TcpProxy:
    def __init__(self, *, target: tuple[str, int]) -> None:
        self.target = target
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._accepting = threading.Event()
        self._accepting.set()
        self._stop = threading.Event()
        self._connections: list[socket.socket] = []
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._serve, daemon=True)

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def __enter__(self) -> Self:
        self._listener.settimeout(0.1)
        self._thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self._listener.close()
        self._drop_connections()

    def stop_accepting(self) -> None:
        """New connections are closed at once and open ones are cut, like a stopped server."""
        self._accepting.clear()
        self._drop_connections()

    def start_accepting(self) -> None:
        self._accepting.set()

    def _drop_connections(self) -> None:
        with self._lock:
            for connection in self._connections:
                try:
                    connection.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                connection.close()
            self._connections.clear()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                downstream, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            if not self._accepting.is_set():
                downstream.close()
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                downstream.close()
                continue
            with self._lock:
                self._connections += [downstream, upstream]
            for source, sink in ((downstream, upstream), (upstream, downstream)):
                threading.Thread(target=self._pipe, args=(source, sink), daemon=True).start()

    @staticmethod
    def _pipe(source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for end in (source, sink):
                try:
                    end.close()
                except OSError:
                    pass
