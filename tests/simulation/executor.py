"""Each action run through the real services, as the API and the pages call them, with the actor
whose role allows it. What an action acts on is resolved now, from the rows ordered by id."""

from __future__ import annotations

import datetime
import traceback
from collections.abc import Callable
from decimal import Decimal

from django.http import Http404

from allocations.admission.why import allocation_reason
from allocations.api.preview import admission_preview
from allocations.grants import changes, services
from allocations.models import Allocation, AllocationChange
from kernel.clock import clock_now
from kernel.errors import ApplicationError
from tests.simulation.actions import Action
from tests.simulation.context import Context, Preview
from tests.simulation.faults import SimulatedCrash
from tests.simulation.ledger import HOLDING
from tests.simulation.world import ADMIN_OF, PROJECT_OF, REQUESTERS

MINUTE = datetime.timedelta(minutes=1)
QUANTITIES = {"a100": 4, "a100-1g": 7, "a100-3g": 2, "h100": 3, "h100-mps": 4, "h100-ts": 3}
CLASS_WEIGHTS = (0.1, 0.5, 0.25, 0.15)  # production, standard, preemptible, spot (the world's order)


def attempt(ctx: Context, label: str, call: Callable[[], object]) -> str:
    """Run one service call: ``ok``, ``refused:<code>`` for a documented refusal, ``crashed`` for
    the simulator's own fault, ``error`` (recorded as escaped) for anything else."""
    try:
        call()
    except ApplicationError as refusal:
        return f"refused:{refusal.code}"
    except Http404:
        return "refused:not_found"
    except SimulatedCrash:
        return "crashed"
    except Exception as error:  # noqa: BLE001 - what the invariant looks for
        ctx.notes.escaped.append(f"{label}: {error!r}\n{traceback.format_exc(limit=12)}")
        return "error"
    return "ok"


def pick(items: list[int], number: float) -> int | None:
    return items[min(int(number * len(items)), len(items) - 1)] if items else None


def _weighted(number: float, weights: tuple[float, ...]) -> int:
    total = 0.0
    for index, weight in enumerate(weights):
        total += weight
        if number < total:
            return index
    return len(weights) - 1


def _ids(**filters: object) -> list[int]:
    return list(Allocation.objects.filter(**filters).order_by("pk").values_list("pk", flat=True))


def _admin_for(ctx: Context, allocation_id: int, number: float) -> str:
    """The department admin of the grant (a platform admin one time in ten)."""
    if number < 0.1:
        return "platform"
    slug = Allocation.objects.filter(pk=allocation_id).values_list("project__slug", flat=True).get()
    requester = next(name for name, project in PROJECT_OF.items() if project == slug)
    return ADMIN_OF[requester]


def submit(ctx: Context, n: tuple[float, ...]) -> str:
    world = ctx.world
    requester = REQUESTERS[_weighted(n[0], (0.4, 0.2, 0.4))]
    flavor = world.flavors[min(int(n[1] * len(world.flavors)), len(world.flavors) - 1)]
    quantity = 1 + int(n[2] * QUANTITIES[flavor.name])
    priority_class = world.classes[_weighted(n[3], CLASS_WEIGHTS)]
    now = clock_now()
    start = None if n[4] < 0.55 else now + datetime.timedelta(minutes=30 + int(n[5] * 47 * 60))
    hours = 2 + int(n[6] ** 1.5 * 96)
    end = (start or now) + datetime.timedelta(hours=hours)
    return attempt(ctx, "allocation_request", lambda: services.allocation_request(
        actor=world.users[requester], project=world.projects[PROJECT_OF[requester]], flavor=flavor, quantity=quantity,
        priority_class=priority_class, starts_at=start, ends_at=end, justification="simulated workload",
    ))


def approve(ctx: Context, n: tuple[float, ...], *, preview: bool = True) -> str:
    allocation_id = pick(_ids(state="pending"), n[0])
    if allocation_id is None:
        return "skipped"
    actor = ctx.world.users[_admin_for(ctx, allocation_id, n[1])]
    seen: Preview | None = None
    if preview:
        label = "admission_preview"
        before = len(ctx.notes.escaped)
        body: dict[str, object] = {}
        outcome = attempt(ctx, label, lambda: body.update(admission_preview(allocation_id=allocation_id)))
        if outcome == "ok":
            victims = frozenset(int(v["allocation"]) for v in body["reclaim"])  # type: ignore[attr-defined]
            seen = Preview(allocation_id, bool(body["admitted"]), victims, body["starts"])  # type: ignore[arg-type]
        elif len(ctx.notes.escaped) > before:
            return "error"
    code = _why_code(ctx, allocation_id) if preview else None
    outcome = attempt(ctx, "allocation_approve", lambda: services.allocation_approve(
        actor=actor, allocation_id=allocation_id, comment="simulated decision"))
    if seen is not None:
        ctx.notes.previews.append((seen, outcome))
    if code is not None:
        ctx.notes.reasons.append((allocation_id, code, outcome))
    return outcome


def _why_code(ctx: Context, allocation_id: int) -> str | None:
    """Why the request waits, as GET …/why/ would say just before the approval (docs/pending.md)."""
    found: list[str] = []

    def read() -> None:
        allocation = Allocation.objects.select_related("project", "flavor", "priority_class", "cluster").get(
            pk=allocation_id)
        found.append(allocation_reason(allocation=allocation).code.value)

    return found[0] if attempt(ctx, "allocation_reason", read) == "ok" else None


def reject(ctx: Context, n: tuple[float, ...]) -> str:
    allocation_id = pick(_ids(state="pending"), n[0])
    if allocation_id is None:
        return "skipped"
    actor = ctx.world.users[_admin_for(ctx, allocation_id, n[1])]
    return attempt(ctx, "allocation_reject", lambda: services.allocation_reject(
        actor=actor, allocation_id=allocation_id, comment="not now"))


def _owner(allocation_id: int) -> str:
    slug = Allocation.objects.filter(pk=allocation_id).values_list("project__slug", flat=True).get()
    return next(name for name, project in PROJECT_OF.items() if project == slug)


def release(ctx: Context, n: tuple[float, ...]) -> str:
    allocation_id = pick(_ids(state__in=[*HOLDING, "pending"]), n[0])
    if allocation_id is None:
        return "skipped"
    actor = ctx.world.users[_owner(allocation_id) if n[1] < 0.8 else _admin_for(ctx, allocation_id, 1.0)]
    return attempt(ctx, "allocation_release", lambda: services.allocation_release(actor=actor, allocation_id=allocation_id))


def renew(ctx: Context, n: tuple[float, ...]) -> str:
    allocation_id = pick(_ids(state__in=[*(HOLDING - {"reclaiming"}), "pending"]), n[0])
    if allocation_id is None:
        return "skipped"
    ends_at = Allocation.objects.values_list("ends_at", flat=True).get(pk=allocation_id)
    hours = 1 + int(n[1] ** 2 * (24 * 20))  # beyond the self-service 14 days now and then
    return attempt(ctx, "allocation_renew", lambda: changes.allocation_renew(
        actor=ctx.world.users[_owner(allocation_id)], allocation_id=allocation_id,
        ends_at=ends_at + datetime.timedelta(hours=hours), justification="more time"))


def resize(ctx: Context, n: tuple[float, ...]) -> str:
    allocation_id = pick(_ids(state__in=list(HOLDING - {"reclaiming"})), n[0])
    if allocation_id is None:
        return "skipped"
    quantity = Allocation.objects.values_list("quantity", flat=True).get(pk=allocation_id)
    new = max(1, quantity - 1 - int(n[2] * quantity)) if n[1] < 0.5 else quantity + 1 + int(n[2] * 2)
    if new == quantity:
        return "skipped"
    return attempt(ctx, "allocation_resize", lambda: changes.allocation_resize(
        actor=ctx.world.users[_owner(allocation_id)], allocation_id=allocation_id, quantity=new))


def change_decide(ctx: Context, n: tuple[float, ...]) -> str:
    pending = list(AllocationChange.objects.filter(state="pending").order_by("pk").values_list("pk", "allocation_id"))
    if not pending:
        return "skipped"
    change_id, allocation_id = pending[min(int(n[0] * len(pending)), len(pending) - 1)]
    actor = ctx.world.users[_admin_for(ctx, allocation_id, n[1])]
    if n[2] < 0.8:
        return attempt(ctx, "allocation_change_approve", lambda: changes.allocation_change_approve(
            actor=actor, change_id=change_id))
    return attempt(ctx, "allocation_change_reject", lambda: changes.allocation_change_reject(
        actor=actor, change_id=change_id, comment="no"))


def amount(value: float, low: int, high: int) -> Decimal:
    return Decimal(low + int(value * (high - low + 1)))


HANDLERS: dict[str, Callable[[Context, tuple[float, ...]], str]] = {
    "submit": submit, "approve": approve, "reject": reject, "release": release, "renew": renew, "resize": resize,
    "change_decide": change_decide,
}


def run_plain(ctx: Context, action: Action) -> str:
    from tests.simulation.executor_more import MORE_HANDLERS

    handler = HANDLERS.get(action.kind) or MORE_HANDLERS[action.kind]
    return handler(ctx, action.numbers)
