"""The portal's database as the twin's sources: history, inventory, policy."""

from __future__ import annotations

import datetime
import io
from decimal import Decimal
from pathlib import Path

import pytest
from django.core.management import call_command
from django.utils import timezone

from allocations.models import AllocationState, Flavor, PriorityClass, Quota, QuotaWindow
from allocations.models.windows import WindowState
from telemetry.models import AllocationUsage
from tests.conftest import World
from tests.whatifs.history import HOUR, asked, over_nlp_limit, ran
from twin.clusters import nodes_load
from twin.policy import policy_load
from twin.workload import workload_load
from whatifs.live_rules import live_windows
from whatifs.sources import DEFAULT_BUSY, UNBOUNDED, history_workload, inventory_nodes, live_policy, quota_rows

pytestmark = pytest.mark.django_db


def test_a_grant_runs_from_its_bookings_and_demand_turned_away_runs_the_period_it_asked(world: World) -> None:
    now = timezone.now()
    start = now - datetime.timedelta(days=2)
    grant = ran(world, project=world.llm, flavor=world.a100, quantity=2, at=start, hours=48, released_after=5)
    AllocationUsage.objects.create(allocation=grant, cluster=world.cluster, department=world.nlp, bucket_start=start,
                                   source="dcgm", coverage=1.0, activity=0.8, granted_gpu_eq=2.0, used_gpu_eq=1.6)
    asked(world, project=world.seg, flavor=world.h100, quantity=3, at=start + HOUR, hours=10)
    asked(world, project=world.llm, flavor=world.mig, quantity=1, at=start + 2 * HOUR, hours=4,
          state=AllocationState.CANCELLED)  # withdrawn: left out
    jobs = history_workload(days=3, now=now)
    assert [(j.department, j.flavor, j.quantity) for j in jobs] == [("nlp", "a100", 2), ("vision", "h100", 3)]
    first, second = jobs
    assert first.runtime_s == pytest.approx(5 * 3600)  # released after 5 hours, not the 48 asked
    assert first.requested_s == pytest.approx(48 * 3600)
    assert first.busy == pytest.approx(0.8)  # its telemetry
    assert first.submit_at == pytest.approx(86400)  # a day into the 3-day window
    assert second.runtime_s == pytest.approx(10 * 3600) and second.busy == DEFAULT_BUSY
    assert second.submit_at - first.submit_at == pytest.approx(3600)


def test_a_grant_that_held_gpus_when_the_window_began_arrives_at_its_start_with_what_was_left(world: World) -> None:
    now = timezone.now()
    ran(world, project=world.llm, flavor=world.a100, quantity=1, at=now - datetime.timedelta(days=5), hours=200,
        released_after=None)
    (job,) = history_workload(days=1, now=now)
    assert job.submit_at == 0
    assert job.runtime_s == pytest.approx(86400, rel=1e-3)  # still holds: to now


def test_the_live_policy_counts_gpu_equivalents_and_the_inventory_its_gpus(world: World) -> None:
    Quota.objects.filter(department=world.nlp, flavor=None).update(guaranteed=Decimal(4))
    Quota.objects.filter(department=world.vision, flavor=None).delete()  # vision: its flavors' quotas summed
    policy = live_policy()
    assert policy.department("nlp").guarantee == 4 and policy.department("nlp").limit == 10
    assert policy.department("vision").limit == 8  # its h100 quota: 8 whole GPUs
    speech = policy.department("nlp-speech")  # no quota of its own: only nlp's and acme's are checked
    assert speech.parent == "nlp" and speech.limit == UNBOUNDED and policy.department("nlp").parent == "acme"
    assert policy.department("acme").parent is None and policy.department("acme").limit == 16
    assert set(policy.classes) == {"gpu-standard", "gpu-preemptible"}
    assert policy.flavors["a100-1g"].gpu_milli == 143 and policy.flavors["a100"].gpu_milli == 1000
    nodes = inventory_nodes()
    assert sum(len(node.gpus) for node in nodes) == 24 and all(node.name.startswith("test-cluster/") for node in nodes)


def test_the_inventory_has_mig_nodes_where_the_portal_offers_mig_partitions_and_mig_flavors_ask_instances(
    world: World,
) -> None:
    """The A100 nodes run the mixed MIG strategy: their GPUs are in MIG mode for the twin (the
    geometry of their model and memory), the H100 ones in shared mode; the MIG flavor is one
    1g.10gb instance weighing what the flavor stores, the MPS flavor still a share."""
    by_name = {node.name: node for node in inventory_nodes()}
    assert {gpu.mig_geometry for gpu in by_name["test-cluster/a100-0"].gpus} == {"A100-80GB"}
    assert {gpu.mig_geometry for gpu in by_name["test-cluster/h100-0"].gpus} == {None}
    shapes = live_policy().flavors
    assert (shapes["a100-1g"].mig_profile, shapes["a100-1g"].mig_weight) == ("1g.10gb", Decimal("0.1429"))
    assert shapes["a100-1g"].equivalents == world.mig.gpu_equivalents
    assert shapes["h100-mps"].mig_profile is None and shapes["h100-mps"].gpu_milli == 250
    Flavor.objects.filter(pk=world.mig.pk).update(gpu_equivalents=Decimal("0.2"))  # the stored weight counts
    assert live_policy().flavors["a100-1g"].equivalents == Decimal("0.2")


def test_twin_export_writes_files_the_twin_reads_back(world: World, tmp_path: Path) -> None:
    over_nlp_limit(world)
    call_command("twin_export", "--days", "7", "--out", str(tmp_path), stdout=io.StringIO())
    policy = policy_load(tmp_path / "policy.yaml")
    jobs = workload_load(tmp_path / "workload.jsonl", flavors=policy.flavors)
    policy.check_jobs(jobs)
    assert [(job.department, job.quantity) for job in jobs] == [("nlp", 6), ("vision", 2), ("nlp", 6)]
    assert sum(len(node.gpus) for node in nodes_load(tmp_path / "cluster.csv")) == 24


def test_approved_windows_are_read_on_their_quota_with_their_class(world: World) -> None:
    """The live rules keep a window of one class's share on the quota it is on (nlp's in
    GPU-equivalents, nlp's of A100s), with its class; a window on a flavor's quota of a department
    without one in GPU-equivalents is also moved onto the sum that stands in for it."""
    preemptible = PriorityClass.objects.get(name="gpu-preemptible")
    begins = timezone.now().replace(microsecond=0)
    for flavor in (None, Flavor.objects.get(name="a100")):
        QuotaWindow.objects.create(
            quota=Quota.objects.get(department=world.nlp, flavor=flavor), priority_class=preemptible, kind="temporary",
            begins_at=begins, ends_at=begins + datetime.timedelta(hours=2), limit=Decimal(3),
            requested_by=world.users["platform"], decided_by=world.users["platform"], state=WindowState.APPROVED)
    rules = live_windows(quota_rows())
    assert [(r.department, r.flavor, r.priority_class, r.spec.limit) for r in rules] == [  # by quota
        ("nlp", "a100", "gpu-preemptible", Decimal(3)), ("nlp", None, "gpu-preemptible", Decimal(3))]
    policy = live_policy()
    assert policy.window_spec(rules[1]).priority_class_id == policy.class_numbers["gpu-preemptible"]
    Quota.objects.filter(department=world.vision, flavor=None).delete()  # vision: quotas of flavors only
    h100s = Quota.objects.get(department=world.vision, flavor__name="h100")  # 8 H100s, a GPU-equivalent each
    QuotaWindow.objects.create(quota=h100s, kind="temporary", begins_at=begins, ends_at=begins + datetime.timedelta(hours=2),
                               limit_delta=Decimal(2), requested_by=world.users["platform"],
                               decided_by=world.users["platform"], state=WindowState.APPROVED)
    moved = [(r.flavor, r.spec.limit_delta) for r in live_windows(quota_rows()) if r.department == "vision"]
    assert moved == [("h100", Decimal(2)), (None, Decimal(2))]  # on its H100s, and on their sum
