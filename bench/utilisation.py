"""Benchmark (not a timed test): one utilisation tick for 1,000 allocations read from Prometheus.

    .venv/bin/python bench/utilisation.py [--allocations 1000] [--mig-share 0.3] [--projects 50]
    DATABASE_URL=postgres://... .venv/bin/python bench/utilisation.py

Builds one cluster of 8-GPU A100 nodes and ``--allocations`` active allocations spread over
``--projects`` projects: whole GPUs, and a ``--mig-share`` of 1g.10gb MIG slices (7 per GPU,
each slice its own allocation). A recorded dcgm-exporter scrape of those devices is written (whole
GPUs: graphics engine activity, GPU utilisation and memory with the pods' labels; MIG instances
with GPU_I_ID/GPU_I_PROFILE, half of them without a pod), replayed every 15 s over 20 minutes,
converted with ``promtool tsdb create-blocks-from openmetrics`` and served by Debian's prometheus on
loopback (tests/telemetry/usage/recording.py). Then the real tick
(``telemetry.usage.ticking.allocations_utilisation_tick``) runs once for the last full bucket, on
a throw-away SQLite database set up as ``bench/admission.py`` does, or on the PostgreSQL of
``DATABASE_URL`` when given (migrated; the bench's rows are left there).

Printed: the tick's wall seconds, the Prometheus queries it sent, rows written and how many of
them have a known activity, against the targets (under 10 s, at most 6 queries).
"""

from __future__ import annotations

import argparse
import datetime
import os
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

A100 = "NVIDIA-A100-SXM4-80GB"
SAMPLES = 80  # 20 minutes at 15 s
TARGET_SECONDS = 10.0
TARGET_QUERIES = 6


def setup_django(work: Path) -> None:
    os.environ["DJANGO_SETTINGS_MODULE"] = "gpuportal.settings_test"
    if not os.environ.get("DATABASE_URL"):
        os.environ["DATABASE_URL"] = f"sqlite:///{work / 'bench.sqlite3'}"
    os.environ["GPUPORTAL_VAR_DIR"] = str(work)
    os.environ["GPUPORTAL_MANIFESTS_DIR"] = str(work / "manifests")
    os.environ.pop("CELERY_BROKER_URL", None)
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def uuid(n: int) -> str:
    return f"GPU-7b3e9c1a-4d2f-4e8b-a6c5-{n:012d}"


def labels(**pairs: str) -> str:
    return "{" + ",".join(f'{key}="{value}"' for key, value in pairs.items()) + "}"


def plan(allocations: int, mig_share: float, projects: int, seed: int) -> list[dict[str, Any]]:
    """One entry per allocation: its project, GPU number and, for a MIG slice, instance and start."""
    rng = random.Random(seed)
    slices = int(allocations * mig_share)
    whole = allocations - slices
    out: list[dict[str, Any]] = []
    for gpu in range(whole):
        out.append({"project": rng.randrange(projects), "gpu": gpu, "gi": None, "start": None,
                    "activity": round(rng.random(), 3), "memory": rng.randrange(0, 80000), "pod": rng.random() < 0.8})  # fmt: skip
    for n in range(slices):
        gpu, start = whole + n // 7, n % 7
        out.append({"project": rng.randrange(projects), "gpu": gpu, "gi": 7 + start, "start": start,
                    "activity": round(rng.random(), 3), "memory": rng.randrange(0, 9800), "pod": True})  # fmt: skip
    return out


def scrape(entries: list[dict[str, Any]]) -> str:
    """What the cluster's dcgm-exporters print at one scrape (Prometheus's target labels added)."""
    families: dict[str, list[str]] = {"DCGM_FI_PROF_GR_ENGINE_ACTIVE": [], "DCGM_FI_DEV_GPU_UTIL": [], "DCGM_FI_DEV_FB_USED": []}
    for entry in entries:
        gpu = entry["gpu"]
        base = {"gpu": str(gpu % 8), "UUID": uuid(gpu), "pci_bus_id": f"00000000:{0x07 + 8 * (gpu % 8):02X}:00.0",
                "device": f"nvidia{gpu % 8}", "modelName": "NVIDIA A100-SXM4-80GB", "Hostname": f"a100-{gpu // 8}",
                "DCGM_FI_DRIVER_VERSION": "550.54.15"}  # fmt: skip
        if entry["gi"] is not None:
            base |= {"GPU_I_PROFILE": "1g.10gb", "GPU_I_ID": str(entry["gi"])}
        if entry["pod"]:
            base |= {"container": "main", "namespace": f"project-{entry['project']}", "pod": f"job-{gpu}-{entry['gi']}"}
        base |= {"instance": f"10.1.{gpu // 8 // 250}.{gpu // 8 % 250}:9400", "job": "nvidia-dcgm-exporter"}
        families["DCGM_FI_PROF_GR_ENGINE_ACTIVE"].append(f"DCGM_FI_PROF_GR_ENGINE_ACTIVE{labels(**base)} {entry['activity']}")
        if entry["gi"] is None:
            families["DCGM_FI_DEV_GPU_UTIL"].append(f"DCGM_FI_DEV_GPU_UTIL{labels(**base)} {round(entry['activity'] * 100)}")
        families["DCGM_FI_DEV_FB_USED"].append(f"DCGM_FI_DEV_FB_USED{labels(**base)} {entry['memory']}")
    lines: list[str] = []
    for name, members in families.items():
        lines += [f"# HELP {name} {name}", f"# TYPE {name} gauge", *members]
    return "\n".join([*lines, "# EOF"]) + "\n"


def seed_portal(entries: list[dict[str, Any]], projects: int, url: str, booked_at: datetime.datetime) -> None:
    from django.contrib.auth.models import User

    from allocations.models import Allocation, AllocationState, Flavor, PriorityClass, Reservation, SharingMode
    from clusters.models import Cluster, Gpu, Node, NodeSharing
    from tenants.models import Department, Project

    department = Department.objects.create(slug="bench", name="Bench")
    user = User.objects.create(username="bench")
    project_rows = Project.objects.bulk_create(
        [Project(slug=f"project-{n}", name=f"Project {n}", department=department) for n in range(projects)]
    )
    whole = Flavor.objects.create(name="a100", display_name="A100", gpu_model=A100, sharing_mode=SharingMode.EXCLUSIVE,
                                  resource_name="nvidia.com/gpu", memory_mib=81920, compute_percent=100, gpu_equivalents=1)  # fmt: skip
    mig = Flavor.objects.create(name="a100-1g", display_name="A100 1g", gpu_model=A100, sharing_mode=SharingMode.MIG,
                                resource_name="nvidia.com/mig-1g.10gb", mig_profile="1g.10gb", memory_mib=9856,
                                compute_percent=14, gpu_equivalents="0.1429")  # fmt: skip
    standard = PriorityClass.objects.create(name="gpu-standard", value=1000)
    cluster = Cluster.objects.create(name="bench", prometheus_url=url)
    gpus = sorted({entry["gpu"] for entry in entries})
    nodes = Node.objects.bulk_create(
        [Node(cluster=cluster, name=f"a100-{n}", sharing=NodeSharing.MIG) for n in range(max(gpus) // 8 + 1)]
    )
    Gpu.objects.bulk_create([Gpu(node=nodes[gpu // 8], index=gpu % 8, model=A100, memory_mib=81920, mig_capable=True,
                                 uuid=uuid(gpu)) for gpu in gpus])  # fmt: skip
    allocations = Allocation.objects.bulk_create([
        Allocation(project=project_rows[entry["project"]], flavor=mig if entry["gi"] is not None else whole, quantity=1,
                   priority_class=standard, cluster=cluster, starts_at=booked_at, ends_at=booked_at + datetime.timedelta(days=2),
                   justification="bench", state=AllocationState.ACTIVE, requested_by=user)
        for entry in entries
    ])  # fmt: skip
    Reservation.objects.bulk_create([
        Reservation(allocation=allocation, unit=0, node=nodes[entry["gpu"] // 8], gpu_indices=[entry["gpu"] % 8],
                    gpu_milli=0 if entry["gi"] is not None else 1000, mig_profile="1g.10gb" if entry["gi"] is not None else "",
                    mig_start=entry["start"])
        for allocation, entry in zip(allocations, entries, strict=True)
    ])  # fmt: skip
    Reservation.objects.update(created_at=booked_at)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--allocations", type=int, default=1000)
    parser.add_argument("--mig-share", type=float, default=0.3, help="the share of allocations that are 1g.10gb MIG slices")
    parser.add_argument("--projects", type=int, default=50)
    parser.add_argument("--seed", type=int, default=42)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-utilisation-") as folder:
        work = Path(folder)
        setup_django(work)
        from clusters.models import Cluster
        from telemetry.models import AllocationUsage
        from telemetry.usage.prometheus import PrometheusClient
        from telemetry.usage.ticking import allocations_utilisation_tick
        from tests.telemetry.usage.recording import T0, prometheus_serving, replay

        entries = plan(args.allocations, args.mig_share, args.projects, args.seed)
        began = time.perf_counter()
        recording = work / "recording.om"
        recording.write_text(replay(scrape(entries), samples=SAMPLES))
        series = sum(1 for line in recording.read_text().splitlines() if not line.startswith("#")) // SAMPLES
        with prometheus_serving([recording], work) as url:
            loaded = time.perf_counter() - began
            seed_portal(entries, args.projects, url, booked_at=T0 - datetime.timedelta(days=1))
            clients: list[PrometheusClient] = []

            def client_for(cluster: Cluster) -> PrometheusClient:
                client = PrometheusClient(cluster.prometheus_url, timeout=30)
                clients.append(client)
                return client

            now = T0 + datetime.timedelta(minutes=15, seconds=30)  # bucket 10:10-10:15
            started = time.perf_counter()
            outcome = allocations_utilisation_tick(now=now, client_for=client_for)
            seconds = time.perf_counter() - started
        known = AllocationUsage.objects.filter(bucket_start=outcome.bucket_start, activity__isnull=False).count()
        mig = sum(1 for entry in entries if entry["gi"] is not None)
        database = "PostgreSQL" if "postgres" in os.environ["DATABASE_URL"] else "SQLite"
        print(f"{args.allocations} allocations ({args.allocations - mig} whole GPUs, {mig} MIG slices) in {args.projects} "
              f"projects; {series} series x {SAMPLES} samples; loaded into Prometheus in {loaded:.1f} s; {database}")  # fmt: skip
        print(f"tick: {seconds:.2f} s wall (target < {TARGET_SECONDS:g} s), {outcome.queries} Prometheus queries "
              f"(target <= {TARGET_QUERIES}), {outcome.rows} rows written, {known} with a known activity")  # fmt: skip
        print(f"clusters: {outcome.clusters}")
        ok = seconds < TARGET_SECONDS and outcome.queries <= TARGET_QUERIES and outcome.rows == args.allocations
        print("targets met" if ok else "TARGETS MISSED")


if __name__ == "__main__":
    main()
