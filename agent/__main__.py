"""``python -m agent`` / ``gpuportal-agent``: the node agent's entry point."""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from types import FrameType

from agent import AGENT_NAME, AGENT_VERSION
from agent.backoff import Backoff
from agent.collector import ReportContext, collect_report
from agent.config import AgentConfig, parse_config
from agent.nvml_calls import NvmlUnavailable, nvml_session
from agent.outbox import Outbox, PortalOutbox, PrintingOutbox
from agent.pod_resources import add_pod_devices
from agent.portal_client import Outcome, PortalClient, TokenUnavailable, read_token
from agent.report import AgentReport
from agent.runner import run_loop

EXIT_OK = 0
EXIT_NOT_DELIVERED = 1
EXIT_CONFIG = 2
EXIT_NVML_UNAVAILABLE = 3

logger = logging.getLogger(AGENT_NAME)


def main() -> None:
    sys.exit(run(sys.argv[1:], os.environ))


def run(argv: Sequence[str], environ: Mapping[str, str]) -> int:
    config = parse_config(argv, environ)
    logging.basicConfig(
        level=config.log_level,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        outbox, client = _outbox(config)
    except (TokenUnavailable, ValueError, OSError) as exc:
        _say(str(exc))
        return EXIT_CONFIG
    try:
        with nvml_session():
            return _run_with_nvml(config, outbox, client)
    except NvmlUnavailable as exc:
        _say(str(exc))
        return EXIT_NVML_UNAVAILABLE


def _outbox(config: AgentConfig) -> tuple[Outbox, PortalClient | None]:
    if config.dry_run:
        return PrintingOutbox(pretty=config.once), None
    assert config.portal_url is not None  # parse_config requires it without --dry-run
    read_token(config.token_file)  # fail at start-up, not at the first send
    client = PortalClient(
        portal_url=config.portal_url,
        node_name=config.node_name,
        token_file=config.token_file,
        ca_bundle=config.ca_bundle,
        timeout_seconds=config.http_timeout_seconds,
        allow_plain_http=config.allow_plain_http,
    )
    backoff = Backoff(initial=config.backoff_initial_seconds, maximum=config.backoff_max_seconds)
    return PortalOutbox(client, backoff), client


def _run_with_nvml(config: AgentConfig, outbox: Outbox, client: PortalClient | None) -> int:
    started_at = datetime.now(UTC)

    def collect(sequence: int) -> AgentReport:
        context = ReportContext(
            node_name=config.node_name,
            sequence=sequence,
            agent_started_at=started_at,
            interval_seconds=config.interval_seconds,
            proc_root=config.proc_root,
        )
        report = collect_report(context, now=datetime.now(UTC))
        add_pod_devices(report, config.pod_resources)
        if client is not None:  # measured from the portal's Date header; null until the first answer
            report["clock_offset_seconds"] = client.clock_offset_seconds
        return report

    if config.once:
        outbox.submit(collect(0))
        result = outbox.attempt()
        if result is None or result.outcome is Outcome.DELIVERED:
            return EXIT_OK
        _say(f"report not delivered: {result.detail}")
        return EXIT_NOT_DELIVERED

    logger.info(
        "%s %s reporting node %s every %ds", AGENT_NAME, AGENT_VERSION, config.node_name, config.interval_seconds
    )
    stop = threading.Event()
    with _stop_on_signals(stop):
        run_loop(
            collect=collect,
            outbox=outbox,
            interval_seconds=config.interval_seconds,
            clock=time.monotonic,
            wait=stop.wait,
            should_stop=stop.is_set,
        )
    logger.info("stopped")
    return EXIT_OK


def _say(message: str) -> None:
    """One line on stderr, for failures that end the agent (logging may not be set up yet)."""
    sys.stderr.write(f"{AGENT_NAME}: {message}\n")


@contextmanager
def _stop_on_signals(stop: threading.Event) -> Iterator[None]:
    def request_stop(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous = {sig: signal.signal(sig, request_stop) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


if __name__ == "__main__":
    main()
