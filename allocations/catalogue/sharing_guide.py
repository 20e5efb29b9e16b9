"""What each way of sharing a GPU is for, what it isolates and what it does not: shown where people
choose a flavor (the request form, the catalogue) and served by ``GET /api/v1/sharing-modes/``.

Pure data, no Django: one entry per ``allocations.models.SharingMode`` value, plus NVIDIA vGPU
(GRID / AI Enterprise), which the portal lists but cannot drive (``managed=False``). The sources
are NVIDIA's MIG user guide, MPS documentation and GPU Operator time-slicing page, the k8s device
plugin (gpu-sharing-formats.md §1), HAMi and HAMi-core (§3) and Volcano (§4); docs/sharing.md
carries the same table.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

NVIDIA_VGPU = "nvidia-vgpu"
"""The key of the unmanaged mode (not a ``SharingMode``: no flavor can have it)."""


@dataclass(frozen=True)
class ModeGuide:
    mode: str  # a SharingMode value, or NVIDIA_VGPU
    name: str
    managed: bool  # whether the portal configures it on the cluster
    purpose: str
    memory_isolation: str
    compute_isolation: str
    failure_domain: str
    requirements: tuple[str, ...]
    caveats: tuple[str, ...]
    unmanaged_reason: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {
            "mode": self.mode, "name": self.name, "managed": self.managed, "purpose": self.purpose,
            "memory_isolation": self.memory_isolation, "compute_isolation": self.compute_isolation,
            "failure_domain": self.failure_domain, "requirements": list(self.requirements),
            "caveats": list(self.caveats), "unmanaged_reason": self.unmanaged_reason,
        }  # fmt: skip


_HAMI_CORE_MEMORY = (
    "Enforced in software, not by the hardware: HAMi-core, a library preloaded into the container, intercepts "
    "CUDA's memory calls and refuses allocations beyond the unit's memory."
)
_HAMI_CORE_COMPUTE = (
    "Throttled in software: HAMi-core holds the container to its share of the GPU's cores; memory bandwidth "
    "and caches stay shared."
)
_HAMI_CORE_FAILURE = (
    "Shared: the containers run side by side on one GPU with no hardware boundary; a fault that takes the "
    "GPU down stops all of them."
)
_HAMI_CORE_CAVEATS = (
    "CUDA Graphs: kernels launched from a captured graph are not held to the core limit, so a graph-heavy "
    "job can take more than its share of compute.",
    "Unified (managed) memory and CUDA's virtual-memory calls are intercepted less reliably than plain "
    "allocations; test frameworks that use them under the limit before relying on it.",
    "nvidia-smi inside the container reports the unit's memory, not the whole GPU's.",
)

GUIDES: dict[str, ModeGuide] = {
    guide.mode: guide
    for guide in (
        ModeGuide(
            mode="exclusive",
            name="Whole GPU",
            managed=True,
            purpose="Training, benchmarking and anything that needs a whole GPU's memory and compute or "
            "predictable performance.",
            memory_isolation="Complete: the GPU's memory is yours alone.",
            compute_isolation="Complete: no other grant's work runs on the GPU.",
            failure_domain="Your own pods: no other grant uses the GPU.",
            requirements=("Any NVIDIA GPU the device plugin exposes as nvidia.com/gpu.",),
            caveats=("Counts as one GPU-equivalent for quota and accounting even while the GPU is idle.",),
        ),
        ModeGuide(
            mode="mig",
            name="MIG instance",
            managed=True,
            purpose="Production multi-tenancy: services and inference that need a guaranteed, isolated "
            "slice of a large GPU.",
            memory_isolation="In hardware: the instance has its own memory slices, cache and memory bandwidth; "
            "no other instance can use or exhaust them.",
            compute_isolation="In hardware: the instance has its own streaming multiprocessors.",
            failure_domain="The instance: an error in one instance's work does not stop the other instances on "
            "the same GPU.",
            requirements=(
                "A MIG-capable data-centre GPU of the Ampere generation or newer (compute capability 8.0 or "
                "more: A100, A30, H100, H200, B200 and others).",
                "CUDA 11 or newer, with a driver recent enough for the GPU (R450 for the A100, R525 and "
                "CUDA 12 for the H100, R550 for the H200).",
                "The node's device plugin runs the mixed MIG strategy: each instance size is its own resource "
                "(nvidia.com/mig-<profile>).",
            ),
            caveats=(
                "Fixed sizes only: the profiles the GPU offers (such as 1g.10gb or 3g.40gb), nothing in between.",
                "Changing a GPU's layout needs its instances idle: the MIG manager stops the node's GPU pods "
                "while it reconfigures, so the portal plans layout changes ahead.",
                "The Kubernetes device plugin does not combine MIG with MPS on the same GPU.",
            ),
        ),
        ModeGuide(
            mode="mps",
            name="CUDA MPS replica",
            managed=True,
            purpose="Throughput: many small, cooperating processes (inference workers, MPI ranks, sweeps) "
            "that each leave most of a GPU idle.",
            memory_isolation="Capped per client: the MPS control daemon limits each replica to the GPU's memory "
            "divided by the number of replicas; since Volta each client has its own address space.",
            compute_isolation="A share, not a partition: each replica may use at most its fraction of the "
            "streaming multiprocessors, but kernels of all replicas run on the GPU at the same time and share "
            "its caches and memory bandwidth.",
            failure_domain="Shared: a fatal GPU fault in one client is reported to every client on that GPU, "
            "and the MPS server takes no new clients there until all of them have exited.",
            requirements=(
                "Linux, and the device plugin's MPS control daemon on the node (not on MIG-enabled GPUs, not "
                "with the mixed MIG strategy).",
                "2 to 48 replicas per GPU (16 on GPUs of compute capability below 7.5).",
            ),
            caveats=(
                "Replicas are equal: each gets 1/N of the memory and compute, and a pod gets exactly one replica.",
                "One client's crash can take down the others' CUDA contexts: share a GPU this way only among "
                "workloads that can be restarted together.",
            ),
        ),
        ModeGuide(
            mode="timeslice",
            name="Time-slicing replica",
            managed=True,
            purpose="Development, notebooks, teaching and light experiments, where cost matters more than "
            "predictable performance.",
            memory_isolation="None: every replica sees the whole GPU memory; one pod can allocate it all and "
            "leave the others failing with out-of-memory errors.",
            compute_isolation="None: the replicas' processes take turns on the whole GPU, so each one's speed "
            "depends on how busy the others are.",
            failure_domain="Shared: there is no fault isolation between the replicas of a GPU.",
            requirements=(
                "Any GPU the NVIDIA device plugin supports, with the node's device plugin configured for "
                "time-slicing with the flavor's number of replicas.",
            ),
            caveats=(
                "A replica is a turn on the GPU, not a reserved share: nothing stops a neighbour from using all "
                "of the memory.",
                "Not for production services or timing measurements.",
            ),
        ),
        ModeGuide(
            mode="vgpu",
            name="HAMi vGPU",
            managed=True,
            purpose="General inference and services that need a set amount of GPU memory on a shared GPU, in "
            "sizes MIG does not offer or on GPUs without MIG.",
            memory_isolation=_HAMI_CORE_MEMORY,
            compute_isolation=_HAMI_CORE_COMPUTE,
            failure_domain=_HAMI_CORE_FAILURE,
            requirements=(
                "The cluster runs HAMi (its scheduler, admission webhook and device plugin); the portal's quotas "
                "then also carry limits.nvidia.com/gpumem and limits.nvidia.com/gpucores.",
            ),
            caveats=_HAMI_CORE_CAVEATS,
        ),
        ModeGuide(
            mode="volcano-vgpu",
            name="Volcano vGPU",
            managed=True,
            purpose="As HAMi vGPU, on clusters whose batch work is scheduled by Volcano (queues, gang "
            "scheduling).",
            memory_isolation=_HAMI_CORE_MEMORY,
            compute_isolation=_HAMI_CORE_COMPUTE,
            failure_domain=_HAMI_CORE_FAILURE,
            requirements=(
                "Volcano's scheduler with vGPU enabled in its deviceshare plugin and the volcano-vgpu device "
                "plugin (built on HAMi-core); pods name the volcano scheduler.",
                "Not together with Volcano's older gpu-share mode on the same cluster.",
            ),
            caveats=_HAMI_CORE_CAVEATS,
        ),
        ModeGuide(
            mode=NVIDIA_VGPU,
            name="NVIDIA vGPU (GRID / AI Enterprise)",
            managed=False,
            purpose="Virtual machines that each need a GPU, on hypervisors running NVIDIA's licensed vGPU "
            "software.",
            memory_isolation="Set by the vGPU profile: each virtual machine gets a fixed share of the GPU's memory.",
            compute_isolation="Set in the hypervisor, by the vGPU scheduler or by a MIG-backed profile.",
            failure_domain="The virtual machine for its guest; the physical GPU and the hypervisor's vGPU "
            "manager are shared by every virtual machine on it.",
            requirements=(
                "NVIDIA Virtual GPU Manager on each hypervisor host and a vGPU profile assigned to each worker "
                "virtual machine.",
                "Licences from the NVIDIA License System; the GPU Operator installs the licensed guest driver.",
            ),
            caveats=(
                "Unified memory works only on some vGPU profiles.",
                "A cluster of such virtual machines is served as whole GPUs: each vGPU is one nvidia.com/gpu "
                "in its guest, offered by an exclusive flavor.",
            ),
            unmanaged_reason="The portal cannot create, resize or license vGPU profiles: they are configured in "
            "the hypervisor and the NVIDIA License System, outside Kubernetes, which is all the portal drives.",
        ),
    )
}


def guide_for(mode: str) -> ModeGuide | None:
    """The guidance of a sharing mode (a flavor's ``sharing_mode``), None for an unknown one."""
    return GUIDES.get(mode)


def guides() -> list[ModeGuide]:
    """Every mode, the managed ones first, in the order above."""
    return sorted(GUIDES.values(), key=lambda guide: not guide.managed)
