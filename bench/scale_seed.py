"""The seeding of ``bench/scale.py``, run inside Django (``manage.py shell``, or a test's database):
clusters of 8-GPU nodes, a department tree with its projects and people, a month of usage, and
what each bench client needs (its people's tokens, a researcher's sign-in cookie, a project).

Everything is written in bulk (``bulk_create`` in batches) on top of the demo catalogue
(``demo.seed``: flavors of every sharing mode, priority classes, the demo people), never through
the services one row at a time: 10 × 2,500 nodes and 20,000 people take minutes, not hours.
"""

from __future__ import annotations

import datetime
import time
from dataclasses import asdict, dataclass
from decimal import Decimal
from typing import Any

A100 = "NVIDIA-A100-SXM4-80GB"
H100 = "NVIDIA-H100-80GB-HBM3"
GPUS_PER_NODE = 8
BATCH = 5000
DAYS_OF_USAGE = 30
# A node's kind by its index modulo 8: (GPU model, sharing, replicas, driver, CUDA). A100 nodes run
# MIG's mixed strategy (a GPU carved or whole, as booked); whole H100s on a HAMi cluster also serve
# its vGPU flavor.
NODE_KINDS: tuple[tuple[str, str, int | None, str, str], ...] = (
    (A100, "mig", None, "535.183.01", "12.2"),
    (A100, "mig", None, "535.183.01", "12.2"),
    (A100, "exclusive", None, "535.183.01", "12.2"),
    (H100, "exclusive", None, "550.90.07", "12.4"),
    (H100, "exclusive", None, "550.90.07", "12.4"),
    (H100, "mps", 5, "550.90.07", "12.4"),
    (H100, "timeslice", 2, "550.90.07", "12.4"),
    (H100, "exclusive", None, "550.90.07", "12.4"),
)
BACKGROUND_KIND = 3
"""Index of the node kind whose GPUs hold each department's background grant (a whole H100)."""


@dataclass(frozen=True)
class Sizes:
    clusters: int
    nodes: int
    departments: int
    projects: int
    users: int
    clients: int
    kubeconfig: str = ""  # the first cluster's kubeconfig (the test API server); empty: manifests only


def scale_seed(sizes: Sizes) -> dict[str, Any]:
    """Seed everything and return what the clients need, with the counts written and the time taken."""
    from django.db import transaction

    from demo.seed import demo_seed

    began = time.perf_counter()
    demo_seed()
    with transaction.atomic():
        clusters = _clusters(sizes)
        departments = _departments(sizes.departments)
        projects = _projects(departments, sizes.projects)
        admins = _people(departments, projects, sizes.users)
        _quotas_opened(departments)
        _background(departments, projects, admins, clusters)
    clients = _clients(sizes, departments, projects)
    from allocations.models import PriorityClass

    return {"clients": clients, "flavors": _flavor_ids(), "clusters": clusters, "month": _month(),
            "priority_class": PriorityClass.objects.get(name="gpu-standard").pk,
            "counts": seed_counts(), "seed_s": round(time.perf_counter() - began, 1)}


def seed_counts() -> dict[str, int]:
    """What the database holds now (the smoke test compares them with the sizes asked)."""
    from django.contrib.auth.models import User

    from accounting.models import UsageDay, UsageHour
    from clusters.models import Cluster, Gpu, Node
    from tenants.models import Department, Membership, Project

    return {"clusters": Cluster.objects.count(), "nodes": Node.objects.count(), "gpus": Gpu.objects.count(),
            "departments": Department.objects.count(), "projects": Project.objects.count(),
            "users": User.objects.count(), "memberships": Membership.objects.count(),
            "usage_hours": UsageHour.objects.count(), "usage_days": UsageDay.objects.count()}


def _clusters(sizes: Sizes) -> list[dict[str, Any]]:
    """``sizes.clusters`` clusters (every other one with HAMi), the first on the Kubernetes driver
    when a kubeconfig is given; their nodes and GPUs."""
    from clusters.credentials import cluster_kubeconfig_set
    from clusters.models import Cluster, ClusterDriverKind

    made = []
    for index in range(sizes.clusters):
        cluster = Cluster.objects.create(name=f"scale-{index:02d}", display_name=f"Scale {index}", use_hami=index % 2 == 1)
        if index == 0 and sizes.kubeconfig:
            Cluster.objects.filter(pk=cluster.pk).update(driver=ClusterDriverKind.KUBERNETES)
            cluster_kubeconfig_set(actor=None, cluster_id=cluster.pk, kubeconfig=sizes.kubeconfig)
        _nodes(cluster, sizes.nodes)
        made.append({"id": cluster.pk, "name": cluster.name, "hami": cluster.use_hami,
                     "driver": "kubernetes" if index == 0 and sizes.kubeconfig else "manifests"})
    return made


def node_name(index: int) -> str:
    return f"node-{index:05d}"


def _nodes(cluster: Any, count: int) -> None:
    from clusters.models import Gpu, Node

    for start in range(0, count, BATCH):
        rows = []
        for index in range(start, min(count, start + BATCH)):
            model, sharing, replicas, driver, cuda = NODE_KINDS[index % len(NODE_KINDS)]
            rows.append(Node(cluster=cluster, name=node_name(index), cpu_millicores=128000, memory_mib=1024 * 1024,
                             sharing=sharing, sharing_replicas=replicas, driver_version=driver, cuda_version=cuda,
                             labels={"nvidia.com/gpu.product": model, "nvidia.com/gpu.count": str(GPUS_PER_NODE)}))
        nodes = Node.objects.bulk_create(rows)
        Gpu.objects.bulk_create(
            [Gpu(node=node, index=i, model=node.labels["nvidia.com/gpu.product"], memory_mib=81920,
                 mig_capable=node.labels["nvidia.com/gpu.product"] == A100)
             for node in nodes for i in range(GPUS_PER_NODE)],
            batch_size=BATCH,
        )


def _departments(count: int) -> list[Any]:
    """``count`` departments under the demo's root: one faculty per 25, the rest spread under them."""
    from tenants.models import Department

    root = Department.objects.get(slug="acme")
    faculties = Department.objects.bulk_create(
        [Department(slug=f"sc-f{n:04d}", name=f"Faculty {n}", parent=root) for n in range(max(1, count // 25))]
    )
    rest = Department.objects.bulk_create(
        [Department(slug=f"sc-d{n:04d}", name=f"Department {n}", parent=faculties[n % len(faculties)])
         for n in range(count - len(faculties))],
        batch_size=BATCH,
    )
    return [*faculties, *rest]


def _projects(departments: list[Any], count: int) -> list[list[Any]]:
    """``count`` projects spread over the departments: each department's, by department index."""
    from tenants.models import Project

    made = Project.objects.bulk_create(
        [Project(slug=f"sc-p{n:05d}", name=f"Project {n}", department=departments[n % len(departments)])
         for n in range(count)],
        batch_size=BATCH,
    )
    by_department: list[list[Any]] = [[] for _ in departments]
    for n, project in enumerate(made):
        by_department[n % len(departments)].append(project)
    return by_department


def person_project(index: int, departments: int, projects: list[list[Any]]) -> Any:
    """The project of person ``index`` (a department's admin or researcher) in its department."""
    own = projects[index % departments]
    return own[(index // departments) % len(own)]


def _people(departments: list[Any], projects: list[list[Any]], count: int) -> list[Any]:
    """``count`` users: the first of each department its admin, the rest researchers, each a member
    of one of its department's projects. One password for all (hashed once): ``bench``."""
    from django.contrib.auth.hashers import make_password
    from django.contrib.auth.models import User

    from tenants.models import Membership, Project, Role

    password = make_password("bench")
    users = User.objects.bulk_create(
        [User(username=f"sc-u{n:05d}", password=password, email=f"sc-u{n:05d}@example.org") for n in range(count)],
        batch_size=BATCH,
    )
    total = len(departments)
    Membership.objects.bulk_create(
        [Membership(user=user, department=departments[n % total],
                    role=Role.DEPARTMENT_ADMIN if n < total else Role.RESEARCHER) for n, user in enumerate(users)],
        batch_size=BATCH,
    )
    Project.members.through.objects.bulk_create(
        [Project.members.through(project_id=person_project(n, total, projects).pk, user_id=user.pk)
         for n, user in enumerate(users)],
        batch_size=BATCH,
    )
    return users[:total]


def _quotas_opened(departments: list[Any]) -> None:
    """A GPU-equivalent quota for every department, and room in every quota for the whole run."""
    from allocations.models import Quota

    Quota.objects.bulk_create([Quota(department=department, flavor=None, guaranteed=Decimal(0), limit=Decimal(900_000))
                               for department in departments], batch_size=BATCH)
    Quota.objects.update(limit=Decimal(900_000))


def _background(departments: list[Any], projects: list[list[Any]], admins: list[Any], clusters: list[dict[str, Any]]) -> None:
    """A whole H100 held by each department's first project since a month ago, booked on a GPU, and
    its month of usage (hours and days), so that a department's month by day reads real rows."""
    from django.utils import timezone

    from allocations.booking.state import placement_version_bump
    from allocations.models import Allocation, AllocationState, Flavor, PriorityClass, Reservation
    from clusters.models import Node

    flavor = Flavor.objects.get(name="h100-80gb")
    priority = PriorityClass.objects.get(name="gpu-standard")
    now = timezone.now()
    began = now - datetime.timedelta(days=DAYS_OF_USAGE + 1)
    grants, bookings = [], []
    places = _background_places(clusters, len(departments))
    for index in range(len(departments)):
        grants.append(Allocation(project=projects[index][0], flavor=flavor, quantity=1, priority_class=priority,
                                 cluster_id=places[index][0], starts_at=began, ends_at=now + datetime.timedelta(days=30),
                                 justification="bench background", state=AllocationState.ACTIVE,
                                 requested_by=admins[index], decided_by=admins[index], decided_at=began))
    grants = Allocation.objects.bulk_create(grants, batch_size=BATCH)
    versions = {cluster["id"]: placement_version_bump(cluster_id=cluster["id"]) for cluster in clusters}
    nodes = {(node.cluster_id, node.name): node.pk for node in Node.objects.filter(cluster_id__in=versions)}
    for grant, (cluster_id, name, gpu) in zip(grants, places, strict=True):
        bookings.append(Reservation(allocation=grant, unit=0, node_id=nodes[cluster_id, name], gpu_indices=[gpu],
                                    gpu_milli=1000, cpu_millicores=8000, memory_mib=65536, policy="seed",
                                    changed_version=versions[cluster_id]))
    Reservation.objects.bulk_create(bookings, batch_size=BATCH)
    _usage(grants, flavor, now)


def _background_places(clusters: list[dict[str, Any]], count: int) -> list[tuple[int, str, int]]:
    """(cluster, node, GPU) of each department's background grant: whole H100s, spread over the clusters."""
    places = []
    for index in range(count):
        cluster = clusters[index % len(clusters)]["id"]
        slot = index // len(clusters)  # the slot-th background GPU of that cluster
        node = (slot // GPUS_PER_NODE) * len(NODE_KINDS) + BACKGROUND_KIND
        places.append((cluster, node_name(node), slot % GPUS_PER_NODE))
    return places


def _usage(grants: list[Any], flavor: Any, now: datetime.datetime) -> None:
    from accounting.models import UsageDay, UsageHour

    today = now.astimezone(datetime.UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    first = today - datetime.timedelta(days=DAYS_OF_USAGE)
    one, busy = Decimal(1), Decimal("0.6")
    hours: list[UsageHour] = []
    days: list[UsageDay] = []
    for grant in grants:
        common = {"cluster_id": grant.cluster_id, "department_id": grant.project.department_id,
                  "project_id": grant.project_id, "flavor_id": flavor.pk}
        for day in range(DAYS_OF_USAGE):
            start = first + datetime.timedelta(days=day)
            days.append(UsageDay(day=start, granted=24 * one, measured=24 * one, used=24 * busy, **common))
            hours.extend(UsageHour(allocation_id=grant.pk, hour=start + datetime.timedelta(hours=hour), granted=one,
                                   measured=one, used=busy, rolled_at=now, **common) for hour in range(24))
        if len(hours) >= BATCH:
            UsageHour.objects.bulk_create(hours, batch_size=BATCH)
            hours = []
    UsageHour.objects.bulk_create(hours, batch_size=BATCH)
    UsageDay.objects.bulk_create(days, batch_size=BATCH)


def _month() -> dict[str, str]:
    """The month of usage seeded, as the usage API's ``from`` and ``to`` (whole UTC days)."""
    today = datetime.datetime.now(datetime.UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    return {"from": (today - datetime.timedelta(days=DAYS_OF_USAGE)).isoformat(), "to": today.isoformat()}


def _flavor_ids() -> dict[str, int]:
    from allocations.models import Flavor

    return dict(Flavor.objects.values_list("name", "pk"))


@dataclass(frozen=True)
class Persona:
    """One bench client's people: a department's admin (approves, releases, reads its month) and
    a researcher of one of its projects (submits, asks the request form's feedback)."""

    department: int
    project: int
    admin_token: str
    researcher_token: str
    sign_in: str  # the researcher's sign-in cookie (the request form is a page, not the API)


def _clients(sizes: Sizes, departments: list[Any], projects: list[list[Any]]) -> list[dict[str, Any]]:
    """A persona for each client, in departments of their own where there are enough (not faculties)."""
    from django.contrib.auth.models import User
    from django.test import Client

    from tenants.access_tokens import access_token_create

    total = len(departments)
    leaves = [index for index in range(total) if departments[index].parent.slug != "acme"] or list(range(total))
    personas = []
    for client in range(sizes.clients):
        index = leaves[client % len(leaves)]
        researcher_index = index + total * (1 + client // len(leaves))
        if researcher_index >= sizes.users:
            researcher_index = index + total
        admin = User.objects.get(username=f"sc-u{index:05d}")
        researcher = User.objects.get(username=f"sc-u{researcher_index:05d}")
        browser = Client()
        browser.force_login(researcher)
        personas.append(asdict(Persona(
            department=departments[index].pk, project=person_project(researcher_index, total, projects).pk,
            admin_token=access_token_create(actor=admin, name="bench", scope="write").key,
            researcher_token=access_token_create(actor=researcher, name="bench", scope="write").key,
            sign_in=browser.cookies["sessionid"].value,
        )))
    return personas


def clusters_first_push() -> float:
    """Every cluster's first full push (what ``cluster_sync`` does when a cluster is added), left out
    of the drive's figures; the seconds it took."""
    from clusters.models import Cluster
    from delivery.services import cluster_sync

    began = time.perf_counter()
    for cluster in Cluster.objects.filter(name__startswith="scale-"):
        cluster_sync(cluster_id=cluster.pk)
    return round(time.perf_counter() - began, 1)
