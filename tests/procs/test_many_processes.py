"""Property: two real web processes and four real Celery worker processes keep correct state
(issue 38, "Many processes"; docs/scale.md, "Many processes").

The placement state each process keeps (``allocations.booking.state``, ``kept_views``) is checked
within one process by ``tests/placement/test_kept_state.py``, which swaps two simulated processes'
caches in and out. Here the processes are real: two gunicorn processes (one worker, two threads
each) and two Celery workers (a prefork pool of two each) on PostgreSQL and Redis, the manifests
driver writing into one folder. Three client threads, one per team, drive a seeded random
sequence of submits, approvals (which place, and reclaim preemptible grants where the rules allow),
releases and extensions, each request to the other web process than the one before.

Checked, by counts and never by times:

* no GPU over-booked: the simulator's capacity invariant (``tests/simulation/invariants_capacity``)
  on a consistent snapshot of the database every few steps while the clients run, and at the end;
* after quiescence, each web process's kept state equals a fresh rebuild from the database, its
  pictures too (``GET /test-only/kept-state/``, served only under ``tests/procs/settings.py``), and
  each process had kept one (it brought a state forward across the other process's writes);
* every approval's push reached the manifests folder: no push pending or failed, no approved grant
  left before ``active``, and a full plan against the folder finds nothing to change.

``GPUPORTAL_PROCS_SEED=N`` replays a seed's intentions (the interleaving is the processes' own);
a failure names its seed.
"""

from __future__ import annotations

import json
import os
import threading
import urllib.request
import uuid
from collections import Counter
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from django.db.models import Max

from allocations.catalogue.states import HOLDING_STATES
from allocations.models import Allocation, AllocationState, PriorityClass, Quota
from audit import actions
from audit.models import AuditEvent
from clusters.models import ClusterPush, Node, NodeSharing, PushState
from delivery.services import cluster_plan, cluster_sync
from tenants.auth import auth_token_issue
from tests.conftest import World, build_world, requires_postgres
from tests.procs.capacity import CapacityWatch
from tests.procs.clients import Client, Tally, Team
from tests.procs.processes import Fleet, fleet_running
from tests.procs.quiet import Quiet, quiescence_wait

pytestmark = [pytest.mark.django_db(transaction=True), requires_postgres()]
SEED = int(os.environ.get("GPUPORTAL_PROCS_SEED", "20261205"))
STEPS = 18
"""Operations per client thread."""


@pytest.fixture
def broker_url() -> Iterator[str]:
    """Redis: the suite's (``GPUPORTAL_TEST_REDIS_URL``, ``scripts/services.sh``), else one of the test's own."""
    url = os.environ.get("GPUPORTAL_TEST_REDIS_URL")
    if url:
        yield url
        return
    import shutil

    from tests.clusters.test_worker_delivery import Redis

    if shutil.which("redis-server") is None:
        if os.environ.get("GPUPORTAL_REQUIRE_POSTGRES") == "1":
            pytest.fail("neither GPUPORTAL_TEST_REDIS_URL nor redis-server (scripts/services.sh provides both)")
        pytest.skip("needs Redis: GPUPORTAL_TEST_REDIS_URL or redis-server")
    server = Redis()
    server.start()
    yield server.url
    server.stop()


def teams(world: World) -> list[Team]:
    standard = world.standard.pk
    PriorityClass.objects.filter(pk=world.preemptible.pk).update(preemptible=True)  # reclaimed at once
    token = {name: auth_token_issue(user=world.users[name]).key
             for name in ("nlp_member", "nlp_admin", "speech_member", "vision_member", "vision_admin")}
    preemptible = world.preemptible.pk
    return [
        Team("nlp", token["nlp_member"], token["nlp_admin"], world.llm.pk, (world.a100.pk, world.mig.pk, world.mps.pk),
             standard, preemptible),
        Team("speech", token["speech_member"], token["nlp_admin"], world.speech_project.pk, (world.a100.pk, world.mig.pk),
             standard, preemptible),
        Team("vision", token["vision_member"], token["vision_admin"], world.seg.pk, (world.h100.pk,), standard, preemptible,
             opens_with_reclaim=True),
    ]


def tighten(world: World) -> None:
    """Quotas a few approvals fill: refusals, and reclaims of preemptible grants, come early."""
    Quota.objects.filter(department=world.nlp, flavor=None).update(limit=Decimal(6))
    Quota.objects.filter(department=world.vision, flavor=world.h100).update(limit=Decimal(4))


def drive(fleet: Fleet, world: World, watch: CapacityWatch) -> Tally:
    """The client threads, each its own seed, until each has made its steps."""
    tally = Tally()

    def after_step() -> None:
        with tally.lock:
            tally.steps += 1
            due = tally.steps % 5 == 0
        if due:
            watch.request()

    clients = [Client(team, servers=fleet.web, seed=SEED * 10 + number, tally=tally, offset=number)
               for number, team in enumerate(teams(world))]
    threads = [threading.Thread(target=client.run, args=(STEPS,), kwargs={"after_step": after_step}) for client in clients]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    assert not any(thread.is_alive() for thread in threads), f"seed {SEED}: a client is still running"
    return tally


def kept_state_reports(fleet: Fleet) -> list[dict[str, Any]]:
    """Each web process's own check of its kept state, twice: the first brings forward the state it
    kept through the run, the second asks again with other subsets and exclusions."""
    reports = []
    for base in fleet.web:
        for call in range(2):
            with urllib.request.urlopen(f"{base}/test-only/kept-state/?seed={SEED + call}", timeout=120) as answer:  # noqa: S310
                reports.append(json.loads(answer.read()))
    return reports


def test_two_web_processes_and_four_workers_keep_the_placement_state_correct(
    tmp_path: Path, settings: Any, broker_url: str
) -> None:
    print(f"many processes: seed {SEED} (GPUPORTAL_PROCS_SEED={SEED} replays it)")  # noqa: T201 - shown on failure
    world = build_world(a100_gpus=16, h100_gpus=16)
    Node.objects.filter(name="h100-1").update(sharing=NodeSharing.MPS, sharing_replicas=4)
    tighten(world)
    since = audit_top()
    settings.GPUPORTAL_MANIFESTS_DIR = tmp_path / "manifests"
    cluster_sync(cluster_id=world.cluster.pk)  # the folder starts as the portal wants it
    queue = f"procs-{uuid.uuid4().hex[:8]}"
    (tmp_path / "logs").mkdir()
    watch = CapacityWatch()
    with fleet_running(logs=tmp_path / "logs", broker_url=broker_url, queue=queue, manifests=tmp_path / "manifests",
                       web=2, workers=2, pool=2) as fleet:
        with watch.running():
            tally = drive(fleet, world, watch)
        quiet = quiescence_wait(broker_url=broker_url, queue=queue)
        reports = kept_state_reports(fleet)
        logs = f"{fleet.errors()}\n{fleet.log_tails()}"
    states = dict(Counter(Allocation.objects.values_list("state", flat=True)))
    forwarded = [(c.get("held_version"), c.get("version")) for report in reports for c in report["clusters"]]
    print(f"answers {dict(sorted(tally.answers.items()))}; final states {states}; reclaim events {reclaims(since)}; snapshots checked "  # noqa: T201
          f"{watch.checked}; {quiet}; kept versions (held, current) {forwarded}")
    found = [*watch.found, *(("capacity at the end", text) for _, text in watch.final())]
    found += [("server error", text) for text in tally.server_errors]
    found += kept_state_findings(reports) + delivery_findings(tally, quiet, world, tmp_path / "manifests", since=since)
    assert not found, f"seed {SEED}: {found}\n{logs}"
    assert watch.checked >= 5, watch.checked
    assert tally.answers["approve 200"] >= 6 and tally.answers["release 200"] >= 3, f"seed {SEED}: {tally.answers}"
    assert tally.answers["extend 200"] >= 3, f"seed {SEED}: {tally.answers}"
    assert reclaims(since) >= 1, f"seed {SEED}: no grant was reclaimed"


def kept_state_findings(reports: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """What the web processes found of their own kept states; each must have kept one."""
    found = [("processes", f"{len({report['pid'] for report in reports})} web processes answered, not 2")]
    found = found if len({report["pid"] for report in reports}) != 2 else []
    for report in reports:
        for cluster in report["clusters"]:
            found += [(f"kept state of process {report['pid']}", text) for text in cluster["differences"]]
            if "held_version" in cluster and cluster["held_version"] is None:
                found.append((f"kept state of process {report['pid']}", "it kept none"))
    return found


def delivery_findings(tally: Tally, quiet: Quiet, world: World, manifests: Path, *, since: int) -> list[tuple[str, str]]:
    """Every approval's push reached the manifests folder."""
    found = [] if quiet.settled else [("quiescence", str(quiet))]
    found += [("push", str(push)) for push in ClusterPush.objects.exclude(state=PushState.DONE)]
    found += [("approval not active", f"#{pk} {state}") for pk, state in Allocation.objects.filter(
        pk__in=tally.approved, state__in=[AllocationState.APPROVED, AllocationState.PROVISIONING]).values_list("pk", "state")]
    found += [("approval never activated", f"#{pk}") for pk in undelivered(tally.approved, since=since)]
    found += [("manifests folder", f"would {change.action} {change.kind} {change.namespace}/{change.name}")
              for change in cluster_plan(cluster_id=world.cluster.pk).changes]
    on_cluster = HOLDING_STATES - {AllocationState.SCHEDULED}  # a scheduled grant reaches the cluster at its start
    for slug in Allocation.objects.filter(state__in=on_cluster).values_list("project__slug", flat=True).distinct():
        if not (manifests / world.cluster.name / "namespaces" / slug).is_dir():
            found.append(("manifests folder", f"no namespace {slug}"))
    return found


def reclaims(since: int) -> int:
    """Grants (all of them or some units) taken to make room for another request, in audit events
    after ``since`` (the audit log outlives each test's flush)."""
    return AuditEvent.objects.filter(seq__gt=since, action__in=[actions.ALLOCATION_RECLAIMING.code,
                                                                 actions.ALLOCATION_RECLAIMED.code]).count()


def audit_top() -> int:
    return int(AuditEvent.objects.aggregate(top=Max("seq"))["top"] or 0)


def undelivered(approved: dict[int, str], *, since: int) -> list[int]:
    """The approvals answered ``approved`` whose push never made them active on the cluster, though
    they still hold (one released before its push ran is synced away with its project)."""
    placed = [pk for pk, state in approved.items() if state == AllocationState.APPROVED]
    activated = {int(pk) for pk in AuditEvent.objects.filter(
        seq__gt=since, action=actions.ALLOCATION_ACTIVATED.code, target_id__in=[str(pk) for pk in placed]).values_list("target_id", flat=True)}
    still = set(Allocation.objects.filter(pk__in=placed, state__in=HOLDING_STATES).values_list("pk", flat=True))
    return sorted(pk for pk in placed if pk not in activated and pk in still)
