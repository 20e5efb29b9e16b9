"""The recorded cases and the portal's side of them: one cluster whose nodes carry the recorded
GPUs, and the allocations that booked them.

Every recording covers 10:00-11:00 UTC on 2024-01-01; the tick runs at 10:35:30 and reads the
bucket 10:30-10:35 (steps 120..139 of the replay).
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path

from allocations.models import Allocation, AllocationState, Flavor, Reservation, SharingMode
from clusters.models import Cluster, Gpu, Node, NodeSharing
from telemetry.models import GpuSample, NodeReportState, ObservedGpu, SampleTier
from tenants.models import Project
from tests.conftest import World
from tests.telemetry.usage.recording import FIXTURES, T0, Vary, alternate, missing, peak_at, replay

BUCKET = datetime.datetime(2024, 1, 1, 10, 30, tzinfo=datetime.UTC)
TICK_AT = datetime.datetime(2024, 1, 1, 10, 35, 30, tzinfo=datetime.UTC)
GAP = range(120, 132)  # 12 of the bucket's 20 scrapes missing: coverage 0.4
MIB = 1024 * 1024
GIB = 1024 * MIB


def uuid(n: int) -> str:
    return f"GPU-5f0c2d4e-8a1b-4c3d-9e7f-{n:012d}"


VARIES: dict[str, list[Vary]] = {
    "whole-gpus.om": [
        Vary("DCGM_FI_PROF_SM_ACTIVE", {"UUID": uuid(1)}, alternate(0.5, 0.7)),
        Vary("DCGM_FI_DEV_FB_USED", {"UUID": uuid(1)}, peak_at(125, 32000)),
        Vary("DCGM_FI_PROF_GR_ENGINE_ACTIVE", {"UUID": uuid(3)}, missing(GAP)),
        Vary("DCGM_FI_DEV_FB_USED", {"UUID": uuid(3)}, missing(GAP)),
    ],
    "mig.om": [],
    "timeslicing.om": [],
    "hami.om": [
        Vary("hami_container_device_utilization_ratio", {"container": "worker"}, alternate(15, 25)),
        Vary("hami_vgpu_memory_used_bytes", {"container": "worker"}, peak_at(130, 4 * GIB)),
    ],
    "dcgm-4.9.om": [],
}


def replayed_files(workdir: Path) -> list[Path]:
    """Each fixture replayed into ``workdir``, ready for promtool."""
    out = []
    for name, varies in VARIES.items():
        target = workdir / name
        target.write_text(replay((FIXTURES / name).read_text(), varies=varies))
        out.append(target)
    return out


@dataclass
class Scene:
    world: World
    cluster: Cluster
    nodes: dict[str, Node]
    flavors: dict[str, Flavor]
    grants: dict[str, Allocation] = field(default_factory=dict)

    def grant(
        self, name: str, project: Project, flavor: str, devices: list[tuple[str, int, int, str, int | None]],
        *, starts_at: datetime.datetime | None = None, ends_at: datetime.datetime | None = None,
        booked_at: datetime.datetime | None = None, released_at: datetime.datetime | None = None,
    ) -> Allocation:  # fmt: skip
        """An active allocation of ``project`` with one reservation per device: (node, GPU index,
        thousandths of the GPU, MIG profile, MIG start)."""
        allocation = Allocation.objects.create(
            project=project, flavor=self.flavors[flavor], quantity=len(devices), priority_class=self.world.standard,
            cluster=self.cluster, starts_at=starts_at or T0 - datetime.timedelta(days=1),
            ends_at=ends_at or T0 + datetime.timedelta(days=1), justification=name, state=AllocationState.ACTIVE,
            requested_by=self.world.users["nlp_member"],
        )  # fmt: skip
        for unit, (node, index, milli, profile, start) in enumerate(devices):
            Reservation.objects.create(
                allocation=allocation, unit=unit, node=self.nodes[node], gpu_indices=[index], gpu_milli=milli,
                mig_profile=profile, mig_start=start, released_at=released_at,
            )  # fmt: skip
        Reservation.objects.filter(allocation=allocation).update(
            created_at=booked_at or T0 - datetime.timedelta(days=1)
        )
        self.grants[name] = allocation
        return allocation

    def agent_sample(self, node: str, index: int, *, percent: float | None, samples: int = 10,
                     memory: float | None = None, tier: int = SampleTier.FIVE_MINUTES,
                     at: datetime.datetime = BUCKET) -> None:  # fmt: skip
        """A node agent's reading of one GPU (a 5-minute mean, or one raw sample)."""
        gpu, _created = ObservedGpu.objects.get_or_create(
            node=self.nodes[node], uuid=uuid(0) + f"{node}-{index}", defaults={
                "index": index, "first_seen_at": T0 - datetime.timedelta(days=1), "last_seen_at": TICK_AT},
        )  # fmt: skip
        NodeReportState.objects.get_or_create(node=self.nodes[node], defaults={"interval_seconds": 30})
        GpuSample.objects.create(
            gpu=gpu, tier=tier, at=at, samples=samples, gpu_percent=percent, memory_used_bytes=memory
        )


NODES: dict[str, tuple[str, NodeSharing, list[int]]] = {
    "a100-0": ("NVIDIA-A100-SXM4-80GB", NodeSharing.EXCLUSIVE, [1, 2, 3, 4, 5, 6, 7, 8]),
    "a100-1": ("NVIDIA-A100-SXM4-80GB", NodeSharing.MIG, [11, 12, 13, 14]),
    "h100-0": ("NVIDIA-H100-80GB-HBM3", NodeSharing.MPS, [21]),
    "h100-1": ("NVIDIA-H100-80GB-HBM3", NodeSharing.EXCLUSIVE, [31]),
    "a100-2": ("NVIDIA-A100-SXM4-80GB", NodeSharing.EXCLUSIVE, [41, 42]),
}


def build_scene(world: World, *, prometheus_url: str, use_hami: bool = True) -> Scene:
    cluster = Cluster.objects.create(name="usage", prometheus_url=prometheus_url, use_hami=use_hami)
    nodes: dict[str, Node] = {}
    for name, (model, sharing, numbers) in NODES.items():
        node = nodes[name] = Node.objects.create(cluster=cluster, name=name, sharing=sharing)
        for index, number in enumerate(numbers):
            Gpu.objects.create(
                node=node, index=index, model=model, memory_mib=81920, mig_capable=True, uuid=uuid(number)
            )
    mig_3g = Flavor.objects.create(
        name="a100-3g", display_name="A100 3g.40gb", gpu_model=world.a100.gpu_model, sharing_mode=SharingMode.MIG,
        resource_name="nvidia.com/mig-3g.40gb", mig_profile="3g.40gb", memory_mib=40192, compute_percent=42,
        gpu_equivalents=Decimal("0.4286"),
    )  # fmt: skip
    vgpu = Flavor.objects.create(
        name="h100-half", display_name="H100 half (HAMi)", gpu_model=world.h100.gpu_model, sharing_mode=SharingMode.VGPU,
        resource_name="nvidia.com/gpu", memory_mib=40960, compute_percent=50, gpu_equivalents=Decimal("0.5"),
    )  # fmt: skip
    flavors = {"a100": world.a100, "1g": world.mig, "3g": mig_3g, "mps": world.mps, "vgpu": vgpu}
    return Scene(world=world, cluster=cluster, nodes=nodes, flavors=flavors)


def book_everything(scene: Scene) -> None:
    """The allocations of every recorded case (names as in the tests)."""
    w = scene.world
    llm, seg, asr = w.llm, w.seg, w.speech_project
    # whole GPUs (whole-gpus.om)
    scene.grant("W1", llm, "a100", [("a100-0", 0, 1000, "", None)])
    scene.grant("W2", seg, "a100", [("a100-0", 1, 1000, "", None)])
    scene.grant("W3", seg, "a100", [("a100-0", 2, 1000, "", None)])
    scene.grant("W4", asr, "a100", [("a100-0", 3, 1000, "", None), ("a100-0", 4, 1000, "", None)])
    scene.grant("W5", llm, "a100", [("a100-0", 5, 1000, "", None)])  # not in the recording
    # MIG (mig.om): GPU instance 1 sits at slice 4, instance 2 at slice 0
    scene.grant("M_A", llm, "3g", [("a100-1", 0, 0, "3g.40gb", 4)])
    scene.grant("M_B", seg, "3g", [("a100-1", 0, 0, "3g.40gb", 0)])
    scene.grant("M_C", llm, "1g", [("a100-1", 1, 0, "1g.10gb", 0), ("a100-1", 1, 0, "1g.10gb", 1)])
    scene.grant("M_D", asr, "1g", [("a100-1", 1, 0, "1g.10gb", 2)])
    scene.grant("M_E", llm, "1g", [("a100-1", 2, 0, "1g.10gb", 0)])
    scene.grant("M_F", seg, "1g", [("a100-1", 2, 0, "1g.10gb", 1)])
    scene.grant("M_G", llm, "1g", [("a100-1", 3, 0, "1g.10gb", 0)])
    scene.grant("M_H", seg, "1g", [("a100-1", 3, 0, "1g.10gb", 1)])
    # time-slicing with per-pod copies (timeslicing.om)
    scene.grant("T_A", llm, "mps", [("h100-0", 0, 250, "", None)])
    scene.grant("T_B", seg, "mps", [("h100-0", 0, 250, "", None)])
    scene.grant("T_C", asr, "mps", [("h100-0", 0, 250, "", None)])
    # HAMi (hami.om)
    scene.grant("V_A", llm, "vgpu", [("h100-1", 0, 500, "", None)])
    scene.grant("V_B", seg, "vgpu", [("h100-1", 0, 500, "", None)])
    # dcgm-exporter 4.9+ (dcgm-4.9.om)
    scene.grant("N_A", llm, "a100", [("a100-2", 0, 1000, "", None)])
    scene.grant("N_B", seg, "a100", [("a100-2", 1, 1000, "", None)])
