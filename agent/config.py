"""The agent's settings: command-line flags, each with an environment variable as its default.

Flags win over the environment, so a DaemonSet sets everything through ``env`` and a person
debugging on a node can override one value on the command line. A malformed value fails at
start-up with a usage error rather than being ignored.
"""

from __future__ import annotations

import argparse
import re
import socket
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from agent import AGENT_NAME, AGENT_VERSION
from agent.pod_resources import DEFAULT_SOCKET, PodResourcesSettings

ENV_PREFIX = "GPUPORTAL_AGENT_"
DEFAULT_TOKEN_FILE = "/var/run/secrets/gpuportal/node-token/token"  # noqa: S105 (a path, not a secret)
DEFAULT_INTERVAL_SECONDS = 30
# The settings that can come from the environment, as GPUPORTAL_AGENT_<SETTING> (upper case).
ENV_SETTINGS = (
    "portal_url",
    "node_name",
    "token_file",
    "ca_bundle",
    "interval",
    "http_timeout",
    "backoff_initial",
    "backoff_max",
    "proc_root",
    "allow_plain_http",
    "log_level",
    "pod_resources_socket",
    "pod_resources_timeout",
    "replica_sharing",
    "hami_resources",
)
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}

T = TypeVar("T")


@dataclass(frozen=True)
class AgentConfig:
    portal_url: str | None
    node_name: str
    token_file: Path
    ca_bundle: Path | None
    interval_seconds: int
    http_timeout_seconds: float
    backoff_initial_seconds: float
    backoff_max_seconds: float
    proc_root: Path
    once: bool
    dry_run: bool
    allow_plain_http: bool
    log_level: str
    pod_resources: PodResourcesSettings = PodResourcesSettings()


def env_name(setting: str) -> str:
    return ENV_PREFIX + setting.upper()


def parse_config(argv: Sequence[str], environ: Mapping[str, str]) -> AgentConfig:
    """Settings from flags and environment; exits with status 2 and a usage message when invalid."""
    parser = _parser()
    env = _EnvDefaults(parser, environ)
    parser.set_defaults(
        portal_url=env.get("portal_url", str, None),
        node_name=env.get("node_name", str, None),
        token_file=env.get("token_file", Path, Path(DEFAULT_TOKEN_FILE)),
        ca_bundle=env.get("ca_bundle", Path, None),
        interval=env.get("interval", int, DEFAULT_INTERVAL_SECONDS),
        http_timeout=env.get("http_timeout", float, 10.0),
        backoff_initial=env.get("backoff_initial", float, 2.0),
        backoff_max=env.get("backoff_max", float, 300.0),
        proc_root=env.get("proc_root", Path, Path("/proc")),
        allow_plain_http=env.get_bool("allow_plain_http"),
        log_level=env.get("log_level", str, "INFO"),
        pod_resources_socket=env.get("pod_resources_socket", Path, None),
        pod_resources_timeout=env.get("pod_resources_timeout", float, 5.0),
        replica_sharing=env.get("replica_sharing", str, "time-sliced"),
        hami_resources=env.get("hami_resources", str, ""),
    )
    args = parser.parse_args(list(argv))
    _check_ranges(parser, args)
    node_name = args.node_name or (socket.gethostname().lower() if args.dry_run else None)
    if not node_name:
        parser.error(f"--node-name (or {env_name('node_name')}) is required")
    if len(node_name) > 253 or not _DNS_SUBDOMAIN.match(node_name):
        parser.error(f"node name {node_name!r} is not a Kubernetes node name (a lowercase DNS-1123 subdomain)")
    if not args.dry_run and not args.portal_url:
        parser.error(f"--portal-url (or {env_name('portal_url')}) is required unless --dry-run")
    return AgentConfig(
        portal_url=args.portal_url,
        node_name=node_name,
        token_file=args.token_file,
        ca_bundle=args.ca_bundle,
        interval_seconds=args.interval,
        http_timeout_seconds=args.http_timeout,
        backoff_initial_seconds=args.backoff_initial,
        backoff_max_seconds=args.backoff_max,
        proc_root=args.proc_root,
        once=args.once,
        dry_run=args.dry_run,
        allow_plain_http=args.allow_plain_http,
        log_level=args.log_level.upper(),
        pod_resources=PodResourcesSettings(
            socket=args.pod_resources_socket,
            timeout_seconds=args.pod_resources_timeout,
            replica_sharing=args.replica_sharing,
            hami_resources=frozenset(name.strip() for name in args.hami_resources.split(",") if name.strip()),
        ),
    )


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=AGENT_NAME,
        description="Report this node's NVIDIA GPUs (NVML) to the GPU Portal.",
        epilog=(
            "Every option but --once, --dry-run and --version can also be set with the environment variable "
            f"{ENV_PREFIX}<OPTION> (e.g. {env_name('portal_url')}); a flag wins over the variable. "
            "Exit status: 0 ok, 1 report not delivered (--once), 2 usage or configuration error, "
            "3 NVML unavailable (no driver)."
        ),
    )
    parser.add_argument("--portal-url", help="base URL of the portal, https://...")
    parser.add_argument("--node-name", help="this Kubernetes node's name (downward API spec.nodeName)")
    parser.add_argument("--token-file", type=Path, help=f"file holding the node token (default {DEFAULT_TOKEN_FILE})")
    parser.add_argument("--ca-bundle", type=Path, help="PEM file of CAs to trust for the portal (default: system CAs)")
    parser.add_argument("--interval", type=int, help="seconds between reports, 1-3600 (default 30)")
    parser.add_argument("--http-timeout", type=float, help="seconds to wait for the portal (default 10)")
    parser.add_argument("--backoff-initial", type=float, help="first retry delay in seconds (default 2)")
    parser.add_argument("--backoff-max", type=float, help="longest retry delay in seconds (default 300)")
    parser.add_argument("--proc-root", type=Path, help="the host's /proc, to map processes to pods (default /proc)")
    parser.add_argument(
        "--pod-resources-socket",
        type=Path,
        help=f"the kubelet's PodResources socket, read each interval (default {DEFAULT_SOCKET} when it exists)",
    )
    parser.add_argument("--pod-resources-timeout", type=float, help="seconds to wait for PodResources (default 5)")
    parser.add_argument(
        "--replica-sharing",
        help="what a GPU replica (<uuid>::<n>) is on this node: time-sliced (default) or mps",
    )
    parser.add_argument("--hami-resources", help="comma-separated resource names HAMi serves on this node")
    parser.add_argument("--once", action="store_true", help="collect and send one report, then exit")
    parser.add_argument("--dry-run", action="store_true", help="print reports as JSON on stdout instead of sending")
    parser.add_argument(
        "--allow-plain-http",
        action=argparse.BooleanOptionalAction,
        help="accept an http:// portal URL (development only: the token would travel in clear)",
    )
    parser.add_argument("--log-level", choices=["DEBUG", "INFO", "WARNING", "ERROR"], type=str.upper)
    parser.add_argument("--version", action="version", version=f"{AGENT_NAME} {AGENT_VERSION}")
    return parser


def _check_ranges(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    if not 1 <= args.interval <= 3600:
        parser.error("--interval must be between 1 and 3600 seconds")
    if args.http_timeout <= 0:
        parser.error("--http-timeout must be positive")
    if not 0 < args.backoff_initial <= args.backoff_max:
        parser.error("--backoff-initial must be positive and at most --backoff-max")
    if args.pod_resources_timeout <= 0:
        parser.error("--pod-resources-timeout must be positive")
    if args.replica_sharing not in {"time-sliced", "mps"}:
        parser.error("--replica-sharing must be time-sliced or mps")
    if args.log_level not in {"DEBUG", "INFO", "WARNING", "ERROR"}:
        parser.error(f"{env_name('log_level')} must be DEBUG, INFO, WARNING or ERROR")


class _EnvDefaults:
    def __init__(self, parser: argparse.ArgumentParser, environ: Mapping[str, str]) -> None:
        self._parser = parser
        self._environ = environ

    def get(self, setting: str, convert: Callable[[str], T], default: T) -> T:
        assert setting in ENV_SETTINGS, setting
        raw = self._environ.get(env_name(setting))
        if raw is None or raw == "":
            return default
        try:
            return convert(raw)
        except ValueError:
            self._parser.error(f"{env_name(setting)}={raw!r} is not a valid value")

    def get_bool(self, setting: str) -> bool:
        assert setting in ENV_SETTINGS, setting
        raw = self._environ.get(env_name(setting), "").strip().lower()
        if raw in _TRUE:
            return True
        if raw in _FALSE:
            return False
        self._parser.error(f"{env_name(setting)} must be true or false, not {raw!r}")
