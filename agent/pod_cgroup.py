"""Which pod a process belongs to, read from ``/proc/<pid>/cgroup``.

The kubelet puts every container in a cgroup below ``kubepods``; the pod's UID is in the path.
The forms differ by cgroup version and by the kubelet's cgroup driver:

- cgroupfs driver: ``/kubepods/burstable/pod<uid>/<container id>`` (Guaranteed pods have no
  QoS level: ``/kubepods/pod<uid>/...``);
- systemd driver: ``/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid with
  underscores>.slice/cri-containerd-<container id>.scope`` (or ``docker-``, ``crio-``);
- cgroup v1 lists one line per hierarchy (``4:memory:/kubepods/...``), v2 one line
  (``0::/kubepods.slice/...``);
- seen from inside a cgroup namespace the path is relative and may start with ``/../..``.

NVML reports host PIDs, so ``proc_root`` must be the host's ``/proc`` (mounted read-only into the
agent's container) rather than the container's own.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

_UID = r"[0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12}"
_STATIC_POD_UID = r"[0-9a-f]{32}"  # kubelet's hash for a static (file or URL) pod
_POD_SEGMENT = re.compile(rf"(?:^|-)pod({_UID}|{_STATIC_POD_UID})(?:\.slice)?$")
_CONTAINER_SEGMENT = re.compile(r"^(?:[a-z][a-z-]*-)?([0-9a-f]{64})(?:\.scope)?$")


@dataclass(frozen=True)
class PodRef:
    pod_uid: str
    container_id: str | None


def parse_pod_ref(cgroup_text: str) -> PodRef | None:
    """The pod (and container) in the contents of a ``/proc/<pid>/cgroup`` file, if any."""
    for line in cgroup_text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3 or "kubepods" not in parts[2]:
            continue
        ref = _parse_path(parts[2])
        if ref is not None:
            return ref
    return None


def _parse_path(path: str) -> PodRef | None:
    segments = [segment for segment in path.split("/") if segment]
    for position, segment in enumerate(segments):
        match = _POD_SEGMENT.search(segment)
        if match is None:
            continue
        container_id = None
        if position + 1 < len(segments):
            container = _CONTAINER_SEGMENT.match(segments[position + 1])
            container_id = container.group(1) if container else None
        return PodRef(pod_uid=match.group(1).replace("_", "-"), container_id=container_id)
    return None


def read_pod_ref(pid: int, proc_root: Path) -> PodRef | None:
    """The pod of a host PID, or None when it is not in a pod or its cgroup cannot be read.

    The process may have exited since NVML listed it, and /proc may be hidden from the agent:
    neither is an error worth reporting.
    """
    try:
        text = (proc_root / str(pid) / "cgroup").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    return parse_pod_ref(text)
