"""Waiting for a freshly started component to report itself healthy."""

from __future__ import annotations

import http.client
import ssl
from collections.abc import Sequence
from dataclasses import dataclass

from kube_testenv.datadir import ClusterFiles
from kube_testenv.process import ManagedProcess
from kube_testenv.waiting import WaitTimeout, wait_for


class ClusterStartError(RuntimeError):
    """A component exited or did not become healthy; the message has its log tail."""


@dataclass(frozen=True)
class HealthEndpoint:
    """Where a component says it is healthy: ``https://127.0.0.1:<port><path>``, asked with the
    admin's client certificate or without one."""

    port: int
    path: str
    client_cert: bool


def wait_healthy(
    process: ManagedProcess,
    endpoint: HealthEndpoint,
    *,
    files: ClusterFiles,
    timeout: float,
    also: Sequence[ManagedProcess] = (),
) -> None:
    """Poll ``endpoint`` until it answers 200; fail early, with the log tail, when *process* or one
    of *also* exits, and with *process*'s log tail on a timeout."""
    port, path, client_cert = endpoint.port, endpoint.path, endpoint.client_cert
    context = ssl.create_default_context(cafile=str(files.ca))
    if client_cert:
        context.load_cert_chain(str(files.admin_cert), str(files.admin_key))
    watched = [process, *also]

    def probe() -> bool:
        for proc in watched:
            code = proc.exit_code()
            if code is not None:
                raise ClusterStartError(
                    f"{proc.name} exited with status {code} during start-up; "
                    f"last lines of {proc.log_path}:\n{proc.log_tail()}"
                )
        connection = http.client.HTTPSConnection("127.0.0.1", port, timeout=2, context=context)
        try:
            connection.request("GET", path)
            return connection.getresponse().status == 200
        except OSError:
            return False
        finally:
            connection.close()

    try:
        wait_for(
            probe,
            fatal=(ClusterStartError,),
            timeout=timeout,
            interval=0.1,
            what=f"{process.name} {path} on port {port}",
        )
    except WaitTimeout as exc:
        raise ClusterStartError(f"{exc}; last lines of {process.log_path}:\n{process.log_tail()}") from exc
