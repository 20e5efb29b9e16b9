"""Where the test control-plane binaries live and how to find them."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

#: Kubernetes version the binaries are built at (tools/kube-testenv.mk).
KUBE_VERSION = "v1.36.3"
#: etcd version built by tools/etcd.
ETCD_VERSION = "v3.6.8"
#: kwok version built by tools/kwok (runs the fake GPU nodes' pods).
KWOK_VERSION = "v0.8.0"

#: Env var naming a directory with etcd, kube-apiserver, ... (overrides the default).
BIN_ENV = "GPUPORTAL_KUBE_BIN"
#: Env var that turns "binaries missing" from a skip into a failure (set by make test).
REQUIRE_ENV = "GPUPORTAL_REQUIRE_KUBE"
#: Env var naming the kwok controller binary (overrides the default).
KWOK_BIN_ENV = "GPUPORTAL_KWOK_BIN"
#: Env var that keeps the cluster's data directory (certs, logs) after it stops.
KEEP_ENV = "GPUPORTAL_KUBE_KEEP"

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_BIN_DIR = REPO_ROOT / ".cache" / "kube-testenv" / KUBE_VERSION / "bin"
DEFAULT_KWOK_BIN = REPO_ROOT / ".cache" / "kwok" / KWOK_VERSION / "bin" / "kwok"

COMPONENTS = (
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kubectl",
)


class BinariesMissing(RuntimeError):
    """The control-plane binaries are not built (or not where we were told)."""


@dataclass(frozen=True)
class KubeBinaries:
    """Absolute paths of the control-plane executables."""

    directory: Path

    def path(self, component: str) -> Path:
        if component not in COMPONENTS:
            raise KeyError(component)
        return self.directory / component

    @property
    def etcd(self) -> Path:
        return self.path("etcd")

    @property
    def kube_apiserver(self) -> Path:
        return self.path("kube-apiserver")

    @property
    def kube_controller_manager(self) -> Path:
        return self.path("kube-controller-manager")

    @property
    def kube_scheduler(self) -> Path:
        return self.path("kube-scheduler")

    @property
    def kubectl(self) -> Path:
        return self.path("kubectl")


def bin_dir() -> Path:
    """The directory named by $GPUPORTAL_KUBE_BIN, else the make target's output."""
    configured = os.environ.get(BIN_ENV, "").strip()
    return Path(configured).expanduser().resolve() if configured else DEFAULT_BIN_DIR


def find_binaries(directory: Path | None = None) -> KubeBinaries:
    """Return the binaries in *directory* (default: :func:`bin_dir`) or raise.

    The message says how to build them, because the usual cause is a fresh
    checkout that has not run ``make kube-testenv`` yet.
    """
    directory = directory if directory is not None else bin_dir()
    missing = [name for name in COMPONENTS if not os.access(directory / name, os.X_OK)]
    if missing:
        source = f"${BIN_ENV}" if os.environ.get(BIN_ENV, "").strip() else "default"
        raise BinariesMissing(
            f"Kubernetes test binaries missing in {directory} ({source}): "
            f"{', '.join(missing)}. Build them with `make kube-testenv` "
            f"(Kubernetes {KUBE_VERSION}, etcd {ETCD_VERSION}; cold build 6-15 min on 2 cores) "
            f"or point ${BIN_ENV} at a directory holding them."
        )
    return KubeBinaries(directory)


def env_flag(name: str) -> bool:
    """True when env var *name* is set to a truthy value (1, true, yes, on)."""
    return os.environ.get(name, "").strip().lower() in {"1", "true", "yes", "on"}


def find_kwok() -> Path:
    """The kwok controller named by $GPUPORTAL_KWOK_BIN, else the make target's output; or raise."""
    configured = os.environ.get(KWOK_BIN_ENV, "").strip()
    path = Path(configured).expanduser().resolve() if configured else DEFAULT_KWOK_BIN
    if not os.access(path, os.X_OK):
        source = f"${KWOK_BIN_ENV}" if configured else "default"
        raise BinariesMissing(
            f"kwok controller missing at {path} ({source}). Build it with `make kube-testenv` "
            f"(kwok {KWOK_VERSION}; cold build about 3 min on 2 cores) or point ${KWOK_BIN_ENV} at it."
        )
    return path
