"""Start and stop one control-plane process with its output in a log file."""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path

_PR_SET_PDEATHSIG = 1

# Resolved once here: the pre-exec hook runs in the forked child, where only
# async-signal-safe work (a plain libc call) is allowed.
_PRCTL: Callable[..., int] | None
try:
    _PRCTL = ctypes.CDLL(None, use_errno=True).prctl
except (OSError, AttributeError):  # not Linux/glibc
    _PRCTL = None


def _die_with_parent() -> None:
    """Ask Linux to SIGKILL the child when the process that started it dies.

    This covers the one exit path neither ``atexit`` nor a context manager
    sees: the test runner being SIGKILLed. (Linux only; a no-op elsewhere.)
    """
    if _PRCTL is not None:
        _PRCTL(_PR_SET_PDEATHSIG, signal.SIGKILL)


def free_ports(count: int) -> list[int]:
    """Return *count* distinct TCP ports that are free on 127.0.0.1 right now.

    All sockets are held open until every port is picked so that the ports
    differ; a small race with other programs remains, which the launcher
    covers by retrying a failed start.
    """
    sockets: list[socket.socket] = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind(("127.0.0.1", 0))
            sockets.append(sock)
        return [int(sock.getsockname()[1]) for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


class ManagedProcess:
    """A child process whose stdout and stderr go to ``<log_dir>/<name>.log``."""

    def __init__(self, name: str, argv: Sequence[str | os.PathLike[str]], log_dir: Path) -> None:
        self.name = name
        self.argv = [os.fspath(arg) for arg in argv]
        self.log_path = log_dir / f"{name}.log"
        self._popen: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with self.log_path.open("ab") as log:
            self._popen = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                # Own process group: a terminal's Ctrl-C reaches only us, and we
                # stop the children in order.
                start_new_session=True,
                # Safe despite threads: the hook makes one pre-resolved libc call.
                preexec_fn=_die_with_parent,  # noqa: PLW1509
            )

    @property
    def pid(self) -> int | None:
        return self._popen.pid if self._popen is not None else None

    def exit_code(self) -> int | None:
        """None while running (or never started), else the exit status."""
        return self._popen.poll() if self._popen is not None else None

    def running(self) -> bool:
        return self._popen is not None and self._popen.poll() is None

    def log_tail(self, lines: int = 30) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def terminate(self) -> None:
        """Send SIGTERM without waiting (so several processes stop in parallel)."""
        if self.running():
            assert self._popen is not None
            with contextlib.suppress(ProcessLookupError):
                self._popen.terminate()

    def wait_or_kill(self, timeout: float) -> None:
        """Wait up to *timeout* seconds after :meth:`terminate`, then SIGKILL."""
        if self._popen is None:
            return
        try:
            self._popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                self._popen.kill()
            self._popen.wait(timeout=10)

    def stop(self, timeout: float = 10.0) -> None:
        self.terminate()
        self.wait_or_kill(timeout)
