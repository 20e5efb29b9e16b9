"""``python -m kube_testenv up``: run a test control plane until interrupted.

Prints the admin kubeconfig path (and an ``export KUBECONFIG=...`` line), then
waits for Ctrl-C or SIGTERM, stops everything and removes its data.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from collections.abc import Sequence
from types import FrameType

from kube_testenv.cluster import KubeTestCluster
from kube_testenv.gpu_nodes import FakeGPUNodes, GPUNodeSpec
from kube_testenv.paths import BinariesMissing

DEMO_NODES = (
    GPUNodeSpec("gpu-h100-0", gpus=8),
    GPUNodeSpec(
        "gpu-a100-mig-0",
        gpus=8,
        product="NVIDIA-A100-SXM4-80GB",
        compute_capability=(8, 0),
        mig_strategy="mixed",
        mig_gpus=4,
        mig_devices={"1g.10gb": 14, "3g.40gb": 4},
    ),
    GPUNodeSpec(
        "gpu-l4-shared-0",
        gpus=4,
        product="NVIDIA-L4",
        gpu_memory_mib=23034,
        compute_capability=(8, 9),
        mig_capable=False,
        sharing="time-slicing",
        replicas=4,
        rename_shared=True,
    ),
)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m kube_testenv")
    commands = parser.add_subparsers(dest="command", required=True)
    up = commands.add_parser("up", help="start a control plane and run until interrupted")
    up.add_argument(
        "--gpu-nodes",
        action="store_true",
        help="register demo fake GPU nodes (H100, A100 MIG mixed, L4 time-sliced)",
    )
    up.add_argument("--keep", action="store_true", help="keep the data directory on exit")
    return parser


def _up(gpu_nodes: bool, keep: bool) -> int:
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        cluster = KubeTestCluster(keep_data=keep or None)
    except BinariesMissing as exc:
        print(exc, file=sys.stderr)
        return 2
    with cluster:
        nodes = FakeGPUNodes(cluster.api_client)
        with nodes:
            if gpu_nodes:
                for spec in DEMO_NODES:
                    nodes.add(spec)
            print(f"kubeconfig: {cluster.kubeconfig}")
            print(f"server:     {cluster.server}")
            print(f"ready in:   {cluster.startup_seconds:.1f}s")
            print(f"logs:       {cluster.log_dir}")
            if nodes.names:
                print(f"fake nodes: {', '.join(nodes.names)}")
            print(f"export KUBECONFIG={cluster.kubeconfig}")
            print("Ctrl-C to stop.", flush=True)
            stop.wait()
        print("stopping...", file=sys.stderr)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "up":
        return _up(args.gpu_nodes, args.keep)
    return 2  # pragma: no cover - argparse rejects other commands


if __name__ == "__main__":
    sys.exit(main())
