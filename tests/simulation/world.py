"""The simulator's world: the suite's organisation (``tests.conftest.build_world``) made tighter, so
that capacity moves between departments often: guarantees that nest, four priority classes (one of
them oversubscribes with notice, one without), MIG, MPS and time-slicing flavors on small nodes, an
idle policy that reclaims.

``acme`` → ``nlp`` → ``nlp-speech``, and ``acme`` → ``vision``; requesters ``nlp_member``,
``speech_member``, ``vision_member``; deciders ``nlp_admin`` (nlp and speech), ``vision_admin``;
``platform`` edits the catalogue, the inventory and the quota windows (``platform_second`` approves
the windows ``platform`` asks for: four-eyes).
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field
from decimal import Decimal

from django.contrib.auth.models import User
from django.core.management import call_command

from accounting.idle_models import IdleAction, IdlePolicy
from allocations.booking.state import kept_states_forget
from allocations.models import Flavor, PriorityClass, Quota, SharingMode
from clusters.inventory import GpuSpec, node_upsert
from clusters.models import Cluster, Node, NodeSharing
from tenants.models import Department, Project, Role
from tests.conftest import A100, H100, build_world

EPOCH = datetime.datetime(2027, 3, 22, 8, 0, tzinfo=datetime.UTC)
"""Where every run's virtual clock starts: a Monday, a week before Europe's clocks go forward, so
that the recurring windows in Europe/Berlin cross a DST change within a long run."""

REQUESTERS = ("nlp_member", "speech_member", "vision_member")
ADMIN_OF = {"nlp_member": "nlp_admin", "speech_member": "nlp_admin", "vision_member": "vision_admin"}
PROJECT_OF = {"nlp_member": "nlp-llm", "speech_member": "speech-asr", "vision_member": "vision-seg"}


@dataclass
class SimWorld:
    users: dict[str, User]
    projects: dict[str, Project]
    departments: dict[str, Department]
    flavors: list[Flavor]
    classes: list[PriorityClass]
    cluster: Cluster
    node_names: list[str] = field(default_factory=list)


def _flavor(name: str, **fields: object) -> Flavor:
    return Flavor.objects.create(name=name, display_name=name, **fields)


def _quotas(world_departments: dict[str, Department], flavors: dict[str, Flavor]) -> None:
    Quota.objects.all().delete()
    acme, nlp, speech, vision = (world_departments[slug] for slug in ("acme", "nlp", "nlp-speech", "vision"))
    rows = (
        (acme, None, "9", "10"),
        (nlp, None, "5", "8"), (nlp, flavors["a100"], "2", "6"), (nlp, flavors["a100-1g"], "0", "10"),
        (nlp, flavors["a100-3g"], "0", "4"), (nlp, flavors["h100-mps"], "0", "6"),
        (speech, None, "2", "4"),
        (vision, None, "4", "7"), (vision, flavors["h100"], "2", "4"), (vision, flavors["h100-ts"], "0", "4"),
    )
    for department, flavor, guaranteed, limit in rows:
        Quota.objects.create(department=department, flavor=flavor, guaranteed=Decimal(guaranteed), limit=Decimal(limit))


def world_build() -> SimWorld:
    """The world on an empty database (committed: the concurrent actors run on threads)."""
    base = build_world(a100_gpus=16, h100_gpus=8)
    three = _flavor(
        "a100-3g", gpu_model=A100, sharing_mode=SharingMode.MIG, resource_name="nvidia.com/mig-3g.40gb",
        mig_profile="3g.40gb", memory_mib=40192, compute_percent=42, gpu_equivalents=Decimal("0.5"),
        cpu_millicores_per_unit=4000, memory_mib_per_unit=32768,
    )
    timeslice = _flavor(
        "h100-ts", gpu_model=H100, sharing_mode=SharingMode.TIMESLICE, resource_name="nvidia.com/gpu.shared",
        replicas=2, memory_mib=30720, compute_percent=50, gpu_equivalents=Decimal("0.5"),
    )
    flavors = {flavor.name: flavor for flavor in (base.a100, base.h100, base.mig, base.mps, three, timeslice)}
    PriorityClass.objects.filter(pk=base.preemptible.pk).update(notice_minutes=5)
    PriorityClass.objects.create(name="gpu-production", value=100000, notice_minutes=30)
    PriorityClass.objects.create(
        name="gpu-spot", value=10, preemption_policy="Never", oversubscription_factor=Decimal("2"), preemptible=True
    )
    PriorityClass.objects.filter(pk=base.standard.pk).update(notice_minutes=15)
    departments = {d.slug: d for d in (base.acme, base.nlp, base.speech, base.vision)}
    _quotas(departments, flavors)
    for name, sharing, replicas in (("h100-mps", NodeSharing.MPS, 4), ("h100-ts", NodeSharing.TIMESLICE, 2)):
        node_upsert(actor=None, cluster=base.cluster, name=name, cpu_millicores=64000, memory_mib=524288,
                    gpus=[GpuSpec(index=i, model=H100, memory_mib=81920, mig_capable=False) for i in range(4)])
        Node.objects.filter(cluster=base.cluster, name=name).update(sharing=sharing, sharing_replicas=replicas)
    IdlePolicy.objects.create(name="sim-idle", window_minutes=15, grace_minutes=5, action=IdleAction.RECLAIM,
                              department=base.vision)
    classes = list(PriorityClass.objects.order_by("-value"))
    users = dict(base.users)
    # a second platform admin: a platform admin's quota window waits for the other (four-eyes)
    users["platform_second"] = base.persona_add("platform_second", role=Role.PLATFORM_ADMIN, department=base.acme)
    projects = {p.slug: p for p in (base.llm, base.speech_project, base.seg)}
    kept_states_forget()
    return SimWorld(
        users=users, projects=projects, departments=departments,
        flavors=[flavors[name] for name in ("a100", "a100-1g", "a100-3g", "h100", "h100-mps", "h100-ts")],
        classes=[PriorityClass.objects.get(pk=c.pk) for c in classes], cluster=base.cluster,
        node_names=list(Node.objects.filter(cluster=base.cluster).order_by("name").values_list("name", flat=True)),
    )


def database_flush() -> None:
    """Empty every table Django flushes (never the audit log: it is append-only) and forget the
    placement states this process keeps, as a transactional test's teardown does."""
    call_command("flush", verbosity=0, interactive=False, reset_sequences=False, allow_cascade=False,
                 inhibit_post_migrate=True)
    kept_states_forget()
