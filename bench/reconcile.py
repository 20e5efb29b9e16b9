"""Benchmark (not a timed test): converge an empty cluster, then resync with nothing changed.

    .venv/bin/python bench/reconcile.py [--projects 500]

Starts a real control plane (``make kube-testenv``), fills a throw-away SQLite database with N
projects, each holding two allocations, and measures in the same run:

1. ``kubectl apply --server-side`` of the manifests the manifests driver writes for N projects
   (one ordered stream, Namespaces first), against an empty cluster;
2. our kubernetes driver converging N other projects of the same shape (``cluster_sync``);
3. a resync with nothing changed (median of three): it must issue zero writes and take under
   10 % of step 2.

Before each step the control plane's controllers are left to catch up with the namespaces the
previous step created (service accounts, root CA ConfigMaps, quota status), as they share the
machine's cores with the API server.
"""

from __future__ import annotations

import argparse
import datetime
import os
import subprocess
import sys
import tempfile
import time
from decimal import Decimal
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def setup_django(work: Path) -> None:
    os.environ["DJANGO_SETTINGS_MODULE"] = "gpuportal.settings_test"
    os.environ["DATABASE_URL"] = f"sqlite:///{work / 'bench.sqlite3'}"
    os.environ["GPUPORTAL_VAR_DIR"] = str(work)
    os.environ["GPUPORTAL_MANIFESTS_DIR"] = str(work / "manifests")
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def seed(projects: int, prefix: str, cluster_name: str) -> int:
    """N projects with two allocations each (whole GPUs and MIG slices), active on one cluster."""
    from django.contrib.auth.models import User
    from django.utils import timezone

    from allocations.models import Allocation, AllocationState, Flavor, PriorityClass, SharingMode
    from clusters.models import Cluster
    from tenants.models import Department, Project

    department, _ = Department.objects.get_or_create(slug="bench", defaults={"name": "Bench"})
    user, _ = User.objects.get_or_create(username="bench")
    gpu, _ = Flavor.objects.get_or_create(name="a100", defaults=dict(
        display_name="A100", gpu_model="NVIDIA-A100-SXM4-80GB", sharing_mode=SharingMode.EXCLUSIVE,
        resource_name="nvidia.com/gpu", memory_mib=81920, compute_percent=100, gpu_equivalents=Decimal("1")))
    mig, _ = Flavor.objects.get_or_create(name="a100-1g", defaults=dict(
        display_name="1g", gpu_model="NVIDIA-A100-SXM4-80GB", sharing_mode=SharingMode.MIG,
        resource_name="nvidia.com/mig-1g.10gb", mig_profile="1g.10gb", memory_mib=9856, compute_percent=14,
        gpu_equivalents=Decimal("0.1429")))
    priority, _ = PriorityClass.objects.get_or_create(name="bench-standard", defaults={"value": 1000})
    cluster = Cluster.objects.create(name=cluster_name)
    now = timezone.now()
    rows = []
    for index in range(projects):
        project = Project.objects.create(slug=f"{prefix}-{index:04d}", name=f"p{index}", department=department)
        for flavor, quantity in ((gpu, 1 + index % 4), (mig, 1 + index % 7)):
            rows.append(Allocation(project=project, flavor=flavor, quantity=quantity, priority_class=priority, cluster=cluster,
                                   starts_at=now, ends_at=now + datetime.timedelta(days=7), justification="bench",
                                   state=AllocationState.ACTIVE, requested_by=user))
    Allocation.objects.bulk_create(rows)
    return cluster.pk


def manifests_stream(cluster_id: int) -> tuple[str, int]:
    import yaml

    from clusters.models import Cluster
    from delivery.selectors import cluster_project_ids
    from delivery.services import project_scopes

    cluster = Cluster.objects.get(pk=cluster_id)
    scopes = project_scopes(cluster=cluster, project_ids=cluster_project_ids(cluster=cluster))
    objects = [obj for scope in scopes for obj in scope.objects]
    ordered = sorted(objects, key=lambda obj: obj["kind"] != "Namespace")  # stable: Namespaces first
    stream = "---\n".join(yaml.safe_dump(obj, sort_keys=True) for obj in ordered)
    # Same objects, but kubectl's copies are not ours: our driver's reads must not see them.
    return stream.replace("app.kubernetes.io/managed-by: gpuportal\n", "app.kubernetes.io/managed-by: bench-kubectl\n"), len(objects)


def settle(kube: object, timeout: float = 600.0) -> float:
    """Wait until the controllers caught up with the new namespaces (each has its default
    ServiceAccount and its kube-root-ca.crt ConfigMap), so no run pays for the previous one."""
    from kubernetes import client

    began = time.perf_counter()
    with kube.api_client() as api:  # type: ignore[attr-defined]
        core = client.CoreV1Api(api)
        while time.perf_counter() - began < timeout:
            namespaces = len(core.list_namespace().items)
            accounts = len(core.list_service_account_for_all_namespaces(field_selector="metadata.name=default").items)
            roots = len(core.list_config_map_for_all_namespaces(field_selector="metadata.name=kube-root-ca.crt").items)
            if accounts >= namespaces and roots >= namespaces:
                break
            time.sleep(2)
    time.sleep(5)  # the quota controller's first pass over the new quotas
    return time.perf_counter() - began


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--projects", type=int, default=500)
    args = parser.parse_args()

    from kube_testenv.cluster import KubeTestCluster

    with tempfile.TemporaryDirectory(prefix="gpuportal-bench-") as folder, KubeTestCluster() as kube:
        work = Path(folder)
        setup_django(work)
        from clusters.credentials import cluster_kubeconfig_set
        from clusters.models import Cluster
        from delivery.drivers import driver_for
        from delivery.selectors import cluster_project_ids
        from delivery.services import project_scopes

        kubectl_cluster = seed(args.projects, "kc", "bench-kubectl")
        ours = seed(args.projects, "gp", "bench-driver")
        Cluster.objects.filter(pk=ours).update(driver="kubernetes")
        cluster_kubeconfig_set(actor=None, cluster_id=ours, kubeconfig=kube.kubeconfig.read_text())

        stream, count = manifests_stream(kubectl_cluster)
        settle(kube)
        began = time.perf_counter()
        subprocess.run([str(kube.binaries.kubectl), f"--kubeconfig={kube.kubeconfig}", "apply", "--server-side",
                        "--field-manager=bench-kubectl", "-f", "-"], input=stream, text=True, check=True,
                       capture_output=True)
        kubectl_seconds = time.perf_counter() - began

        cluster = Cluster.objects.get(pk=ours)

        def converge() -> tuple[float, int, int, int]:
            began = time.perf_counter()
            driver = driver_for(cluster)
            try:
                scopes = project_scopes(cluster=cluster, project_ids=cluster_project_ids(cluster=cluster))
                plan = driver.plan(scopes)
                driver.apply(plan)
                return time.perf_counter() - began, driver.writes, driver.reads, len(plan.changes)  # type: ignore[attr-defined]
            finally:
                driver.close()

        settle(kube)
        full_seconds, full_writes, full_reads, _ = converge()
        settle(kube)
        resyncs = sorted(converge() for _ in range(3))
        resync_seconds, resync_writes, resync_reads, resync_changes = resyncs[1]  # the median

        print(f"projects: {args.projects} per side, objects: {count} per side")
        print(f"kubectl apply --server-side: {kubectl_seconds:.2f} s")
        print(f"gpuportal driver, empty cluster: {full_seconds:.2f} s ({full_writes} writes, {full_reads} reads)")
        print(f"ratio driver / kubectl: {full_seconds / kubectl_seconds:.2f} (target <= 1.0)")
        print(f"resync, nothing changed: {resync_seconds:.2f} s, {resync_writes} writes, {resync_reads} reads, "
              f"{resync_changes} changes; {100 * resync_seconds / full_seconds:.1f} % of the full apply (target < 10 %)")
        if resync_writes or resync_changes:
            raise SystemExit("a resync with nothing changed must write nothing")


if __name__ == "__main__":
    main()
