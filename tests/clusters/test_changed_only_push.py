"""A push of the cluster-wide objects renders and writes only what changed (the manifests driver).

Counted, never timed: the node configs rendered (``render_node_labels``, the ConfigMaps' render
functions) and the files written.
"""

from __future__ import annotations

import datetime
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.utils import timezone

from allocations.grants import services as allocation_services
from allocations.models import Allocation, Flavor
from clusters.models import AppliedObject, ClusterDrift, ClusterPush, Node, PushState
from delivery import node_configs
from delivery.drivers import DriverError, manifests
from delivery.services import cluster_sync, cluster_sync_shared
from tests.conftest import World

pytestmark = pytest.mark.django_db


def approve(world: World, flavor: Flavor, quantity: int = 1) -> Allocation:
    start = timezone.now()
    allocation = allocation_services.allocation_request(
        actor=world.users["nlp_member"], project=world.llm, flavor=flavor, quantity=quantity,
        priority_class=world.standard, starts_at=start, ends_at=start + datetime.timedelta(days=1), justification="x",
    )
    return allocation_services.allocation_approve(actor=world.users["nlp_admin"], allocation_id=allocation.pk)


class Work:
    """Counts what a push does: node configs rendered and files written, by name."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.rendered: Counter[str] = Counter()
        self.written: list[str] = []
        for name in ("render_node_labels", "render_device_plugin_configmap", "render_mig_parted_configmap"):
            monkeypatch.setattr(node_configs, name, self._counting(name, getattr(node_configs, name)))
        write = manifests._write_atomically

        def counted_write(path: Path, content: str) -> None:
            self.written.append(path.name)
            write(path, content)

        monkeypatch.setattr(manifests, "_write_atomically", counted_write)

    def _counting(self, name: str, function: Callable[..., Any]) -> Callable[..., Any]:
        def counted(*args: Any, **kwargs: Any) -> Any:
            self.rendered[name] += 1
            return function(*args, **kwargs)

        return counted

    def reset(self) -> None:
        self.rendered.clear()
        self.written.clear()


@pytest.fixture
def work(monkeypatch: pytest.MonkeyPatch) -> Work:
    return Work(monkeypatch)


def cluster_folder(world: World) -> Path:
    return Path(settings.GPUPORTAL_MANIFESTS_DIR) / world.cluster.name / "cluster"


def test_a_booking_on_one_node_renders_and_writes_that_nodes_labels_only(world: World, work: Work) -> None:
    cluster_sync_shared(cluster_id=world.cluster.pk)
    assert work.rendered["render_node_labels"] == 3  # a100-0, a100-1, h100-0: the first push renders all
    work.reset()

    approve(world, world.h100)  # the pool label of the node it booked changes; nothing else does
    result = cluster_sync_shared(cluster_id=world.cluster.pk)

    assert work.rendered == Counter({"render_node_labels": 1})
    assert work.written == ["node-h100-0.yaml"]
    assert result.applied == 1 and result.pruned == 0
    assert f"pool.gpuportal.io/{world.llm.slug}: booked" in (cluster_folder(world) / "node-h100-0.yaml").read_text()


def test_a_mig_booking_renders_its_node_and_the_mig_layouts_not_the_device_plugin_configs(world: World, work: Work) -> None:
    cluster_sync_shared(cluster_id=world.cluster.pk)
    work.reset()

    approve(world, world.mig, quantity=2)
    cluster_sync_shared(cluster_id=world.cluster.pk)

    assert work.rendered["render_node_labels"] == 1
    assert work.rendered["render_mig_parted_configmap"] == 1
    assert work.rendered["render_device_plugin_configmap"] == 1  # rendered (cheap) for the prune, not written
    assert sorted(work.written) == sorted(["configmap-gpu-operator.gpuportal-mig-parted-config.yaml", next(
        name for name in work.written if name.startswith("node-a100-"))])


def test_a_push_with_nothing_changed_renders_and_writes_nothing(world: World, work: Work) -> None:
    approve(world, world.h100)
    cluster_sync_shared(cluster_id=world.cluster.pk)
    work.reset()

    result = cluster_sync_shared(cluster_id=world.cluster.pk)

    assert work.rendered == Counter() and work.written == []
    assert result.applied == 0 and result.unchanged == AppliedObject.objects.filter(cluster=world.cluster).count() > 5


def test_a_failed_write_is_applied_again_by_the_next_push(world: World, work: Work, monkeypatch: pytest.MonkeyPatch) -> None:
    cluster_sync_shared(cluster_id=world.cluster.pk)
    approve(world, world.h100)
    write = manifests._write_atomically

    def failing(path: Path, content: str) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(manifests, "_write_atomically", failing)
    with pytest.raises(DriverError, match="No space left"):
        cluster_sync_shared(cluster_id=world.cluster.pk)
    assert not AppliedObject.objects.filter(cluster=world.cluster, kind="Node", name="h100-0").exists()

    monkeypatch.setattr(manifests, "_write_atomically", write)
    work.reset()
    result = cluster_sync_shared(cluster_id=world.cluster.pk)

    assert result.applied == 1 and work.rendered["render_node_labels"] == 1
    assert f"pool.gpuportal.io/{world.llm.slug}: booked" in (cluster_folder(world) / "node-h100-0.yaml").read_text()


def test_a_file_edited_by_hand_is_left_to_the_drift_check_which_repairs_it(world: World, work: Work) -> None:
    approve(world, world.h100)
    cluster_sync_shared(cluster_id=world.cluster.pk)
    ClusterPush.objects.update(state=PushState.DONE)  # delivered (no commit here runs the outbox): none pending
    node_file = cluster_folder(world) / "node-h100-0.yaml"
    wanted = node_file.read_text()
    node_file.write_text("apiVersion: v1\nkind: Node\nmetadata: {name: h100-0, labels: {}}\n")

    assert cluster_sync_shared(cluster_id=world.cluster.pk).applied == 0  # the push trusts what it applied

    plan, result = cluster_sync(cluster_id=world.cluster.pk, repair_drift=True)

    shared = [change.location for change in plan.changes if change.scope == "cluster-wide objects"]
    assert shared == ["cluster/node-h100-0.yaml"]  # (the project's own files were never pushed in this test)
    assert node_file.read_text() == wanted
    assert ClusterDrift.objects.filter(cluster=world.cluster, kind="Node", name="h100-0", change="changed").exists()
    work.reset()
    assert cluster_sync_shared(cluster_id=world.cluster.pk).applied == 0 and work.written == []


def test_without_a_record_of_what_was_applied_the_push_compares_and_rewrites_nothing(world: World, work: Work) -> None:
    cluster_sync_shared(cluster_id=world.cluster.pk)
    recorded = set(AppliedObject.objects.values_list("kind", "namespace", "name", "input_hash"))
    AppliedObject.objects.all().delete()  # a fresh table (the upgrade that adds it), or rows lost
    work.reset()

    result = cluster_sync_shared(cluster_id=world.cluster.pk)

    assert work.written == [] and result.applied == 0
    assert set(AppliedObject.objects.values_list("kind", "namespace", "name", "input_hash")) == recorded


def test_a_node_that_left_the_inventory_has_its_file_pruned_and_its_record_dropped(world: World, work: Work) -> None:
    cluster_sync_shared(cluster_id=world.cluster.pk)
    Node.objects.filter(cluster=world.cluster, name="h100-0").delete()

    result = cluster_sync_shared(cluster_id=world.cluster.pk)

    assert result.pruned == 1 and not (cluster_folder(world) / "node-h100-0.yaml").exists()
    assert (cluster_folder(world) / "node-a100-0.yaml").exists()  # unchanged nodes are kept, not pruned
    assert not AppliedObject.objects.filter(cluster=world.cluster, name="h100-0").exists()


def test_sync_now_compares_every_object_with_the_cluster_and_repairs_a_hand_edit(world: World, work: Work) -> None:
    from delivery.services import cluster_sync_request

    cluster_sync_shared(cluster_id=world.cluster.pk)
    node_file = cluster_folder(world) / "node-h100-0.yaml"
    wanted = node_file.read_text()
    node_file.write_text("apiVersion: v1\nkind: Node\nmetadata: {name: h100-0, labels: {}}\n")
    work.reset()

    cluster_sync_request(actor=world.users["platform"], cluster_id=world.cluster.pk)  # queued: run it here
    result = cluster_sync_shared(cluster_id=world.cluster.pk)

    assert work.rendered["render_node_labels"] == 3 and work.written == ["node-h100-0.yaml"] and result.applied == 1
    assert node_file.read_text() == wanted
