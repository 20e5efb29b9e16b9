"""Row locks that leave foreign-key checks alone, on real PostgreSQL connections from real threads.

PostgreSQL checks a foreign key with a KEY SHARE lock on the row it points to: every writer of a row
that refers to a grant (a usage roll-up row, a utilisation tick row, an outbox row, ...) holds one
until it commits. FOR UPDATE conflicts with it; FOR NO KEY UPDATE does not, and still excludes every
other writer of the row. The transactions that only update allocations, departments, projects and
clusters lock them FOR NO KEY UPDATE (``kernel.locks``):

* an approval or a quota window's reclaim locks its victims with SKIP LOCKED, and used to skip a
  grant whenever a writer was inserting a row that refers to it (a 409 "being changed right now",
  or a window edge left unmet);
* adding a member to a project held the project FOR UPDATE while its new membership's check waited
  for the department, which an approval held; the approval's outbox rows then waited for the
  project: a deadlock.
"""

from __future__ import annotations

import threading

import pytest
from django.db import connection, transaction

from allocations.grants import services
from allocations.models import Allocation, AllocationState, PriorityClass
from allocations.windows.tick import quota_windows_tick
from audit.models import AuditEvent
from kernel.clock import clock_now
from kernel.locks import rows_key_share
from tenants.models import Membership
from tenants.self_service import project_member_add
from tests.concurrency.approval_pause import approval_racing, pending_request
from tests.conftest import World, requires_postgres
from tests.quotas.test_reclaim_concurrency import contested, grant, request
from tests.quotas.test_window_reclaim_retry import NEW_LIMIT, shrinking
from tests.quotas.windowing import held

pytestmark = [requires_postgres(), pytest.mark.django_db(transaction=True)]


class KeyShareHolder:
    """A writer in the middle of inserting rows that refer to the grants: a transaction on another
    connection holding their KEY SHARE locks (what its foreign-key checks take) until it ends."""

    def __init__(self, ids: list[int]) -> None:
        self.ids, self.locked, self.done = ids, threading.Event(), threading.Event()
        self.thread = threading.Thread(target=self.run)

    def run(self) -> None:
        try:
            with transaction.atomic():
                assert rows_key_share(connection, Allocation, self.ids) == set(self.ids)
                self.locked.set()
                self.done.wait(timeout=60)
        finally:
            connection.close()

    def __enter__(self) -> KeyShareHolder:
        self.thread.start()
        assert self.locked.wait(timeout=30)
        return self

    def __exit__(self, *exc: object) -> None:
        self.done.set()
        self.thread.join(timeout=30)


def test_an_approval_takes_a_victim_that_a_writer_refers_to(world: World) -> None:
    contested(world)
    PriorityClass.objects.filter(pk=world.preemptible.pk).update(preemptible=True)  # reclaimed at once
    world.preemptible.refresh_from_db()
    grant(world, "vision_member", 8, world.standard)
    borrowed = grant(world, "vision_member", 4, world.preemptible)  # acme is full: vision borrows these 4
    pending = request(world, "nlp_member", 1, world.standard)

    with KeyShareHolder([borrowed.pk]):
        approved = services.allocation_approve(actor=world.users["nlp_admin"], allocation_id=pending.pk)

    assert approved.state == AllocationState.APPROVED
    borrowed.refresh_from_db()
    assert (borrowed.state, borrowed.quantity) == (AllocationState.ACTIVE, 3)  # gave back the 1 unit that had to go
    [taken] = AuditEvent.objects.filter(action="allocation.reclaiming", target_id=str(borrowed.pk))
    assert f"request #{pending.pk}" in str(taken.details)


def test_a_window_shrink_reclaims_grants_that_a_writer_refers_to_at_its_edge(world: World) -> None:
    grants, _ = shrinking(world)
    at = clock_now()

    with KeyShareHolder([row.pk for row in grants]):
        [edge] = quota_windows_tick(now=at).applied

    assert len(edge.reclaimed) == len(grants) - NEW_LIMIT
    assert held({world.nlp.pk, world.speech.pk}, at) == NEW_LIMIT


def test_adding_a_project_member_and_an_approval_never_deadlock(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, world: World
) -> None:
    """The approval holds nlp's chain; the member's new role in nlp refers to nlp; the approval's
    outbox rows refer to the project that the member's addition locks."""
    pending = pending_request(world, project=world.llm, flavor=world.a100, persona="nlp_member")
    newcomer = world.users["nobody"]

    outcomes, retried, _ = approval_racing(
        monkeypatch, caplog, world=world, allocation_id=pending.pk, admin="nlp_admin",
        writer=lambda: project_member_add(actor=world.users["nlp_admin"], project=world.llm, user=newcomer),
    )  # fmt: skip

    assert outcomes == {"approved": 1, "written": 1}
    assert retried == []  # no transaction ran twice after a deadlock
    assert Allocation.objects.get(pk=pending.pk).state != AllocationState.PENDING
    assert world.llm.members.filter(pk=newcomer.pk).exists()
    assert Membership.objects.filter(user=newcomer, department=world.nlp).exists()
