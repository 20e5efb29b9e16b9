"""``Cluster.gpu_mode_set``: an empty GPU turns to MIG mode and back (a MIG node's mixed strategy);
one in use never does."""

from __future__ import annotations

import pytest

from placement import Cluster, Gpu, Node, Placement, Request


def _cluster() -> Cluster:
    return Cluster([Node("n", 64000, 262144, tuple(Gpu(i, "A100-SXM4-80GB") for i in range(2)))])


def test_an_empty_gpu_takes_a_mig_instance_once_in_mig_mode_and_a_share_once_back() -> None:
    cluster = _cluster()
    mig = Request(0, 0, 1, mig_profile="3g.40gb")
    assert cluster.legal_mig_starts(0, 0, mig) == ()
    cluster.gpu_mode_set(0, 0, "A100-80GB")
    assert cluster.legal_mig_starts(0, 0, mig) == (0, 4) and cluster.mig_gpus == 1
    unit = cluster.apply(Placement(mig, "n", (0,), (0,)))
    with pytest.raises(ValueError, match="in use"):
        cluster.gpu_mode_set(0, 0, None)
    cluster.release(unit)
    cluster.gpu_mode_set(0, 0, None)
    assert cluster.mig_gpus == 0 and cluster.allocated_milli() == 0
    cluster.apply(Placement(Request(0, 0, 1, 500), "n", (0,)))
    with pytest.raises(ValueError, match="in use"):
        cluster.gpu_mode_set(0, 0, "A100-80GB")
    with pytest.raises(ValueError, match="unknown MIG geometry"):
        cluster.gpu_mode_set(0, 1, "A100-96GB")
