"""The fuzz step's data: the demo organisation plus an outsider, an API token for each identity,
a node token for the node agent's report, and a few allocations (and changes, and a quota window) so that ids
in paths exist.

Run by ``tests/fuzz/run.py`` as the database owner after ``manage.py seed_demo``
(``python -m tests.fuzz.identities``); prints one JSON object: ``{"users": {identity: token},
"node": {"name", "token"}}``. Safe to run again (the outsider is reused; each run gets new tokens).
"""

from __future__ import annotations

import datetime
import json
import os
import sys
from typing import Any

# Identity → demo user; "outsider" has an account and no role anywhere. The second platform admin
# is no identity schemathesis runs as: it proposes the changes of the rules the platform admin
# decides (four-eyes: nobody decides their own).
USERS: dict[str, str] = {
    "researcher": "alice",
    "department-admin": "bob",
    "auditor": "carol",
    "platform-admin": "admin",
    "outsider": "outsider",
    "second-platform-admin": "frank",
}
NODE_NAME = "a100-node-1"
# The step's own department (top-level, not under acme), where alice works and bob is its admin, with
# room of its own: the demo's nlp and acme are nearly full at their busy hours and now, so the
# grants under open idle cases (active now) and the raises to decide go here.
STEP_DEPARTMENT = "fuzz-step"
STEP_PROJECT = "fuzz-step"
STEP_FLAVOR = "a100-mig-1g-10gb"
STEP_LIMIT = 8  # GPU-equivalents: the open cases' grants (45 x 0.1429) and the raises


def prepare() -> dict[str, Any]:
    from django.contrib.auth.models import User
    from django.utils import timezone

    from allocations.grants.changes import allocation_resize
    from allocations.grants.services import allocation_approve, allocation_request
    from allocations.models import Allocation, Flavor, PriorityClass
    from clusters.models import Cluster
    from telemetry.node_tokens import node_token_issue
    from tenants.access_tokens import access_token_create
    from tenants.models import Project

    User.objects.get_or_create(username="outsider", defaults={"email": "outsider@example.org"})
    tokens = {
        identity: access_token_create(actor=User.objects.get(username=username), name="fuzz", scope="write").key
        for identity, username in USERS.items()
    }
    admin = User.objects.get(username="admin")
    _, node_token = node_token_issue(
        actor=admin, cluster_id=Cluster.objects.get(name="demo").pk, node_name=NODE_NAME, description="fuzz step"
    )
    if not Allocation.objects.exists():
        # One pending and one granted allocation of each researcher's department.
        standard = PriorityClass.objects.get(name="gpu-standard")
        ends_at = timezone.now() + datetime.timedelta(days=30)
        for requester, decider, project, flavor in (
            ("alice", "bob", "nlp-llm", "a100-80gb"),
            ("dave", "erin", "vision-seg", "h100-80gb"),
        ):
            for approve in (False, True):
                allocation = allocation_request(
                    actor=User.objects.get(username=requester), project=Project.objects.get(slug=project),
                    flavor=Flavor.objects.get(name=flavor), quantity=1, priority_class=standard, starts_at=None,
                    ends_at=ends_at, justification="fuzz step seed",
                )
                if approve:
                    allocation_approve(actor=User.objects.get(username=decider), allocation_id=allocation.pk)
                    # A raise waiting for approval, so the change routes find one.
                    allocation_resize(actor=User.objects.get(username=requester), allocation_id=allocation.pk, quantity=2)
    _window_seed()
    _first_report(NODE_NAME, node_token)
    _step_department()
    open_cases = _open_idle_cases()
    return {
        "users": tokens, "node": {"name": NODE_NAME, "token": node_token}, "ids": _ids(), "named": _named(),
        "visible": {identity: _visible(username) for identity, username in USERS.items()},
        "open_cases": open_cases, "issued_tokens": _issued_tokens(), "statement": _statement(), "kubeconfig": KUBECONFIG,
    }  # fmt: skip


def _step_department() -> None:
    """``STEP_DEPARTMENT`` with its quota and project: alice a researcher and member, bob its admin."""
    from decimal import Decimal

    from django.contrib.auth.models import User

    from allocations.models import Quota
    from tenants.models import Department, Membership, Project
    from tenants.roles import Role

    department, _ = Department.objects.get_or_create(slug=STEP_DEPARTMENT, defaults={"name": "Fuzz step"})
    Quota.objects.get_or_create(department=department, flavor=None,
                                defaults={"guaranteed": Decimal(0), "limit": Decimal(STEP_LIMIT)})
    alice, bob = User.objects.get(username="alice"), User.objects.get(username="bob")
    Membership.objects.get_or_create(user=alice, department=department, role=Role.RESEARCHER)
    Membership.objects.get_or_create(user=bob, department=department, role=Role.DEPARTMENT_ADMIN)
    project, _ = Project.objects.get_or_create(slug=STEP_PROJECT, defaults={"name": "Fuzz step", "department": department})
    project.members.add(alice)


def _window_seed() -> None:
    """A quota window of nlp waiting for approval (asked by its department admin), so the window
    routes find one to decide on."""
    from decimal import Decimal

    from django.contrib.auth.models import User
    from django.utils import timezone

    from allocations.models import Quota, QuotaWindow
    from allocations.windows.services import quota_window_create
    from allocations.windows.terms import WindowTerms

    if QuotaWindow.objects.filter(state="pending").exists():
        return
    start = timezone.now() + datetime.timedelta(days=1)
    quota = Quota.objects.get(department__slug="nlp", flavor__isnull=True)
    quota_window_create(
        actor=User.objects.get(username="bob"), quota_id=quota.pk, justification="fuzz step seed",
        terms=WindowTerms(kind="temporary", begins_at=start, ends_at=start + datetime.timedelta(days=2),
                          limit_delta=Decimal(1)),
    )


def _first_report(node_name: str, token_text: str) -> None:
    """One report as the agent sends it (a recorded A100 node), so observed GPUs and samples exist."""
    from django.utils import timezone

    from telemetry.ingest.report import node_report_ingest
    from telemetry.selectors import node_token_find
    from tests.telemetry.fixtures import make_report

    now = timezone.now()
    token = node_token_find(text=token_text)
    assert token is not None
    report = make_report("a100-80gb-mig", node_name=node_name, started=now - datetime.timedelta(hours=1), collected=now)
    node_report_ingest(token=token, node_name=node_name, report=report, received_at=now)  # type: ignore[arg-type]


def _ids() -> dict[str, list[int]]:
    """The primary keys of what exists, by the name of the parameters and fields that take them."""
    from accounting.models import IdleCase, IdlePolicy
    from allocations.models import Allocation, AllocationChange, Flavor, PriorityClass, Quota, QuotaWindow
    from clusters.models import Cluster, Node
    from telemetry.models import NodeToken, ObservedGpu
    from tenants.models import Department, Project

    models: dict[str, Any] = {
        "allocation": Allocation, "change": AllocationChange, "cluster": Cluster, "department": Department, "flavor": Flavor,
        "gpu": ObservedGpu, "node": Node, "priority_class": PriorityClass, "project": Project, "quota": Quota,
        "token": NodeToken, "window": QuotaWindow, "case": IdleCase, "policy": IdlePolicy,
    }  # fmt: skip
    return {name: sorted(model.objects.values_list("pk", flat=True)) for name, model in models.items()}


# A kubeconfig the portal accepts (stored encrypted, never used: the fuzz step's clusters are manifests ones).
KUBECONFIG = """apiVersion: v1
kind: Config
current-context: fuzz
clusters: [{name: fuzz, cluster: {server: "https://kube.example.org:6443"}}]
contexts: [{name: fuzz, context: {cluster: fuzz, user: fuzz}}]
users: [{name: fuzz, user: {token: fuzz-not-a-secret}}]
"""
# Open idle cases made for the step's bound requests, each decided once: the researcher keeps or
# releases, the department admin exempts.
OPEN_CASES = {"researcher": 30, "department-admin": 15}
# Tokens a platform admin issued for the researcher, each claimed once.
ISSUED_TOKENS = 20


def _named() -> dict[str, int]:
    """The demo objects the bindings name (``tests/fuzz/hooks.py``), by kind and name."""
    from django.contrib.auth.models import User

    from allocations.models import Flavor, PriorityClass, Quota
    from clusters.models import Cluster
    from tenants.models import Department, Project

    named = {f"department:{slug}": pk for pk, slug in Department.objects.values_list("pk", "slug")}
    named.update({f"project:{slug}": pk for pk, slug in Project.objects.values_list("pk", "slug")})
    named.update({f"flavor:{name}": pk for pk, name in Flavor.objects.values_list("pk", "name")})
    named.update({f"priority_class:{name}": pk for pk, name in PriorityClass.objects.values_list("pk", "name")})
    named.update({f"cluster:{name}": pk for pk, name in Cluster.objects.values_list("pk", "name")})
    named.update({f"user:{name}": pk for pk, name in User.objects.values_list("pk", "username")})
    named.update({f"quota:{department}": pk for pk, department in
                  Quota.objects.filter(flavor__isnull=True).values_list("pk", "department__slug")})
    return named


def _visible(username: str) -> dict[str, list[int]]:
    """The departments, projects and quotas a user's roles reach (empty for a platform admin: all)."""
    from django.contrib.auth.models import User

    from allocations.models import Quota
    from tenants.models import Department, Membership, Project

    user = User.objects.get(username=username)
    memberships = Membership.objects.filter(user=user)
    if memberships.filter(role="platform_admin").exists() or user.is_superuser:
        return {}
    reach = set(memberships.values_list("department_id", flat=True))
    while True:
        below = set(Department.objects.filter(parent_id__in=reach).values_list("pk", flat=True)) - reach
        if not below:
            break
        reach |= below
    projects = Project.objects.filter(department_id__in=reach)
    if not memberships.exclude(role="researcher").exists():
        projects = projects.filter(members=user)
    return {
        "department": sorted(reach), "project": sorted(projects.values_list("pk", flat=True)),
        "quota": sorted(Quota.objects.filter(department_id__in=reach).values_list("pk", flat=True)),
    }


def _open_idle_cases() -> dict[str, list[int]]:
    """Grants of alice in the step's project, active from now for 12 hours, each with an open
    (warned) idle case of the demo's default policy. Active: the idle evaluation (the serving
    process's clock runs it at start and every 5 minutes) closes the case of a grant that is not."""
    from django.contrib.auth.models import User

    from accounting.idle_models import IdleCase, IdlePolicy
    from allocations.grants.services import allocation_approve, allocation_request
    from allocations.models import Flavor, PriorityClass
    from kernel.clock import clock_now
    from tenants.models import Project

    policy = IdlePolicy.objects.order_by("pk").first()
    if policy is None:
        return {}
    now = clock_now()
    alice, bob = User.objects.get(username="alice"), User.objects.get(username="bob")
    project, flavor = Project.objects.get(slug=STEP_PROJECT), Flavor.objects.get(name=STEP_FLAVOR)
    cases: dict[str, list[int]] = {}
    for identity, count in OPEN_CASES.items():
        for _ in range(count):
            allocation = allocation_request(
                actor=alice, project=project, flavor=flavor, quantity=1,
                priority_class=PriorityClass.objects.get(name="gpu-standard"), starts_at=None,
                ends_at=now + datetime.timedelta(hours=12), justification="fuzz step: an idle case to decide",
            )
            allocation_approve(actor=bob, allocation_id=allocation.pk)
            case = IdleCase.objects.create(
                allocation=allocation, policy=policy, state="warned", opened_at=now, idle_since=now, last_evaluated_at=now,
                warned_at=now, action_due_at=now + datetime.timedelta(days=1),
            )
            cases.setdefault(identity, []).append(case.pk)
    return cases


def _issued_tokens() -> dict[str, list[int]]:
    """Tokens the platform admin issued for alice (audited, as through the admin site), waiting for her
    to claim them."""
    from django.contrib.auth.models import User

    from tenants.access_tokens import access_token_issue

    admin, alice = User.objects.get(username="admin"), User.objects.get(username="alice")
    issued = [
        access_token_issue(actor=admin, user=alice, name=f"fuzz-issued-{number}", scope="write",
                           reason="fuzz step: a token for its owner to claim").pk
        for number in range(ISSUED_TOKENS)
    ]  # fmt: skip
    return {"researcher": issued}


def _statement() -> dict[str, int]:
    """A closed statement and the project and flavor of one of its lines, for corrections."""
    from accounting.models import StatementLine

    line = StatementLine.objects.order_by("pk").first()
    if line is None:
        return {"id": 1, "project": 1, "flavor": 1}
    return {"id": line.statement_id, "project": line.project_id, "flavor": line.flavor_id}


def main() -> None:
    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gpuportal.settings")
    django.setup()
    json.dump(prepare(), sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
