"""Which grant a held device belongs to, by the rule that never attributes wrongly: the pod's
namespace is the tenant namespace the portal created for a project (its slug), and that project
holds a live grant booked on the device's GPU. Anything else is said as it is: no grant, another
project's GPU, or several candidate grants (``ambiguous``, attributed to none of them).
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass

from django.db.models import Q

from allocations.models import Reservation
from clusters.models import Gpu, Node
from custody.models import Attribution
from tenants.models import Project


@dataclass(frozen=True)
class Booking:
    allocation_id: int
    project_id: int
    department_id: int
    gpu_indices: frozenset[int]
    booked_at: datetime.datetime


@dataclass(frozen=True)
class Grant:
    attribution: str
    allocation_id: int | None
    project_id: int | None
    department_id: int | None


@dataclass(frozen=True)
class NodeBookings:
    """What the node's GPUs are booked to now, read once per report."""

    bookings: tuple[Booking, ...]
    gpu_index: dict[str, int]  # GPU UUID -> index on the node
    projects: dict[str, tuple[int, int]]  # namespace -> (project id, department id)

    def on_gpu(self, gpu_uuid: str) -> list[Booking]:
        index = self.gpu_index.get(gpu_uuid)
        return [booking for booking in self.bookings if index is not None and index in booking.gpu_indices]


def node_bookings_read(*, node: Node, at: datetime.datetime, namespaces: set[str]) -> NodeBookings:
    """The bookings that held at ``at``: booked by then, not yet released, the grant begun."""
    rows = Reservation.objects.filter(
        Q(released_at__isnull=True) | Q(released_at__gt=at), node=node, created_at__lte=at, allocation__starts_at__lte=at,
    ).values_list("allocation_id", "allocation__project_id", "allocation__project__department_id", "gpu_indices",
                  "created_at")  # fmt: skip
    bookings = tuple(
        Booking(allocation_id=a, project_id=p, department_id=d, gpu_indices=frozenset(i or []), booked_at=c)
        for a, p, d, i, c in rows
    )
    gpu_index = {uuid: index for uuid, index in Gpu.objects.filter(node=node).exclude(uuid="").values_list("uuid", "index")}
    projects = {
        slug: (pk, department)
        for slug, pk, department in Project.objects.filter(slug__in=namespaces).values_list("slug", "pk", "department_id")
    } if namespaces else {}
    return NodeBookings(bookings=bookings, gpu_index=gpu_index, projects=projects)


def grant_for(*, bookings: NodeBookings, namespace: str, gpu_uuid: str) -> Grant:
    project = bookings.projects.get(namespace)
    on_gpu = bookings.on_gpu(gpu_uuid)
    project_id, department_id = project if project else (None, None)
    own = sorted({booking.allocation_id for booking in on_gpu if booking.project_id == project_id})
    if project_id is not None and len(own) == 1:
        return Grant(Attribution.GRANTED, own[0], project_id, department_id)
    if project_id is not None and len(own) > 1:
        return Grant(Attribution.AMBIGUOUS, None, project_id, department_id)
    others = [booking for booking in on_gpu if booking.project_id != project_id]
    if others:
        return Grant(Attribution.FOREIGN, None, project_id, department_id)
    return Grant(Attribution.UNGRANTED, None, project_id, department_id)
