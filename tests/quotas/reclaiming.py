"""Helpers for the reclaim tests: quotas in GPU-equivalents only, requests asked and decided by the
department's personas through the services, and the time a notice runs out."""

from __future__ import annotations

import datetime
from decimal import Decimal

from allocations.grants import services
from allocations.models import Allocation, Flavor, PreemptionPolicy, PriorityClass, Quota
from kernel.clock import clock_now
from tests.conftest import World

ADMINS = {"nlp_member": "nlp_admin", "vision_member": "vision_admin", "speech_member": "nlp_admin"}
PROJECTS = {"nlp_member": "llm", "vision_member": "seg", "speech_member": "speech_project"}


def quotas(world: World, *, acme: str, nlp: tuple[str, str], vision: tuple[str, str]) -> None:
    """Only GPU-equivalent quotas: ``acme``'s limit, and (guaranteed, limit) of nlp and vision."""
    Quota.objects.all().delete()
    Quota.objects.create(department=world.acme, flavor=None, guaranteed=Decimal(0), limit=Decimal(acme))
    for department, (guaranteed, limit) in ((world.nlp, nlp), (world.vision, vision)):
        Quota.objects.create(department=department, flavor=None, guaranteed=Decimal(guaranteed), limit=Decimal(limit))


def production() -> PriorityClass:
    return PriorityClass.objects.create(name="gpu-production", value=100000,
                                        preemption_policy=PreemptionPolicy.PREEMPT_LOWER_PRIORITY, notice_minutes=60)


def asked(world: World, persona: str, quantity: int, *, flavor: Flavor | None = None,
          priority: PriorityClass | None = None) -> Allocation:
    start = clock_now()
    return services.allocation_request(
        actor=world.users[persona], project=getattr(world, PROJECTS[persona]), flavor=flavor or world.a100,
        quantity=quantity, priority_class=priority or world.standard, starts_at=start,
        ends_at=start + datetime.timedelta(days=1), justification="experiment",
    )


def decided(world: World, pending: Allocation) -> Allocation:
    persona = next(name for name, user in world.users.items() if user.pk == pending.requested_by_id)
    return services.allocation_approve(actor=world.users[ADMINS[persona]], allocation_id=pending.pk)


def granted(world: World, persona: str, quantity: int, *, flavor: Flavor | None = None,
            priority: PriorityClass | None = None) -> Allocation:
    return decided(world, asked(world, persona, quantity, flavor=flavor, priority=priority))


def after_notice(minutes: int = 16) -> datetime.datetime:
    return clock_now() + datetime.timedelta(minutes=minutes)
