"""Demo data for ``manage.py seed_demo``: idempotent, so it can run on every ``make run``."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from django.conf import settings
from django.contrib.auth.models import User
from django.db import transaction

from allocations.models import Flavor, PriorityClass, Quota, SharingMode
from clusters.inventory import GpuSpec, node_upsert
from clusters.models import Cluster, Node, NodeSharing
from tenants.models import Department, Membership, Project, Role

A100 = "NVIDIA-A100-SXM4-80GB"
H100 = "NVIDIA-H100-80GB-HBM3"

USERS: list[tuple[str, str, str, str]] = [
    # username, full name, role, department
    ("alice", "Alice Researcher", Role.RESEARCHER, "nlp"),
    ("bob", "Bob Admin", Role.DEPARTMENT_ADMIN, "nlp"),
    ("dave", "Dave Researcher", Role.RESEARCHER, "vision"),
    ("erin", "Erin Admin", Role.DEPARTMENT_ADMIN, "vision"),
    ("carol", "Carol Auditor", Role.AUDITOR, "acme"),
    ("admin", "Platform Admin", Role.PLATFORM_ADMIN, "acme"),
    # a second platform admin: changes of the rules by one wait for the other (four-eyes)
    ("frank", "Frank Platform", Role.PLATFORM_ADMIN, "acme"),
]

FLAVORS: list[dict[str, Any]] = [
    {"name": "a100-80gb", "display_name": "A100 80GB, whole GPU", "gpu_model": A100,
     "sharing_mode": SharingMode.EXCLUSIVE, "resource_name": "nvidia.com/gpu", "memory_mib": 81920,
     "compute_percent": 100, "gpu_equivalents": Decimal("1")},
    {"name": "h100-80gb", "display_name": "H100 80GB, whole GPU", "gpu_model": H100,
     "sharing_mode": SharingMode.EXCLUSIVE, "resource_name": "nvidia.com/gpu", "memory_mib": 81920,
     "compute_percent": 100, "gpu_equivalents": Decimal("1")},
    {"name": "a100-mig-1g-10gb", "display_name": "A100 MIG 1g.10gb", "gpu_model": A100,
     "sharing_mode": SharingMode.MIG, "resource_name": "nvidia.com/mig-1g.10gb", "mig_profile": "1g.10gb",
     "memory_mib": 9856, "compute_percent": 14, "gpu_equivalents": Decimal("0.1429"),
     "cpu_millicores_per_unit": 2000, "memory_mib_per_unit": 16384, "min_cuda_version": "11.0"},
    {"name": "a100-mig-3g-40gb", "display_name": "A100 MIG 3g.40gb", "gpu_model": A100,
     "sharing_mode": SharingMode.MIG, "resource_name": "nvidia.com/mig-3g.40gb", "mig_profile": "3g.40gb",
     "memory_mib": 40192, "compute_percent": 42, "gpu_equivalents": Decimal("0.5"),
     "cpu_millicores_per_unit": 4000, "memory_mib_per_unit": 32768, "min_cuda_version": "11.0"},
    # MPS: the daemon pins each of 5 replicas to 16 GiB; with the memory reserve (15 % + 200 MiB a
    # unit) 4 are booked per GPU and the fifth replica stays free, so the pinned caps of the booked
    # units (64 GiB) leave the reserve free (docs/sharing.md).
    {"name": "h100-mps-4", "display_name": "H100 16 GiB (MPS, 4 per GPU)", "gpu_model": H100,
     "sharing_mode": SharingMode.MPS, "resource_name": "nvidia.com/gpu.shared", "replicas": 5,
     "memory_mib": 16384, "compute_percent": 20, "gpu_equivalents": Decimal("0.25"),
     "cpu_millicores_per_unit": 2000, "memory_mib_per_unit": 16384},
    {"name": "h100-timeslice-2", "display_name": "H100 half (time-sliced, 2 per GPU)", "gpu_model": H100,
     "sharing_mode": SharingMode.TIMESLICE, "resource_name": "nvidia.com/gpu.shared", "replicas": 2,
     "memory_mib": 32768, "compute_percent": 50, "gpu_equivalents": Decimal("0.5"),
     "cpu_millicores_per_unit": 4000, "memory_mib_per_unit": 32768},
    {"name": "h100-vgpu-10gb", "display_name": "H100 vGPU 10 GiB / 20 % (HAMi)", "gpu_model": H100,
     "sharing_mode": SharingMode.VGPU, "resource_name": "nvidia.com/gpu", "memory_mib": 10240,
     "compute_percent": 20, "gpu_equivalents": Decimal("0.2"),
     "cpu_millicores_per_unit": 2000, "memory_mib_per_unit": 16384},
]

# name, GPU model, how the device plugin offers its GPUs (gpu-sharing-formats.md §1), replicas, and
# the NVIDIA driver and CUDA driver API versions its node agent reports (flavors' minimums are
# checked against them). The A100 nodes run the mixed MIG strategy: each GPU is carved or offered
# whole, as booked.
DEMO_NODES: list[tuple[str, str, str, int | None, str, str]] = [
    ("a100-node-1", A100, NodeSharing.MIG, None, "535.183.01", "12.2"),
    ("a100-node-2", A100, NodeSharing.MIG, None, "535.183.01", "12.2"),
    ("h100-node-1", H100, NodeSharing.EXCLUSIVE, None, "550.90.07", "12.4"),
    ("h100-node-2", H100, NodeSharing.MPS, 5, "550.90.07", "12.4"),
    ("h100-node-3", H100, NodeSharing.TIMESLICE, 2, "525.147.05", "12.0"),
    # A second MPS node: an MPS node serves one department at a time (one daemon per node).
    ("h100-node-4", H100, NodeSharing.MPS, 5, "550.90.07", "12.4"),
    # Whole H100s shared by HAMi (the demo cluster has use_hami): the vGPU flavor's units, or whole GPUs.
    ("h100-node-5", H100, NodeSharing.EXCLUSIVE, None, "550.90.07", "12.4"),
]

PRIORITY_CLASSES: list[dict[str, Any]] = [
    {"name": "gpu-production", "value": 100000, "preemption_policy": "PreemptLowerPriority",
     "oversubscription_factor": Decimal("1.00"), "description": "Guaranteed, within quota", "notice_minutes": 60},
    {"name": "gpu-standard", "value": 10000, "preemption_policy": "PreemptLowerPriority",
     "oversubscription_factor": Decimal("1.00"), "description": "Default for research work"},
    {"name": "gpu-preemptible", "value": 1000, "preemption_policy": "Never",
     "oversubscription_factor": Decimal("1.50"), "description": "May exceed quota by 50 %; preempted first",
     "preemptible": True},
]

# department, flavor name (None: GPU-equivalents), guaranteed, limit
QUOTAS: list[tuple[str, str | None, str, str]] = [
    ("nlp", "a100-80gb", "4", "8"),
    ("nlp", "a100-mig-1g-10gb", "7", "14"),
    ("nlp", "h100-mps-4", "4", "8"),
    ("nlp", None, "8", "12"),
    ("vision", "h100-80gb", "4", "8"),
    ("vision", "a100-mig-3g-40gb", "2", "4"),
    ("vision", "h100-timeslice-2", "2", "4"),
    ("vision", "h100-vgpu-10gb", "5", "10"),
    ("vision", "h100-mps-4", "2", "4"),
    ("vision", None, "8", "12"),
    ("acme", None, "0", "16"),
]


@transaction.atomic
def demo_seed() -> None:
    departments = _departments()
    users = _users(departments)
    _projects(departments, users)
    flavors = _flavors()
    for spec in PRIORITY_CLASSES:
        PriorityClass.objects.get_or_create(name=spec["name"], defaults=spec)
    for department, flavor_name, guaranteed, limit in QUOTAS:
        Quota.objects.get_or_create(
            department=departments[department],
            flavor=flavors[flavor_name] if flavor_name else None,
            defaults={"guaranteed": Decimal(guaranteed), "limit": Decimal(limit)},
        )
    _cluster()


def _departments() -> dict[str, Department]:
    acme, _ = Department.objects.get_or_create(slug="acme", defaults={"name": "ACME Research"})
    nlp, _ = Department.objects.get_or_create(slug="nlp", defaults={"name": "Natural Language Processing", "parent": acme})
    vision, _ = Department.objects.get_or_create(slug="vision", defaults={"name": "Computer Vision", "parent": acme})
    return {"acme": acme, "nlp": nlp, "vision": vision}


def _users(departments: dict[str, Department]) -> dict[str, User]:
    users: dict[str, User] = {}
    for username, full_name, role, department in USERS:
        first, last = full_name.split(" ", 1)
        user, created = User.objects.get_or_create(
            username=username, defaults={"first_name": first, "last_name": last, "email": f"{username}@example.org"}
        )
        if created:
            user.set_password(settings.GPUPORTAL_DEMO_PASSWORD)
            if role == Role.PLATFORM_ADMIN:
                user.is_staff = True
                user.is_superuser = True
            user.save()
        users[username] = user
        Membership.objects.get_or_create(user=user, department=departments[department], role=role)
    return users


def _projects(departments: dict[str, Department], users: dict[str, User]) -> None:
    for slug, name, home, members in (
        ("nlp-llm", "Large language models", "nlp", ["alice", "bob"]),
        ("nlp-speech", "Speech recognition", "nlp", ["alice"]),
        ("vision-seg", "Image segmentation", "vision", ["dave", "erin"]),
    ):
        project, _ = Project.objects.get_or_create(slug=slug, defaults={"name": name, "department": departments[home]})
        project.members.add(*[users[member] for member in members])


def _flavors() -> dict[str, Flavor]:
    flavors = {}
    for spec in FLAVORS:
        flavor = Flavor.objects.filter(name=spec["name"]).first()
        if flavor is None:
            flavor = Flavor(**spec)
            flavor.full_clean()
            flavor.save()
        flavors[flavor.name] = flavor
    return flavors


def _cluster() -> None:
    cluster, _ = Cluster.objects.get_or_create(name="demo", defaults={"display_name": "Demo cluster", "use_hami": True})
    for name, model, sharing, replicas, driver, cuda in DEMO_NODES:
        if cluster.nodes.filter(name=name).exists():
            continue
        node_upsert(
            actor=None,
            cluster=cluster,
            name=name,
            cpu_millicores=128000,
            memory_mib=1024 * 1024,
            gpus=[GpuSpec(index=i, model=model, memory_mib=81920, mig_capable=model == A100) for i in range(8)],
            labels={"nvidia.com/gpu.product": model, "nvidia.com/gpu.count": "8"},
        )
        Node.objects.filter(cluster=cluster, name=name).update(
            sharing=sharing, sharing_replicas=replicas, driver_version=driver, cuda_version=cuda
        )
