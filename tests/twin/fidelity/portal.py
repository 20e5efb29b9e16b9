"""The twin's decisions made again by the portal's services, one after another at the same virtual
instants (docs/twin.md, "Fidelity"), each compared with what the twin decided.

For each line of the twin's log (``twin.replay.decisions``): ``submit`` notes how many units the
request asks (a workload line, or what a reclaim sent back); ``start``, ``reclaim`` and
``refused`` make the request now (``allocation_request`` by its department's member, its period
the line's ``requested_s`` from now) and ask ``allocation_approve`` of a platform admin, then compare: admitted or
refused and why (``QuotaExceeded`` is ``quota``, ``CapacityExceeded`` ``capacity``), where each
unit was booked (the live reservations: node, GPU indices, thousandths, and a MIG instance's
profile and first memory slice), whether it starts now or
waits for its victims, and which grants a reclaim takes and how many units of each (the
approval's audit event); a refused request is withdrawn and made again at the twin's next try.
``end`` asks ``allocation_release`` of the requester (a run ends at its runtime); ``leave`` and
``begin`` run the timeline task (``allocations_timeline_task``, what beat runs: reclaims whose
notice ran out finish, the grants they made room for start) and compare the states it leaves.
With fair share, the tick (``fair_share_tick``) runs at every instant before its first decision,
and ``rank`` compares the departments' order by the portal's factors (``fair_share_factors``, the
approvals queue's and the victim choice's) with the order the twin's pass tried them in. At a
``window`` edge, the tick's numbers from then and what a lower limit of shrink policy ``reclaim``
took back (the edge's ``reclaimed``: request and units of each grant); ``shrink``, a reclaim the
tick met later (``quota_window.reclaim_met``).
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field
from decimal import Decimal

from allocations.fair_share.reads import fair_share_factors
from allocations.fair_share.services import fair_share_tick
from allocations.grants import services
from allocations.models import Allocation, AllocationState, Reservation
from allocations.models.windows import QuotaWindowEdge
from allocations.tasks import allocations_timeline_task
from audit import actions
from audit.models import AuditEvent
from kernel.clock import clock_now, clock_set
from kernel.errors import ApplicationError, CapacityExceeded, QuotaExceeded
from tests.twin.fidelity.case import START as EPOCH
from tests.twin.fidelity.idle import IdleTicks
from tests.twin.fidelity.world import PortalWorld
from twin.replay.decisions import (
    BEGIN,
    IDLE_ACT,
    IDLE_END,
    IDLE_WARN,
    LEAVE,
    RANK,
    RECLAIM,
    REFUSED,
    SHRINK,
    START,
    SUBMIT,
    WINDOW,
    Decision,
    Unit,
    fair_share_order,
)
from twin.replay.decisions import END as RUN_END
from twin.workload import Job


@dataclass
class Comparison:
    compared: dict[str, int] = field(default_factory=dict)
    differences: list[str] = field(default_factory=list)

    def count(self, kind: str) -> None:
        self.compared[kind] = self.compared.get(kind, 0) + 1


class PortalReplay:
    def __init__(self, world: PortalWorld, jobs: list[Job]) -> None:
        self.world = world
        self.jobs = {job.line: job for job in jobs}
        self.allocations: dict[int, int] = {}  # piece -> allocation id
        self.pieces: dict[int, int] = {}  # allocation id -> piece
        self.result = Comparison()
        self._ticked: float | None = None
        self.quantities: dict[int, int] = {}  # piece -> the units it asks
        self.notice_s: dict[int, int] = {}  # piece -> the notice its class gives a reclaimed grant
        self.held_units: dict[int, int] = {}  # piece -> the units it holds (booked)
        self._fair_ticked: float | None = None
        self.idle: IdleTicks | None = None  # the idle evaluation's ticks, where the case has idle policies
        self.pending: dict[int, int] = {}  # piece -> its request made ahead (at its submission), not yet admitted
        self.scheduled: set[int] = set()  # pieces approved ahead of their start, not begun

    def run(self, log: list[Decision]) -> Comparison:
        handlers = {SUBMIT: self._submit, START: self._decide, RECLAIM: self._decide, REFUSED: self._decide,
                    RUN_END: self._end, LEAVE: self._timeline, BEGIN: self._timeline, RANK: self._rank,
                    IDLE_WARN: self._idle_move, IDLE_ACT: self._idle_move, IDLE_END: self._timeline,
                    WINDOW: self._window, SHRINK: self._shrink}
        if self.world.idle:
            self.idle = IdleTicks(self.world, EPOCH, log, self.pieces)
        for decision in log:
            if self.idle is not None:
                self.result.differences.extend(self.idle.until(decision))
                if self.result.differences:
                    break
            clock_set(EPOCH + datetime.timedelta(seconds=decision.at))
            if self.world.fair_share and decision.kind in (START, RECLAIM, REFUSED, RANK) and self._fair_ticked != decision.at:
                fair_share_tick(now=clock_now())  # usage up to now, before anything is decided now
                self._fair_ticked = decision.at
            try:
                handlers[decision.kind](decision)
            except ApplicationError as error:
                self._differ(decision, f"the portal refused the step: {error.message}")
            if self.result.differences:
                break  # past the first difference the two replays no longer hold the same grants
        return self.result

    def _differ(self, decision: Decision, text: str) -> None:
        self.result.differences.append(
            f"t={decision.at:.0f}s line {decision.line} (request {decision.piece}) {decision.kind}: {text}")

    def _submit(self, decision: Decision) -> None:
        """Notes the units the request asks; one booked ahead (``ahead``) is made now, for its own
        period, and each try of the twin's approves it again."""
        self.quantities[decision.piece] = decision.quantity
        if decision.ahead is not None:
            self.pending[decision.piece] = self._make(decision, starts=decision.ahead)
        self.result.count(SUBMIT)

    def _request(self, decision: Decision) -> int:
        """The request the twin tries: the one made ahead and still pending, else one made now,
        for the units the twin tries, over the period its line asks (from now until
        ``requested_s`` later: the twin weighs it over the same period)."""
        pending = self.pending.get(decision.piece)
        return pending if pending is not None else self._make(decision, starts=None)

    def _make(self, decision: Decision, *, starts: float | None) -> int:
        job, world = self.jobs[decision.line], self.world
        assert job.flavor is not None
        begin = None if starts is None else EPOCH + datetime.timedelta(seconds=starts)
        allocation = services.allocation_request(
            actor=world.requesters[job.department], project=world.projects[job.department],
            flavor=world.flavors[job.flavor], quantity=self.quantities[decision.piece],
            priority_class=world.classes[job.priority_class], starts_at=begin,
            ends_at=(begin or clock_now()) + datetime.timedelta(seconds=job.requested_s),
            justification=f"workload line {job.line}",
        )
        self.allocations[decision.piece] = allocation.pk
        self.pieces[allocation.pk] = decision.piece
        self.notice_s[decision.piece] = world.classes[job.priority_class].notice * 60
        return allocation.pk

    def _expire_pending(self) -> None:
        """Requests booked ahead and never admitted expire once their period has ended, as the
        timeline task (every 30 seconds under beat) expires them; until then the portal counts
        them as asked for (``placement_workload``), as the twin does."""
        for piece, allocation_id in list(self.pending.items()):
            if services.allocation_expire(allocation_id=allocation_id, now=clock_now()):
                del self.pending[piece]

    def _decide(self, decision: Decision) -> None:
        self._expire_pending()
        allocation_id = self._request(decision)
        self.result.count(decision.kind)
        try:
            services.allocation_approve(actor=self.world.decider, allocation_id=allocation_id, comment="fidelity")
        except (QuotaExceeded, CapacityExceeded) as refusal:
            if decision.piece not in self.pending:
                self._withdraw(decision, allocation_id)
            return self._refused(decision, "quota" if isinstance(refusal, QuotaExceeded) else "capacity",
                                 refusal.message)
        if decision.kind == REFUSED:
            return self._differ(decision, f"the twin refused it ({decision.reason}); the portal admitted it, placed on "
                                          f"{_words(self._units(allocation_id))}, victims (request, units) "
                                          f"{self._victims(allocation_id)}")
        self.pending.pop(decision.piece, None)
        state = Allocation.objects.values_list("state", flat=True).get(pk=allocation_id)
        waits = decision.kind == RECLAIM and any(self.notice_s[victim] for victim, _ in decision.victims
                                                 if victim not in self.scheduled)  # approved ahead: taken at once
        ahead = decision.ahead is not None and decision.ahead > decision.at
        expected = AllocationState.SCHEDULED if waits or ahead else AllocationState.APPROVED
        self._scheduled_taken(decision)
        if ahead:
            self.scheduled.add(decision.piece)
        if state != expected:
            self._differ(decision, f"the portal left it {state}, the twin {expected}")
        units = self._units(allocation_id)
        self.held_units[decision.piece] = len(units)
        if units != decision.units:
            self._differ(decision, f"placed on {_words(units)} by the portal, on {_words(decision.units)} by the twin")
        if self.idle is not None and expected == AllocationState.APPROVED:
            self._activate(decision, allocation_id)
        victims = self._victims(allocation_id)
        if victims != tuple(sorted(decision.victims)):
            self._differ(decision, f"victims (request, units) {victims} by the portal, {tuple(sorted(decision.victims))} "
                                   "by the twin")
        return None

    def _scheduled_taken(self, decision: Decision) -> None:
        """Units a reclaim takes from grants approved ahead are gone at once."""
        for victim, units in decision.victims:
            if victim in self.scheduled:
                self.held_units[victim] -= units
                if self.held_units[victim] <= 0:
                    self.scheduled.discard(victim)

    def _activate(self, decision: Decision, allocation_id: int) -> None:
        assert self.idle is not None
        self.idle.activate(allocation_id, decision.piece, self.jobs[decision.line], self.quantities[decision.piece],
                           decision.at)

    def _idle_move(self, decision: Decision) -> None:
        """Compared at the evaluation's tick (``IdleTicks.until``): counted here."""
        self.result.count(decision.kind)

    def _withdraw(self, decision: Decision, allocation_id: int) -> None:
        """A refused request is withdrawn: the twin's waiting request is asked again at its next try."""
        job = self.jobs[decision.line]
        services.allocation_release(actor=self.world.requesters[job.department], allocation_id=allocation_id)

    def _refused(self, decision: Decision, reason: str, message: str) -> None:
        if decision.kind != REFUSED:
            self._differ(decision, f"the twin admitted it ({decision.kind}); the portal refused it: {message}")
        elif decision.reason != reason:
            self._differ(decision, f"refused for {reason} by the portal ({message}), for {decision.reason} by the twin")

    def _units(self, allocation_id: int) -> tuple[Unit, ...]:
        rows = Reservation.objects.filter(allocation_id=allocation_id, released_at=None).order_by("unit")
        return tuple(Unit(row.node.name, tuple(row.gpu_indices), row.gpu_milli,
                          (row.mig_profile, row.mig_start) if row.mig_profile and row.mig_start is not None else None)
                     for row in rows.select_related("node"))

    def _victims(self, allocation_id: int) -> tuple[tuple[int, int], ...]:
        """What the approval's audit event says it reclaimed: (request, units) of each grant."""
        details = AuditEvent.objects.filter(action=actions.ALLOCATION_APPROVED.code, target_id=str(allocation_id)).get().details
        return tuple(sorted((self.pieces[int(v["allocation"])], int(v["units"])) for v in details.get("reclaimed", [])))

    def _end(self, decision: Decision) -> None:
        job = self.jobs[decision.line]
        services.allocation_release(actor=self.world.requesters[job.department],
                                    allocation_id=self.allocations[decision.piece])
        if self.idle is not None:
            self.idle.stop(self.allocations[decision.piece])
        self.result.count(RUN_END)

    def _rank(self, decision: Decision) -> None:
        """The departments in the order the approvals queue puts their requests (the highest
        factor first), as the twin's pass tried them."""
        self.result.count(RANK)
        factors = fair_share_factors(now=clock_now())
        index = {name: department.pk for name, department in self.world.departments.items()}
        order = fair_share_order({pk: factors.get(pk, 1.0) for pk in index.values()}, index)
        if order != decision.order:
            self._differ(decision, f"fair-share order {_order_words(order)} in the portal, "
                                   f"{_order_words(decision.order)} in the twin")

    def _window(self, decision: Decision) -> None:
        """A window's edge: the tick (first in the timeline task) records the department's
        effective numbers from now on (or, for a window of one class, the class's share's, on
        the edges of that class's windows); they must be the twin's."""
        assert decision.quota is not None
        if self._ticked != decision.at:
            allocations_timeline_task()
            self._ticked = decision.at
        self.result.count(WINDOW)
        name, guaranteed, limit = decision.quota
        edges = QuotaWindowEdge.objects.filter(at=clock_now(), window__quota__department=self.world.departments[name])
        edges = (edges.filter(window__priority_class__name=decision.share) if decision.share is not None
                 else edges.filter(window__priority_class__isnull=True))
        edges = (edges.filter(window__quota__flavor__name=decision.flavor) if decision.flavor is not None
                 else edges.filter(window__quota__flavor__isnull=True))
        found = [(Decimal(edge.after["guaranteed"]), Decimal(edge.after["limit"])) for edge in edges]
        if found != [(guaranteed, limit)]:
            whose = f"{name}'s quota" + (f" of {decision.flavor}" if decision.flavor is not None else "")
            whose += f" ({decision.share}'s share)" if decision.share is not None else ""
            self._differ(decision, f"{whose} from now (guaranteed, limit): {found} in the portal, "
                                   f"{(guaranteed, limit)} in the twin")
        self._compare_taken_back(decision, [pk for edge in edges for pk in edge.reclaimed],
                                 pending=any(edge.reclaim_pending for edge in edges))

    def _shrink(self, decision: Decision) -> None:
        """A shrink's reclaim the twin met after its edge: the tick takes up the pending reclaim."""
        assert decision.quota is not None
        if self._ticked != decision.at:
            allocations_timeline_task()
            self._ticked = decision.at
        self.result.count(SHRINK)
        met = AuditEvent.objects.filter(action=actions.QUOTA_WINDOW_RECLAIM_MET.code, occurred_at=clock_now())
        self._compare_taken_back(decision, [int(pk) for event in met for pk in event.details.get("reclaimed", [])],
                                 pending=False)

    def _compare_taken_back(self, decision: Decision, taken: list[int], *, pending: bool) -> None:
        """What a window's lower limit took back: (request, units) of each grant, as the twin's."""
        rows = Allocation.objects.filter(pk__in=taken).values_list("pk", "state", "reclaim_units", "quantity")
        found = tuple(sorted((self.pieces[pk], self._given_back(self.pieces[pk], state, units, quantity))
                             for pk, state, units, quantity in rows))
        if pending and not decision.victims:
            return  # both wait: grants in the way could not be taken at the edge
        if found != tuple(sorted(decision.victims)) or pending:
            self._differ(decision, f"taken back (request, units) {found}{' (pending)' if pending else ''} by the "
                                   f"portal, {tuple(sorted(decision.victims))} by the twin")

    def _given_back(self, piece: int, state: str, reclaim_units: int | None, quantity: int) -> int:
        """The units a reclaim takes from a grant: those it marked (``reclaim_units``, running out
        their notice), all it holds (the whole grant), or, for a partial reclaim without notice,
        already done, what it no longer holds (the grant keeps its state and the rest)."""
        if reclaim_units:
            return reclaim_units
        held = self.held_units[piece]
        if state in (AllocationState.RECLAIMING, AllocationState.RECLAIMED):
            return held
        return held - quantity

    def _timeline(self, decision: Decision) -> None:
        if self._ticked != decision.at:
            allocations_timeline_task()
            self._ticked = decision.at
        self.result.count(decision.kind)
        allocation = Allocation.objects.get(pk=self.allocations[decision.piece])
        if decision.kind == BEGIN:
            self.scheduled.discard(decision.piece)
        if decision.kind == BEGIN and allocation.state not in (AllocationState.APPROVED, AllocationState.ACTIVE):
            self._differ(decision, f"the twin starts it now; the portal left it {allocation.state}")
        elif decision.kind == BEGIN and self.idle is not None:
            self._activate(decision, allocation.pk)
        if decision.kind == IDLE_END:
            if self.idle is not None:
                self.idle.stop(allocation.pk)
            if allocation.state != AllocationState.RECLAIMED:
                self._differ(decision, f"the twin ends it (an idle policy reclaimed it); the portal left it {allocation.state}")
        if decision.kind == LEAVE:
            self.held_units[decision.piece] -= decision.quantity
            live = Reservation.objects.filter(allocation_id=allocation.pk, released_at=None).count()
            if live != self.held_units[decision.piece]:
                self._differ(decision, f"the victim holds {live} units in the portal, "
                                       f"{self.held_units[decision.piece]} in the twin once its notice ended")


def _order_words(order: tuple[tuple[str, ...], ...]) -> str:
    return " > ".join("=".join(group) for group in order)


def _words(units: tuple[Unit, ...]) -> str:
    return ", ".join(f"{u.node}/gpu{'+'.join(map(str, u.gpus))}" + (f":{u.mig[0]}@{u.mig[1]}" if u.mig else f":{u.milli}")
                     for u in units) or "nothing"
