"""What-ifs: asked for (validated, audited, handed to a worker once committed) and run (the twin
replays the workload under the current and the proposed policy; each state change audited in its
transaction). docs/twin.md, "What-if"."""

from __future__ import annotations

import datetime
import hashlib
import logging
import time
from typing import Any

from django.contrib.auth.base_user import AbstractBaseUser
from django.contrib.auth.models import AnonymousUser, User
from django.db import OperationalError, transaction
from django.http import Http404

from audit.actions import WHAT_IF_FAILED, WHAT_IF_FINISHED, WHAT_IF_REQUESTED, WHAT_IF_STARTED
from audit.services import audit_record
from kernel.clock import clock_now
from kernel.errors import FieldError, NotAllowed
from kernel.task_handover import task_hand_over
from kernel.times import minute_utc
from tenants.access import access_for, department_parent_map, department_subtree_ids
from tenants.models import Department, Membership, Role
from twin.errors import TwinInputError
from twin.workload import Job, jobs_read
from whatifs.changes import Proposal, Scope, proposal_validate
from whatifs.compare import Demand, comparison_run
from whatifs.live_rules import live_idle_rules, live_windows, policy_with_live_rules
from whatifs.models import HISTORY_DAYS_MAX, WhatIf, WhatIfState, WorkloadSource
from whatifs.sources import (
    class_rows,
    department_names,
    department_parents,
    flavor_shapes,
    history_workload,
    inventory_nodes,
    policy_build,
    quota_rows,
)

log = logging.getLogger(__name__)

RUN_TASK = "whatifs.tasks.what_if_run_task"
ABANDONED_AFTER_S = 900  # longer than any task may run (CELERY_TASK_TIME_LIMIT)
WORKLOAD_MAX_CHARS = 20_000_000
FORMATS = ("jsonl", "csv")


def what_if_scope(*, user: AbstractBaseUser | AnonymousUser, department_id: int | None) -> tuple[Scope, Department | None]:
    """What ``user`` may propose in a what-if of ``department_id`` (None: the platform's): platform
    admins anything, a department's admins changes inside its subtree; 404 for a department the
    user cannot see, 403 for one it can see but does not administer (members)."""
    access = access_for(user)
    if department_id is None:
        if access.is_platform_admin:
            return Scope(True, frozenset()), None
        administered = _administered_roots(user)
        if len(administered) != 1:
            if not access.has_any_role:
                raise Http404("No what-ifs are visible to you.")
            raise NotAllowed("Only platform admins and department admins may ask for a what-if"
                             + ("." if not administered else "; name the department (department)."))
        department_id = administered[0]
    department = Department.objects.filter(pk=department_id).first()
    if department is None or not access.can_read_department(department_id):
        raise Http404("No such department.")
    if not access.can_administer_department(department_id):
        raise NotAllowed("Only the department's admins and platform admins may ask for its what-ifs.")
    if access.is_platform_admin:
        return Scope(True, frozenset()), department
    slugs = Department.objects.filter(pk__in=access.administered).values_list("slug", flat=True)
    subtree = _subtree_slugs(department_id)
    return Scope(False, frozenset(slug for slug in slugs if slug in subtree)), department


def _administered_roots(user: AbstractBaseUser | AnonymousUser) -> list[int]:
    if user.pk is None:
        return []
    return list(Membership.objects.filter(user_id=user.pk, role=Role.DEPARTMENT_ADMIN)
                .order_by("department_id").values_list("department_id", flat=True))


def _subtree_slugs(department_id: int) -> frozenset[str]:
    ids = department_subtree_ids(root_ids=[department_id], parents=department_parent_map())
    return frozenset(Department.objects.filter(pk__in=ids).values_list("slug", flat=True))


def _workload_check(text: str, fmt: str) -> list[Job]:
    if fmt not in FORMATS:
        raise FieldError("workload_format", f"must be one of {', '.join(FORMATS)}")
    if len(text) > WORKLOAD_MAX_CHARS:
        raise FieldError("workload", f"at most {WORKLOAD_MAX_CHARS} characters")
    try:
        jobs = jobs_read(text, source="workload", fmt=fmt, flavors=flavor_shapes())
        policy_build(departments=department_names(), quotas=[], classes=class_rows(), flavors={}).check_jobs(jobs)
    except TwinInputError as error:
        raise FieldError("workload", str(error)) from None
    if not jobs:
        raise FieldError("workload", "holds no request")
    return jobs


def _source(history_days: int | None, workload: str | None, workload_format: str) -> None:
    if (history_days is None) == (workload is None):
        raise FieldError("history_days", "give either history_days or a workload file (workload), one of them")
    if history_days is not None and not 1 <= history_days <= HISTORY_DAYS_MAX:
        raise FieldError("history_days", f"must be from 1 to {HISTORY_DAYS_MAX}")
    if workload is not None:
        _workload_check(workload, workload_format)


def what_if_create(*, actor: User, changes: Any, department_id: int | None = None,
                   history_days: int | None = None, workload: str | None = None, workload_format: str = "jsonl",
                   title: str = "") -> WhatIf:
    """Ask for a what-if: checked now (a 400 naming the field), run by a worker after commit."""
    scope, department = what_if_scope(user=actor, department_id=department_id)
    proposal = proposal_validate(changes=changes, quotas=quota_rows(), classes=class_rows(), scope=scope,
                                 departments=frozenset(department_names()))
    _source(history_days, workload, workload_format)
    with transaction.atomic():
        what_if = WhatIf.objects.create(
            requested_by=actor, department=department, title=title[:200], changes=proposal.changes,
            source=WorkloadSource.HISTORY if history_days is not None else WorkloadSource.FILE,
            history_days=history_days, history_until=clock_now() if history_days is not None else None,
            workload=workload or "", workload_format=workload_format if workload is not None else "",
        )
        audit_record(actor=actor, action=WHAT_IF_REQUESTED, target=what_if,
                     department_id=department.pk if department else None, after={"state": what_if.state},
                     details=_inputs(what_if))
        transaction.on_commit(lambda: task_hand_over(RUN_TASK, what_if.pk))
    return what_if


def _inputs(what_if: WhatIf) -> dict[str, Any]:
    """What the run is asked to replay, as audited: the changes and the workload's source (an
    uploaded file by its size and SHA-256)."""
    inputs: dict[str, Any] = {"changes": what_if.changes, "source": what_if.source, "title": what_if.title}
    if what_if.source == WorkloadSource.HISTORY:
        inputs.update(history_days=what_if.history_days,
                      history_until=what_if.history_until.isoformat() if what_if.history_until else None)
    else:
        inputs.update(workload_format=what_if.workload_format, workload_chars=len(what_if.workload),
                      workload_sha256=hashlib.sha256(what_if.workload.encode()).hexdigest())
    return inputs


def _demand(what_if: WhatIf) -> list[Job]:
    if what_if.source == WorkloadSource.HISTORY:
        until = what_if.history_until or clock_now()
        jobs = history_workload(days=float(what_if.history_days or 1), now=until)
        if not jobs:
            raise TwinInputError("history", 0, "history_days", f"no request in the {what_if.history_days} days before {minute_utc(until)}")
        return jobs
    return jobs_read(what_if.workload, source="workload", fmt=what_if.workload_format, flavors=flavor_shapes())


def _proposal(what_if: WhatIf) -> Proposal:
    return proposal_validate(changes=what_if.changes, quotas=quota_rows(), classes=class_rows(), scope=Scope(True, frozenset()),
                             departments=frozenset(department_names()))


def _may_move(what_if: WhatIf, to: str) -> bool:
    """Queued → running, running → done or failed; and a run abandoned (its worker killed past the
    task's time limit, the task delivered again) → running again."""
    if to != WhatIfState.RUNNING:
        return what_if.state == WhatIfState.RUNNING
    if what_if.state == WhatIfState.QUEUED:
        return True
    abandoned = clock_now() - datetime.timedelta(seconds=ABANDONED_AFTER_S)
    return what_if.state == WhatIfState.RUNNING and what_if.started_at is not None and what_if.started_at < abandoned


def _move(what_if_id: int, *, to: str, action: Any, details: dict[str, Any], **values: Any) -> WhatIf | None:
    """One audited state change (from queued to running, from running to done or failed)."""
    with transaction.atomic():
        what_if = WhatIf.objects.select_for_update().filter(pk=what_if_id).first()
        if what_if is None or not _may_move(what_if, to):
            return None
        before = what_if.state
        what_if.state = to
        for key, value in values.items():
            setattr(what_if, key, value)
        what_if.save()
        audit_record(actor=None, action=action, target=what_if, department_id=what_if.department_id,
                     before={"state": before}, after={"state": to}, details=details)
        return what_if


def what_if_run(*, what_if_id: int) -> WhatIf | None:
    """Replay a queued what-if, current against proposed; None when it is not queued (already
    run, or running elsewhere)."""
    what_if = _move(what_if_id, to=WhatIfState.RUNNING, action=WHAT_IF_STARTED, details={}, started_at=clock_now(),
                    progress=1)
    if what_if is None:
        return None
    began = time.perf_counter()
    try:
        result = _compare(what_if)
    except OperationalError:
        raise  # the task tries again later
    except Exception as error:  # a run that cannot finish says why, instead of running for ever
        if not isinstance(error, (TwinInputError, ValueError)):
            log.exception("what-if %s failed", what_if_id)
        return _move(what_if_id, to=WhatIfState.FAILED, action=WHAT_IF_FAILED, details={"error": str(error)},
                     error=str(error), finished_at=clock_now())
    result["wall_s"] = round(time.perf_counter() - began, 3)
    summary = {row["department"]: row["difference"] for row in result["departments"]}
    return _move(what_if_id, to=WhatIfState.DONE, action=WHAT_IF_FINISHED,
                 details={"differences": summary, "requests": result["requests"]}, result=result, progress=100,
                 finished_at=clock_now())


def _replay_start(what_if: WhatIf, jobs: list[Job]) -> datetime.datetime:
    """The moment the replay's time 0 stands for: the history's window's start; a file's requests
    are read as starting now (its proposed windows then count from now)."""
    if what_if.source == WorkloadSource.HISTORY:
        return (what_if.history_until or clock_now()) - datetime.timedelta(days=what_if.history_days or 1)
    return what_if.created_at


def _compare(what_if: WhatIf) -> dict[str, Any]:
    jobs = _demand(what_if)
    nodes = inventory_nodes()
    if not nodes:
        raise ValueError("the inventory has no schedulable node with GPUs")
    departments, quotas, classes, flavors = department_names(), quota_rows(), class_rows(), flavor_shapes()
    parents = department_parents()
    start, windows, idle = _replay_start(what_if, jobs), live_windows(quotas), live_idle_rules()
    current = policy_with_live_rules(
        policy_build(departments=departments, quotas=quotas, classes=classes, flavors=flavors, parents=parents),
        start=start, windows=windows, idle=idle)
    proposal = _proposal(what_if)
    proposed = policy_with_live_rules(
        policy_build(departments=departments, quotas=proposal.quotas, classes=proposal.classes, flavors=flavors,
                     parents=parents),
        start=start, windows=windows + proposal.windows, idle=idle + proposal.idle)

    def progress(percent: int) -> None:
        WhatIf.objects.filter(pk=what_if.pk, state=WhatIfState.RUNNING).update(progress=percent)

    horizon = 86400.0 * what_if.history_days if what_if.source == WorkloadSource.HISTORY and what_if.history_days else None
    return comparison_run(Demand(jobs, nodes, horizon), current, proposed, progress=progress)
