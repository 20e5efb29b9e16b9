"""Shared fixtures: a small organisation with personas per department.

``acme`` (organisation) → ``nlp`` → ``nlp-speech`` (team), and ``acme`` → ``vision``.
Personas: ``nlp_member`` (researcher in nlp, member of project nlp-llm), ``nlp_admin``,
``vision_member``, ``vision_admin``, ``auditor`` (on acme), ``platform`` (platform admin),
``nobody`` (no role at all). Tests that need one more persona add it with ``World.persona_add``
(``tests/audit`` adds ``nlp_auditor``, an auditor of nlp's subtree).
"""

from __future__ import annotations

import datetime
import importlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from decimal import Decimal
from typing import Any
from urllib.parse import unquote, urlparse

import pytest
from django.contrib.auth.models import User
from django.db import connection, connections
from django.utils import timezone
from rest_framework.test import APIClient

from allocations.models import Flavor, PriorityClass, Quota, SharingMode
from clusters.inventory import GpuSpec, node_upsert
from clusters.models import Cluster, Node, NodeSharing
from tenants.models import Department, Membership, Project, Role
from tests.pure import apart_refusals, pure_refusals

pytest_plugins = ["kube_testenv.pytest_plugin"]

A100 = "NVIDIA-A100-SXM4-80GB"
H100 = "NVIDIA-H100-80GB-HBM3"


def requires_postgres() -> Any:
    """Skip on SQLite, unless GPUPORTAL_REQUIRE_POSTGRES=1 says this run must prove it."""
    required = os.environ.get("GPUPORTAL_REQUIRE_POSTGRES") == "1"
    return pytest.mark.skipif(
        connection.vendor != "postgresql" and not required,
        reason="needs PostgreSQL (make test provides it)",
    )


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test marked ``pure`` or ``apart`` runs beside the suite in a process of its own
    (``scripts/test.sh``): it may not reach what its marker rules out (``tests/pure.py``)."""
    refusals = pure_refusals(items) + apart_refusals(items)
    if refusals:
        raise pytest.UsageError("\n".join(refusals))


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup: None, django_db_blocker: Any) -> Iterator[None]:
    """On PostgreSQL with ``GPUPORTAL_APP_DATABASE_URL`` (as ``make test`` sets it), create and migrate
    the test database as the owner, then run every test as the restricted application role, the
    way production runs: the audit tables then refuse UPDATE, DELETE and TRUNCATE by privilege too."""
    default = connections["default"]
    app_url = os.environ.get("GPUPORTAL_APP_DATABASE_URL")
    if default.vendor != "postgresql" or not app_url or os.environ.get("GPUPORTAL_TESTS_AS_OWNER") == "1":
        yield
        return
    app = urlparse(app_url)
    owner = (default.settings_dict["USER"], default.settings_dict["PASSWORD"])
    with django_db_blocker.unblock():
        default.close()
        default.settings_dict["USER"] = unquote(app.username or "")
        default.settings_dict["PASSWORD"] = unquote(app.password or "")
    yield
    with django_db_blocker.unblock():
        default.close()
        default.settings_dict["USER"], default.settings_dict["PASSWORD"] = owner


@pytest.fixture(autouse=True)
def _clock_given_back() -> Iterator[None]:
    """A test that moves the one clock (kernel.clock) gives the system clock back afterwards."""
    from kernel.clock import clock_reset

    yield
    clock_reset()


@pytest.fixture(autouse=True)
def _kept_placement_states_forgotten() -> None:
    """Each test starts with no kept placement state: a rolled-back test's rows are gone, and ids
    may come back (allocations.booking.state)."""
    from allocations.booking.state import kept_states_forget

    kept_states_forget()


@pytest.fixture(autouse=True)
def _manifests_in_tmp(settings: Any, tmp_path: Any) -> None:
    settings.GPUPORTAL_MANIFESTS_DIR = tmp_path / "manifests"


@pytest.fixture(autouse=True)
def _celery_join_flag() -> Iterator[None]:
    """Without a broker, tasks run eagerly: Celery marks "inside a task" with a process-wide flag
    that it saves and restores around each one, so eager tasks ending on several threads at once
    (the concurrency tests) can leave it set, and a later test's ``.apply().get()`` would refuse.
    Put it back after every test."""
    state = importlib.import_module("celery._state")  # not in Celery's type stubs
    before = state.task_join_will_block()
    yield
    state._set_task_join_will_block(before)


@dataclass
class World:
    acme: Department
    nlp: Department
    speech: Department
    vision: Department
    users: dict[str, User]
    llm: Project
    speech_project: Project
    seg: Project
    a100: Flavor
    h100: Flavor
    mig: Flavor
    mps: Flavor
    standard: PriorityClass
    preemptible: PriorityClass
    cluster: Cluster

    def client(self, persona: str | None) -> APIClient:
        client = APIClient()
        if persona is not None:
            client.force_authenticate(self.users[persona])
        return client

    def persona_add(self, name: str, *, role: str, department: Department) -> User:
        """One more persona for the tests that need it (user ``name``, password ``pw-<name>``)."""
        user = make_user(name)
        Membership.objects.create(user=user, department=department, role=role)
        self.users[name] = user
        return user

    def window(self, days: int = 7) -> dict[str, str]:
        start = timezone.now() + datetime.timedelta(minutes=1)
        return {"starts_at": start.isoformat(), "ends_at": (start + datetime.timedelta(days=days)).isoformat()}


def make_user(username: str) -> User:
    user = User.objects.create_user(username=username, password="pw-" + username)
    return user


def build_world(*, a100_gpus: int = 16, h100_gpus: int = 8) -> World:
    acme = Department.objects.create(slug="acme", name="ACME")
    nlp = Department.objects.create(slug="nlp", name="NLP", parent=acme)
    speech = Department.objects.create(slug="nlp-speech", name="Speech team", parent=nlp)
    vision = Department.objects.create(slug="vision", name="Vision", parent=acme)
    roles = {
        "nlp_member": (Role.RESEARCHER, nlp),
        "nlp_admin": (Role.DEPARTMENT_ADMIN, nlp),
        "speech_member": (Role.RESEARCHER, speech),
        "vision_member": (Role.RESEARCHER, vision),
        "vision_admin": (Role.DEPARTMENT_ADMIN, vision),
        "auditor": (Role.AUDITOR, acme),
        "platform": (Role.PLATFORM_ADMIN, acme),
    }
    users = {name: make_user(name) for name in [*roles, "nobody"]}
    for name, (role, department) in roles.items():
        Membership.objects.create(user=users[name], department=department, role=role)
    llm = Project.objects.create(slug="nlp-llm", name="LLM", department=nlp)
    llm.members.add(users["nlp_member"])
    speech_project = Project.objects.create(slug="speech-asr", name="ASR", department=speech)
    speech_project.members.add(users["speech_member"])
    seg = Project.objects.create(slug="vision-seg", name="Segmentation", department=vision)
    seg.members.add(users["vision_member"])

    a100 = Flavor.objects.create(
        name="a100", display_name="A100", gpu_model=A100, sharing_mode=SharingMode.EXCLUSIVE,
        resource_name="nvidia.com/gpu", memory_mib=81920, compute_percent=100, gpu_equivalents=Decimal("1"),
    )
    h100 = Flavor.objects.create(
        name="h100", display_name="H100", gpu_model=H100, sharing_mode=SharingMode.EXCLUSIVE,
        resource_name="nvidia.com/gpu", memory_mib=81920, compute_percent=100, gpu_equivalents=Decimal("1"),
    )
    mig = Flavor.objects.create(
        name="a100-1g", display_name="A100 1g.10gb", gpu_model=A100, sharing_mode=SharingMode.MIG,
        resource_name="nvidia.com/mig-1g.10gb", mig_profile="1g.10gb", memory_mib=9856, compute_percent=14,
        gpu_equivalents=Decimal("0.1429"), cpu_millicores_per_unit=2000, memory_mib_per_unit=16384,
    )
    mps = Flavor.objects.create(
        name="h100-mps", display_name="H100 MPS quarter", gpu_model=H100, sharing_mode=SharingMode.MPS,
        resource_name="nvidia.com/gpu.shared", replicas=4, memory_mib=20480, compute_percent=25,
        gpu_equivalents=Decimal("0.25"),
    )
    standard = PriorityClass.objects.create(name="gpu-standard", value=1000)
    preemptible = PriorityClass.objects.create(
        name="gpu-preemptible", value=100, preemption_policy="Never", oversubscription_factor=Decimal("1.5")
    )
    for department, flavor, limit in (
        (nlp, a100, "8"), (nlp, mig, "14"), (nlp, mps, "8"), (nlp, None, "10"),
        (vision, h100, "8"), (vision, None, "10"), (acme, None, "16"),
    ):
        Quota.objects.create(department=department, flavor=flavor, guaranteed=Decimal("0"), limit=Decimal(limit))

    cluster = Cluster.objects.create(name="test-cluster")
    for model, count, prefix, mig_capable in ((A100, a100_gpus, "a100", True), (H100, h100_gpus, "h100", False)):
        for node_index in range(0, count, 8):
            gpus_here = min(8, count - node_index)
            node_upsert(
                actor=None, cluster=cluster, name=f"{prefix}-{node_index // 8}", cpu_millicores=128000,
                memory_mib=1048576,
                gpus=[GpuSpec(index=i, model=model, memory_mib=81920, mig_capable=mig_capable) for i in range(gpus_here)],
            )
    # The A100 nodes run the device plugin's mixed MIG strategy: whole GPUs and MIG slices.
    Node.objects.filter(cluster=cluster, name__startswith="a100-").update(sharing=NodeSharing.MIG)
    return World(
        acme=acme, nlp=nlp, speech=speech, vision=vision, users=users, llm=llm, speech_project=speech_project,
        seg=seg, a100=a100, h100=h100, mig=mig, mps=mps, standard=standard, preemptible=preemptible, cluster=cluster,
    )


@pytest.fixture
def world(db: None) -> World:
    return build_world()
