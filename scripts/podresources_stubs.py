"""Regenerate the agent's PodResources v1 client from the upstream proto (``make podresources-stubs``).

The kubelet's pod-resources API is defined by ``pkg/apis/podresources/v1/api.proto`` in the Go module
``k8s.io/kubelet``. This script takes that file at the pinned version from the Go module cache (``go mod
download`` fetches it through the module proxy when absent), copies it verbatim to
``agent/podresources/api.proto``, and runs grpcio-tools' protoc (a dev dependency, pinned in pyproject)
to write ``api_pb2.py`` and ``api_pb2_grpc.py`` beside it.

``--check`` regenerates into a temporary directory and fails when the committed files differ, which is
what ``tests/agent/test_podresources_stubs.py`` does.
"""

from __future__ import annotations

import argparse
import filecmp
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

#: The Kubernetes release whose kubelet API the stubs follow (the test control plane's, v1.36.3).
KUBELET_MODULE = "k8s.io/kubelet@v0.36.3"
PROTO_IN_MODULE = Path("pkg/apis/podresources/v1/api.proto")
PACKAGE_DIR = Path("agent/podresources")
GENERATED = ("api.proto", "api_pb2.py", "api_pb2_grpc.py")
REPO_ROOT = Path(__file__).resolve().parents[1]


def upstream_proto() -> Path:
    """The pinned api.proto in the Go module cache, downloaded through the module proxy if needed."""
    found = subprocess.run(
        ["go", "mod", "download", "-json", KUBELET_MODULE],
        check=True,
        capture_output=True,
        text=True,
        timeout=300,
        env=None,
    )
    module_dir = Path(json.loads(found.stdout)["Dir"])
    return module_dir / PROTO_IN_MODULE


def generate(proto: Path, out_root: Path) -> Path:
    """Write the proto and its stubs under ``out_root/agent/podresources``; returns that directory.

    protoc runs in a process of its own: grpcio-tools' compiler is a C++ extension that aborts when
    it is loaded into a process already running gRPC's threads (a test's fake kubelet)."""
    target = out_root / PACKAGE_DIR
    target.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(proto, target / "api.proto")
    args = [
        sys.executable,
        "-m",
        "grpc_tools.protoc",  # dev dependency: only regeneration needs it
        f"-I{out_root}",
        f"--python_out={out_root}",
        f"--grpc_python_out={out_root}",
        str(PACKAGE_DIR / "api.proto"),
    ]
    done = subprocess.run(args, capture_output=True, text=True, timeout=120, check=False)
    if done.returncode != 0:
        raise SystemExit("protoc failed on " + str(target / "api.proto") + ": " + done.stderr.strip())
    return target


def differing(generated: Path, committed: Path) -> list[str]:
    """The generated files whose committed copy is missing or different."""
    return [
        name
        for name in GENERATED
        if not (committed / name).exists() or not filecmp.cmp(generated / name, committed / name, shallow=False)
    ]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail when the committed files are not up to date")
    parser.add_argument("--proto", type=Path, help="use this api.proto instead of the Go module cache's")
    args = parser.parse_args(argv)
    proto = args.proto or upstream_proto()
    with tempfile.TemporaryDirectory() as scratch:
        generated = generate(proto, Path(scratch))
        committed = REPO_ROOT / PACKAGE_DIR
        stale = differing(generated, committed)
        if args.check:
            if stale:
                sys.stderr.write(f"out of date in {PACKAGE_DIR}: {', '.join(stale)} (make podresources-stubs)\n")
                return 1
            return 0
        for name in GENERATED:
            shutil.copyfile(generated / name, committed / name)
    sys.stdout.write(f"{PACKAGE_DIR}: {', '.join(GENERATED)} from {KUBELET_MODULE}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
