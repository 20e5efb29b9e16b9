"""Pod UIDs from /proc/<pid>/cgroup, in every path form the kubelet produces."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.pod_cgroup import PodRef, parse_pod_ref, read_pod_ref

POD = "0f4b5c5e-1234-4abc-9def-0123456789ab"
POD_SYSTEMD = POD.replace("-", "_")
CTR = "3f9c" + "0123456789abcdef" * 3 + "a1b2c3d4e5f6"
assert len(CTR) == 64
STATIC_POD = "6a1f0e9c2b7d4e8fa3c5b1d0e2f4a6c8"

V1_CGROUPFS = "\n".join(
    [
        f"12:pids:/kubepods/burstable/pod{POD}/{CTR}",
        f"11:memory:/kubepods/burstable/pod{POD}/{CTR}",
        f"1:name=systemd:/kubepods/burstable/pod{POD}/{CTR}",
        "0::/",
    ]
)
V1_SYSTEMD = "\n".join(
    [
        f"10:devices:/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{POD_SYSTEMD}.slice/docker-{CTR}.scope",
        f"4:cpu,cpuacct:/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{POD_SYSTEMD}.slice/docker-{CTR}.scope",
    ]
)


@pytest.mark.parametrize(
    ("cgroup", "expected"),
    [
        pytest.param(V1_CGROUPFS, PodRef(POD, CTR), id="v1-cgroupfs-burstable"),
        pytest.param(f"3:cpuset:/kubepods/pod{POD}/{CTR}\n", PodRef(POD, CTR), id="v1-cgroupfs-guaranteed"),
        pytest.param(V1_SYSTEMD, PodRef(POD, CTR), id="v1-systemd-docker"),
        pytest.param(
            f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{POD_SYSTEMD}.slice/cri-containerd-{CTR}.scope\n",
            PodRef(POD, CTR),
            id="v2-systemd-containerd",
        ),
        pytest.param(
            f"0::/kubepods.slice/kubepods-pod{POD_SYSTEMD}.slice/crio-{CTR}.scope\n",
            PodRef(POD, CTR),
            id="v2-systemd-guaranteed-crio",
        ),
        pytest.param(f"0::/kubepods/besteffort/pod{POD}/{CTR}\n", PodRef(POD, CTR), id="v2-cgroupfs"),
        pytest.param(
            f"0::/../../kubepods-besteffort-pod{POD_SYSTEMD}.slice/cri-containerd-{CTR}.scope\n",
            PodRef(POD, CTR),
            id="v2-seen-from-a-cgroup-namespace",
        ),
        pytest.param(
            "0::/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-besteffort.slice/"
            f"kubelet-kubepods-besteffort-pod{POD_SYSTEMD}.slice/cri-containerd-{CTR}.scope\n",
            PodRef(POD, CTR),
            id="v2-kind-nested-kubelet",
        ),
        pytest.param(
            f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{STATIC_POD}.slice/cri-containerd-{CTR}.scope\n",
            PodRef(STATIC_POD, CTR),
            id="static-pod-hash-uid",
        ),
        pytest.param(
            f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{POD_SYSTEMD}.slice\n",
            PodRef(POD, None),
            id="pod-level-cgroup-without-container",
        ),
        pytest.param(
            f"0::/kubepods/burstable/pod{POD}/{CTR}/nested-by-the-app\n",
            PodRef(POD, CTR),
            id="process-in-a-sub-cgroup-of-its-container",
        ),
    ],
)
def test_it_finds_the_pod(cgroup: str, expected: PodRef) -> None:
    assert parse_pod_ref(cgroup) == expected


@pytest.mark.parametrize(
    "cgroup",
    [
        pytest.param("0::/user.slice/user-1000.slice/session-3.scope\n", id="host-user-session"),
        pytest.param("0::/system.slice/containerd.service\n", id="host-service"),
        pytest.param(f"0::/system.slice/docker-{CTR}.scope\n", id="plain-docker-container"),
        pytest.param("0::/\n", id="root"),
        pytest.param(f"0::/machine.slice/pod{POD}.slice\n", id="pod-looking-but-not-kubepods"),
        pytest.param("0::/kubepods.slice/kubepods-burstable.slice\n", id="qos-level-only"),
        pytest.param("", id="empty"),
        pytest.param("not a cgroup file", id="garbage"),
    ],
)
def test_it_finds_no_pod(cgroup: str) -> None:
    assert parse_pod_ref(cgroup) is None


def test_it_reads_from_a_configurable_proc_root(tmp_path: Path) -> None:
    (tmp_path / "4242").mkdir()
    (tmp_path / "4242" / "cgroup").write_text(f"0::/kubepods/besteffort/pod{POD}/{CTR}\n", encoding="utf-8")
    assert read_pod_ref(4242, tmp_path) == PodRef(POD, CTR)


def test_a_process_that_is_gone_has_no_pod(tmp_path: Path) -> None:
    assert read_pod_ref(4243, tmp_path) is None
