"""Role × endpoint × outcome, for every route of the API under /api/v1/.

Outsiders get 404 (they cannot tell the object exists), people who can see an object but lack the
role get 403, anonymous callers 401. ``ROWS`` holds one row per route and method; a route without a
row fails ``test_every_api_route_has_a_row``. Each row is sent by every persona against the same
scene, each request inside a savepoint that is rolled back, so no persona sees another's changes.

The rows record what the API answers today. Where that looks wrong, the row says so in a comment
naming it as known and tracked by the hardening work; changing it belongs there, not here.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from django.db import transaction
from django.http import StreamingHttpResponse
from django.urls import URLPattern, URLResolver, get_resolver, reverse
from django.utils import timezone
from rest_framework.test import APIClient

from allocations.grants import services
from allocations.models import Allocation
from notifications.models import Webhook
from notifications.services import webhook_create
from tenants.access_tokens import access_token_create, access_token_issue
from tenants.models import PersonalAccessToken
from tests.conftest import World
from tests.foundation.conftest_matrix import Scene, audit_keys_fixture, scene_fixture  # noqa: F401 (fixtures)
from whatifs.models import WhatIf
from whatifs.services import what_if_create

PERSONAS = ["nlp_member", "nlp_admin", "speech_member", "vision_member", "vision_admin", "auditor", "platform", "nobody", None]
API_PREFIX = "api/v1/"


def codes(*statuses: int) -> dict[str | None, int]:
    """One status per persona, in the order of ``PERSONAS``."""
    assert len(statuses) == len(PERSONAS)
    return dict(zip(PERSONAS, statuses, strict=True))


def pending(world: World) -> Allocation:
    start = timezone.now()
    return services.allocation_request(
        actor=world.users["nlp_member"], project=world.llm, flavor=world.a100, quantity=1,
        priority_class=world.standard, starts_at=start, ends_at=start + datetime.timedelta(days=2),
        justification="role matrix",
    )


def expect(table: dict[str | None, int], persona: str | None) -> int:
    return table[persona]


#                   nlp_member nlp_admin speech_m vision_m vision_a auditor platform nobody anonymous
SIGNED_IN = codes(         200,      200,     200,     200,     200,    200,     200,   200,  401)
ANY_ROLE = codes(          200,      200,     200,     200,     200,    200,     200,   404,  401)
READ_NLP = codes(          200,      200,     404,     404,     404,    200,     200,   404,  401)
READ_ALLOCATION = READ_NLP
READ_PROJECT = READ_NLP
DECIDE = codes(            403,      200,     404,     404,     404,    403,     200,   404,  401)
RELEASE = codes(           200,      200,     404,     404,     404,    403,     200,   404,  401)
REQUEST = codes(           201,      201,     400,     400,     400,    403,     201,   400,  401)
PREVIEW_REQUEST = codes(   200,      200,     400,     400,     400,    403,     200,   400,  401)
CREATE_PROJECT_IN_NLP = codes(403,   201,     400,     400,     400,    403,     201,   400,  401)
CREATE_FLAVOR = codes(     403,      403,     403,     403,     403,    403,     201,   403,  401)
PLATFORM_CREATES = CREATE_FLAVOR
PLATFORM_CHANGES = codes(  403,      403,     403,     403,     403,    403,     200,   404,  401)
PLATFORM_CHANGES_NLP = codes(403,    403,     404,     404,     404,    403,     200,   404,  401)
# four-eyes on the rules: a platform admin's change of a quota or priority class waits (202)
PLATFORM_PROPOSES = codes( 403,      403,     403,     403,     403,    403,     202,   403,  401)
PLATFORM_PROPOSES_ANY = codes(403,   403,     403,     403,     403,    403,     202,   404,  401)
PLATFORM_PROPOSES_NLP = codes(403,   403,     404,     404,     404,    403,     202,   404,  401)
PROPOSE_QUOTA_IN_NLP = codes(403,    403,     400,     400,     400,    403,     202,   400,  401)
WITHDRAW_OTHERS_CHANGE = codes(403,  403,     404,     404,     404,    403,     403,   404,  401)
PLATFORM_PUTS = codes(     403,      403,     403,     403,     403,    403,     204,   404,  401)
PLATFORM_QUEUES = codes(   403,      403,     403,     403,     403,    403,     202,   404,  401)
PLATFORM_ACTS = codes(     403,      403,     403,     403,     403,    403,     200,   404,  401)
NODE_TOKENS = codes(       403,      403,     403,     403,     403,    403,     200,   403,  401)
ISSUE_NODE_TOKEN = codes(  403,      403,     403,     403,     403,    403,     201,   403,  401)
AUDIT_READ = codes(        404,      200,     404,     404,     200,    200,     200,   404,  401)
AUDIT_PUBLISH = codes(     404,      403,     404,     404,     403,    201,     201,   404,  401)
NODE_REPORT = codes(       403,      403,     403,     403,     403,    403,     403,   403,  401)
SIGN_IN = SIGNED_IN
RESIZE = codes(            202,      202,     404,     404,     404,    403,     202,   404,  401)
READ_VISION = codes(       404,      404,     404,     200,     200,    200,     200,   404,  401)
DECIDE_VISION = codes(     404,      404,     404,     403,     200,    403,     200,   404,  401)
WITHDRAW_VISION = codes(   404,      404,     404,     200,     200,    403,     200,   404,  401)
UNLOCK_SIGN_IN = codes(    403,      403,     403,     403,     403,    403,     200,   403,  401)
ASK_WINDOW_IN_NLP = CREATE_PROJECT_IN_NLP
CANCEL_NLP_WINDOW = DECIDE  # its requester (nlp_admin) or a platform admin
PLATFORM_CREATES_FOR_ROLES = codes(403,  403,     403,     403,     403,    403,     201,   404,  401)
STATEMENT_READ = codes(    403,      200,     404,     404,     404,    200,     200,   404,  401)
STATEMENT_CORRECT = codes( 403,      403,     404,     404,     404,    403,     201,   404,  401)
PLATFORM_OR_AUDITOR = codes(403,     403,     403,     403,     403,    200,     200,   404,  401)
CREATE_OWN = codes(        201,      201,     201,     201,     201,    201,     201,   201,  401)
OWN_TOKEN = codes(         200,      404,     404,     404,     404,    404,     404,   404,  401)
REVOKE_OWN_TOKEN = codes(  204,      404,     404,     404,     404,    404,     404,   404,  401)
CLAIM_OWN_TOKEN = codes(   201,      404,     404,     404,     404,    404,     404,   404,  401)
GROUP_MAPPINGS = codes(    403,      403,     403,     403,     403,    403,     200,   403,  401)
MAP_GROUP = codes(         403,      403,     403,     403,     403,    403,     201,   403,  401)
UNMAP_GROUP = codes(       403,      403,     403,     403,     403,    403,     204,   403,  401)
ADMIN_ADDS_IN_NLP = codes( 403,      201,     404,     404,     404,    403,     201,   404,  401)
ADMIN_REMOVES_IN_NLP = codes(403,    204,     404,     404,     404,    403,     204,   404,  401)
ADMIN_SETS_IN_NLP = codes( 403,      200,     404,     404,     404,    403,     200,   404,  401)
# what-ifs: a department's admins (and platform admins) ask for and read its what-ifs
WHAT_IF_IN_NLP = codes(    403,      202,     404,     404,     404,    403,     202,   404,  401)
WHAT_IF_READ_NLP = codes(  404,      200,     404,     404,     404,    404,     200,   404,  401)
QUERY_REQUIRED = codes(    400,      400,     400,     400,     400,    400,     400,   400,  401)
# nlp's webhooks: its admins (and platform admins) manage them, its auditors read them
WEBHOOKS_READ = codes(     403,      200,     404,     404,     404,    200,     200,   404,  401)
WEBHOOKS_ADD = codes(      403,      201,     404,     404,     404,    403,     201,   404,  401)
WEBHOOK_CHANGE = codes(    403,      200,     404,     404,     404,    403,     200,   404,  401)
WEBHOOK_REMOVE = codes(    403,      204,     404,     404,     404,    403,     204,   404,  401)

KUBECONFIG = """apiVersion: v1
kind: Config
current-context: c
contexts: [{name: c, context: {cluster: k, user: u}}]
clusters: [{name: k, cluster: {server: "https://k8s.example:6443"}}]
users: [{name: u, user: {token: abc}}]
"""


def what_if(scene: Scene) -> dict[str, Any]:
    """nlp's what-if, asked for by its admin (made once per test, outside the rolled-back requests)."""
    made = WhatIf.objects.filter(department=scene.world.nlp).first() or what_if_create(
        actor=scene.world.users["nlp_admin"], changes=[{"kind": "quota", "department": "nlp", "limit_delta": 2}],
        history_days=7)
    return {"what_if_id": made.pk}


def webhook(scene: Scene) -> dict[str, Any]:
    """nlp's webhook (made once per test, outside the rolled-back requests)."""
    hook = Webhook.objects.filter(department=scene.world.nlp).first() or webhook_create(
        actor=scene.world.users["platform"], department_id=scene.world.nlp.pk, name="matrix",
        url="https://hooks.example.org/matrix")[0]
    return {"webhook_id": hook.pk}


def nothing(scene: Scene) -> dict[str, Any]:
    return {}


def no_body(scene: Scene, persona: str | None) -> dict[str, Any] | None:
    return None


@dataclass(frozen=True)
class Row:
    """One route and method: the URL name ``reverse`` knows, and the status each persona gets."""

    route: str
    method: str
    expect: dict[str | None, int]
    kwargs: Callable[[Scene], dict[str, Any]] = nothing
    body: Callable[[Scene, str | None], dict[str, Any] | None] = no_body

    @property
    def id(self) -> str:
        return f"{self.method.upper()} {self.route}"


def cluster(scene: Scene) -> dict[str, Any]:
    return {"cluster_id": scene.world.cluster.pk}


def allocation(name: str) -> Callable[[Scene], dict[str, Any]]:
    def kwargs(scene: Scene) -> dict[str, Any]:
        return {"allocation_id": getattr(scene, name).pk}

    return kwargs


def change(scene: Scene) -> dict[str, Any]:
    return {"change_id": scene.change.pk}


def sign_in(scene: Scene, persona: str | None) -> dict[str, Any]:
    """Each persona signs in with its own password; the anonymous caller with a name nobody has."""
    if persona is None:
        return {"username": "no-such-user", "password": "guess"}
    return {"username": persona, "password": f"pw-{persona}"}


def own_token(scene: Scene) -> dict[str, Any]:
    """A personal access token of nlp_member's (made once per scene): only its owner reaches it."""
    owner = scene.world.users["nlp_member"]
    token = PersonalAccessToken.objects.filter(user=owner, name="role matrix").first()
    if token is None:
        token = access_token_create(actor=owner, name="role matrix", scope="read").token
    return {"token_id": token.pk}


def issued_token(scene: Scene) -> dict[str, Any]:
    """A token the platform admin issued for nlp_member (made once per scene): only its owner claims it."""
    owner = scene.world.users["nlp_member"]
    token = PersonalAccessToken.objects.filter(user=owner, name="role matrix issued").first()
    if token is None:
        token = access_token_issue(actor=scene.world.users["platform"], user=owner, name="role matrix issued",
                                   scope="read", reason="role matrix")
    return {"token_id": token.pk}


def flavor_body(scene: Scene, persona: str | None) -> dict[str, Any]:
    return {"name": "l40s", "display_name": "L40S", "gpu_model": "NVIDIA-L40S", "sharing_mode": "exclusive",
            "resource_name": "nvidia.com/gpu", "memory_mib": 46068, "compute_percent": 100, "gpu_equivalents": "1"}


def allocation_body(scene: Scene, persona: str | None) -> dict[str, Any]:
    world = scene.world
    return {"project": world.llm.pk, "flavor": world.a100.pk, "quantity": 1, "justification": "x", **world.window()}


def window(scene: Scene) -> dict[str, Any]:
    return {"window_id": scene.window.pk}


def quota(scene: Scene) -> dict[str, Any]:
    return {"quota_id": scene.quota.pk}


def window_body(scene: Scene, persona: str | None) -> dict[str, Any]:
    start = timezone.now() + datetime.timedelta(hours=1)
    return {"quota": scene.quota.pk, "kind": "temporary", "begins_at": start.isoformat(),
            "ends_at": (start + datetime.timedelta(days=1)).isoformat(), "limit_delta": "2"}


def renew_body(scene: Scene, persona: str | None) -> dict[str, Any]:
    return {"ends_at": (scene.pending.ends_at + datetime.timedelta(days=1)).isoformat()}


def group_mapping(scene: Scene) -> dict[str, Any]:
    from tenants.models import ExternalGroupMapping

    mapping, _ = ExternalGroupMapping.objects.get_or_create(
        source="oidc", external_group="/gpu/nlp-researchers", department=scene.world.nlp, role="researcher")
    return {"mapping_id": mapping.pk}


ROWS = [
    # tenants
    Row("api-token", "post", SIGN_IN, body=sign_in),
    Row("api-access-tokens", "get", SIGNED_IN),
    Row("api-access-tokens", "post", CREATE_OWN, body=lambda s, p: {"name": "ci", "scope": "read"}),
    Row("api-access-token", "get", OWN_TOKEN, kwargs=own_token),
    Row("api-access-token", "delete", REVOKE_OWN_TOKEN, kwargs=own_token),
    Row("api-access-token-claim", "post", CLAIM_OWN_TOKEN, kwargs=issued_token),
    Row("api-auth-unlock", "post", UNLOCK_SIGN_IN, body=lambda s, p: {"username": "nlp_member"}),
    Row("api-me", "get", SIGNED_IN),
    Row("api-group-mappings", "get", GROUP_MAPPINGS),
    Row("api-group-mappings", "post", MAP_GROUP, body=lambda s, p: {
        "source": "oidc", "external_group": "/gpu/vision", "department": s.world.vision.pk, "role": "researcher"}),
    Row("api-group-mapping", "get", GROUP_MAPPINGS, kwargs=group_mapping),
    Row("api-group-mapping", "delete", UNMAP_GROUP, kwargs=group_mapping),
    Row("api-departments", "get", SIGNED_IN),
    Row("api-departments", "post", PLATFORM_CREATES, body=lambda s, p: {"slug": "robotics", "name": "Robotics"}),
    Row("api-department", "get", READ_NLP, kwargs=lambda s: {"department_id": s.world.nlp.pk}),
    Row("api-department", "patch", PLATFORM_CHANGES_NLP, kwargs=lambda s: {"department_id": s.world.nlp.pk},
        body=lambda s, p: {"isolation": "dedicated-gpus"}),
    Row("api-projects", "get", SIGNED_IN),
    Row("api-projects", "post", CREATE_PROJECT_IN_NLP,
        body=lambda s, p: {"slug": "nlp-new", "name": "New", "department": s.world.nlp.pk}),
    Row("api-project", "get", READ_PROJECT, kwargs=lambda s: {"project_id": s.world.llm.pk}),
    Row("api-project", "patch", PLATFORM_CHANGES_NLP, kwargs=lambda s: {"project_id": s.world.llm.pk},
        body=lambda s, p: {"isolation": "dedicated-nodes"}),
    # department self-service (docs/departments.md)
    Row("api-department-members", "get", READ_NLP, kwargs=lambda s: {"department_id": s.world.nlp.pk}),
    Row("api-department-members", "post", ADMIN_ADDS_IN_NLP, kwargs=lambda s: {"department_id": s.world.nlp.pk},
        body=lambda s, p: {"user": "vision_member", "role": "researcher"}),
    Row("api-department-member", "delete", ADMIN_REMOVES_IN_NLP, kwargs=lambda s: {
        "department_id": s.world.nlp.pk,
        "membership_id": s.world.users["nlp_member"].memberships.get(department=s.world.nlp).pk}),
    Row("api-project-members", "get", READ_PROJECT, kwargs=lambda s: {"project_id": s.world.llm.pk}),
    Row("api-project-members", "post", ADMIN_ADDS_IN_NLP, kwargs=lambda s: {"project_id": s.world.llm.pk},
        body=lambda s, p: {"user": "speech_member"}),
    Row("api-project-member", "delete", ADMIN_REMOVES_IN_NLP, kwargs=lambda s: {
        "project_id": s.world.llm.pk, "user_id": s.world.users["nlp_member"].pk}),
    Row("api-project-quotas", "get", READ_PROJECT, kwargs=lambda s: {"project_id": s.world.llm.pk}),
    Row("api-project-quotas", "put", ADMIN_SETS_IN_NLP, kwargs=lambda s: {"project_id": s.world.llm.pk},
        body=lambda s, p: {"caps": [{"flavor": s.world.a100.pk, "limit": "2"}, {"flavor": None, "limit": "3.5"}]}),
    # the catalogue
    Row("api-flavors", "get", SIGNED_IN),
    Row("api-flavors", "post", CREATE_FLAVOR, body=flavor_body),
    Row("api-flavor", "get", ANY_ROLE, kwargs=lambda s: {"flavor_id": s.world.a100.pk}),
    Row("api-flavor", "patch", PLATFORM_CHANGES, kwargs=lambda s: {"flavor_id": s.world.a100.pk},
        body=lambda s, p: {"display_name": "A100 80GB"}),
    Row("api-sharing-modes", "get", SIGNED_IN),
    Row("api-priority-classes", "get", SIGNED_IN),
    Row("api-priority-classes", "post", PLATFORM_PROPOSES, body=lambda s, p: {"name": "gpu-urgent", "value": 5000}),
    Row("api-priority-class", "get", ANY_ROLE, kwargs=lambda s: {"priority_class_id": s.world.standard.pk}),
    Row("api-priority-class", "patch", PLATFORM_PROPOSES_ANY, kwargs=lambda s: {"priority_class_id": s.world.standard.pk},
        body=lambda s, p: {"description": "Standard", "notice_minutes": 30}),
    # gpu-preemptible: no allocation of the scene uses it
    Row("api-priority-class", "delete", PLATFORM_PROPOSES_ANY,
        kwargs=lambda s: {"priority_class_id": s.world.preemptible.pk}),
    Row("api-quotas", "get", SIGNED_IN),
    Row("api-quotas", "post", PROPOSE_QUOTA_IN_NLP,
        body=lambda s, p: {"department": s.world.nlp.pk, "flavor": s.world.h100.pk, "guaranteed": "0", "limit": "2"}),
    Row("api-quota", "get", READ_NLP, kwargs=lambda s: {"quota_id": s.quota.pk}),
    Row("api-quota", "patch", PLATFORM_PROPOSES_NLP, kwargs=lambda s: {"quota_id": s.quota.pk},
        body=lambda s, p: {"guaranteed": "2", "limit": "9"}),
    Row("api-quota", "delete", PLATFORM_PROPOSES_NLP, kwargs=lambda s: {"quota_id": s.quota.pk}),
    # changes of the rules: a second platform admin proposed the scene's; the platform persona decides
    Row("api-rule-changes", "get", SIGNED_IN),
    Row("api-rule-change", "get", READ_NLP, kwargs=lambda s: {"change_id": s.rule_change.pk}),
    Row("api-rule-change-approve", "post", PLATFORM_CHANGES_NLP, kwargs=lambda s: {"change_id": s.rule_change.pk},
        body=lambda s, p: {"comment": "yes"}),
    Row("api-rule-change-reject", "post", PLATFORM_CHANGES_NLP, kwargs=lambda s: {"change_id": s.rule_change.pk},
        body=lambda s, p: {"comment": "no"}),
    Row("api-rule-change-withdraw", "post", WITHDRAW_OTHERS_CHANGE, kwargs=lambda s: {"change_id": s.rule_change.pk}),
    Row("api-quota-effective", "get", READ_NLP, kwargs=quota),
    Row("api-quota-timeline", "get", READ_NLP, kwargs=quota),
    # quota windows: nlp_admin asked for the scene's window; only another (platform) admin decides
    Row("api-quota-windows", "get", SIGNED_IN),
    Row("api-quota-window-shrinks", "get", SIGNED_IN),
    Row("api-quota-windows", "post", ASK_WINDOW_IN_NLP, body=window_body),
    Row("api-quota-window", "get", READ_NLP, kwargs=window),
    Row("api-quota-window-approve", "post", PLATFORM_CHANGES_NLP, kwargs=window, body=lambda s, p: {"comment": "yes"}),
    Row("api-quota-window-reject", "post", PLATFORM_CHANGES_NLP, kwargs=window, body=lambda s, p: {"comment": "no"}),
    Row("api-quota-window-cancel", "post", CANCEL_NLP_WINDOW, kwargs=window),
    # allocations
    Row("api-allocations", "get", SIGNED_IN),
    Row("api-allocations", "post", REQUEST, body=allocation_body),
    Row("api-allocation-request-preview", "post", PREVIEW_REQUEST, body=allocation_body),
    Row("api-allocation-simulate", "post", PREVIEW_REQUEST, body=allocation_body),
    Row("api-allocation-why", "get", READ_ALLOCATION, kwargs=allocation("pending")),
    Row("api-allocation-pods", "get", READ_ALLOCATION, kwargs=allocation("pending")),
    Row("api-allocation", "get", READ_ALLOCATION, kwargs=allocation("pending")),
    Row("api-allocation-approve", "post", DECIDE, kwargs=allocation("pending"), body=lambda s, p: {"comment": "yes"}),
    Row("api-allocation-reject", "post", DECIDE, kwargs=allocation("pending"), body=lambda s, p: {"comment": "no"}),
    Row("api-allocation-release", "post", RELEASE, kwargs=allocation("pending"), body=lambda s, p: {}),
    Row("api-allocation-renew", "post", RELEASE, kwargs=allocation("pending"), body=renew_body),
    Row("api-allocation-retry", "post", DECIDE, kwargs=allocation("failed")),
    Row("api-allocation-resize", "post", RESIZE, kwargs=allocation("failed"), body=lambda s, p: {"quantity": 2}),
    Row("api-allocation-changes", "get", SIGNED_IN),
    Row("api-allocation-change", "get", READ_VISION, kwargs=change),
    Row("api-allocation-change-approve", "post", DECIDE_VISION, kwargs=change, body=lambda s, p: {"comment": "yes"}),
    Row("api-allocation-change-reject", "post", DECIDE_VISION, kwargs=change, body=lambda s, p: {"comment": "no"}),
    Row("api-allocation-change-cancel", "post", WITHDRAW_VISION, kwargs=change),
    Row("api-allocation-placement-preview", "get", READ_ALLOCATION, kwargs=allocation("pending")),
    Row("api-allocation-usage-guide", "get", READ_VISION, kwargs=allocation("vision")),
    # fair share: everyone with a role reads the departments they read; platform admins set shares
    Row("api-fair-share", "get", ANY_ROLE),
    Row("api-fair-share-department", "patch", PLATFORM_CHANGES_NLP, kwargs=lambda s: {"department_id": s.world.nlp.pk},
        body=lambda s, p: {"shares": 3}),
    Row("api-allocation-utilisation", "get", READ_ALLOCATION, kwargs=allocation("pending")),
    # usage accounting
    Row("api-usage", "get", ANY_ROLE),
    Row("api-rate-cards", "get", ANY_ROLE),
    Row("api-rate-cards", "post", PLATFORM_CREATES_FOR_ROLES, body=lambda s, p: {
        "flavor": s.world.h100.pk, "price_per_gpu_hour": "1.5", "currency": "EUR", "valid_from": timezone.now().isoformat(),
    }),
    Row("api-rate-card", "get", ANY_ROLE, kwargs=lambda s: {"rate_card_id": s.rate_card.pk}),
    Row("api-rate-card-end", "post", PLATFORM_CHANGES, kwargs=lambda s: {"rate_card_id": s.rate_card.pk},
        body=lambda s, p: {"valid_to": (timezone.now() + datetime.timedelta(days=1)).isoformat()}),
    Row("api-statements", "get", ANY_ROLE),
    Row("api-statement-preview", "get", QUERY_REQUIRED),  # ?department= is required
    Row("api-statement", "get", STATEMENT_READ, kwargs=lambda s: {"statement_id": s.statement.pk}),
    Row("api-statement-lines-csv", "get", STATEMENT_READ, kwargs=lambda s: {"statement_id": s.statement.pk}),
    Row("api-statement-corrections", "post", STATEMENT_CORRECT, kwargs=lambda s: {"statement_id": s.statement.pk},
        body=lambda s, p: {"project": s.world.llm.pk, "flavor": s.world.a100.pk, "amount": "1.00", "reason": "matrix"}),
    # idle grants: the case is on nlp's failed grant, which nlp_member requested
    Row("api-idle-policies", "get", ANY_ROLE),
    Row("api-idle-policies", "post", PLATFORM_CREATES_FOR_ROLES,
        body=lambda s, p: {"name": "interactive", "window_minutes": 120, "grace_minutes": 60, "action": "notify"}),
    Row("api-idle-policy", "get", ANY_ROLE, kwargs=lambda s: {"policy_id": s.idle_policy.pk}),
    Row("api-idle-policy", "patch", PLATFORM_CHANGES, kwargs=lambda s: {"policy_id": s.idle_policy.pk},
        body=lambda s, p: {"grace_minutes": 30}),
    Row("api-idle-cases", "get", ANY_ROLE),
    Row("api-idle-case", "get", READ_NLP, kwargs=lambda s: {"case_id": s.idle_case.pk}),
    Row("api-idle-case-keep", "post", RELEASE, kwargs=lambda s: {"case_id": s.idle_case.pk},
        body=lambda s, p: {"reason": "a long data-loading phase"}),
    Row("api-idle-case-exempt", "post", DECIDE, kwargs=lambda s: {"case_id": s.idle_case.pk},
        body=lambda s, p: {"until": (timezone.now() + datetime.timedelta(days=2)).isoformat(), "reason": "serving"}),
    Row("api-idle-case-release", "post", RELEASE, kwargs=lambda s: {"case_id": s.idle_case.pk}, body=lambda s, p: {}),
    # what-ifs (docs/twin.md): nlp's, asked for by nlp_admin
    Row("api-what-ifs", "get", ANY_ROLE),
    Row("api-what-ifs", "post", WHAT_IF_IN_NLP, body=lambda s, p: {
        "department": s.world.nlp.pk, "history_days": 7, "changes": [{"kind": "quota", "department": "nlp", "limit_delta": 4}],
    }),
    Row("api-what-if", "get", WHAT_IF_READ_NLP, kwargs=what_if),
    # the inventory
    Row("api-clusters", "get", SIGNED_IN),
    Row("api-clusters", "post", PLATFORM_CREATES, body=lambda s, p: {"name": "second-cluster"}),
    Row("api-cluster", "get", ANY_ROLE, kwargs=cluster),
    Row("api-cluster", "patch", PLATFORM_ACTS, kwargs=cluster,
        body=lambda s, p: {"display_name": "GPU cluster A", "use_volcano": True, "sharing_reserve_percent": 20}),
    Row("api-cluster-kubeconfig", "put", PLATFORM_PUTS, kwargs=cluster, body=lambda s, p: {"kubeconfig": KUBECONFIG}),
    # Drift and pushes: every role may ask; each sees only its departments' rows (LISTINGS below).
    Row("api-cluster-drift", "get", ANY_ROLE, kwargs=cluster),
    Row("api-cluster-pushes", "get", ANY_ROLE, kwargs=cluster),
    Row("api-nodes", "get", SIGNED_IN),
    Row("api-cluster-manifests", "get", PLATFORM_OR_AUDITOR, kwargs=cluster),
    Row("api-node", "get", ANY_ROLE, kwargs=lambda s: {"node_id": s.node.pk}),
    Row("api-node", "patch", PLATFORM_ACTS, kwargs=lambda s: {"node_id": s.node.pk}, body=lambda s, p: {"is_schedulable": True}),
    # delivery
    Row("api-cluster-sync", "post", PLATFORM_QUEUES, kwargs=cluster),
    Row("api-cluster-discover", "post", PLATFORM_ACTS, kwargs=cluster),
    # the audit log
    Row("audit:event-list", "get", AUDIT_READ),
    Row("audit:export", "get", AUDIT_READ),
    Row("audit:checkpoint-publish", "post", AUDIT_PUBLISH),
    Row("audit:checkpoint-latest", "get", AUDIT_READ),
    Row("audit:checkpoint-consistency", "get", AUDIT_READ),
    Row("audit:keys", "get", AUDIT_READ),
    # the custody ledger: scoped as the audit log
    Row("custody:custody", "get", AUDIT_READ, body=lambda s, p: {"device": "GPU-nothing-held-it"}),
    # telemetry; the report endpoint takes node tokens only (test_only_a_nodes_own_token_reports)
    Row("api-node-report", "post", NODE_REPORT, kwargs=lambda s: {"node_name": s.node.name}, body=lambda s, p: {}),
    Row("api-node-tokens", "get", NODE_TOKENS),
    Row("api-node-tokens", "post", ISSUE_NODE_TOKEN,
        body=lambda s, p: {"cluster": s.world.cluster.pk, "node_name": "a100-1"}),
    Row("api-node-token", "get", NODE_TOKENS, kwargs=lambda s: {"token_id": s.token.pk}),
    Row("api-node-token-revoke", "post", NODE_TOKENS, kwargs=lambda s: {"token_id": s.token.pk}),
    Row("api-telemetry-nodes", "get", SIGNED_IN),
    # Every role sees the node; the processes (pods) on its GPUs only within reach (test_a_node_shows_...).
    Row("api-telemetry-node", "get", ANY_ROLE, kwargs=lambda s: {"node_id": s.node.pk}),
    Row("api-telemetry-gpu-samples", "get", ANY_ROLE, kwargs=lambda s: {"gpu_id": s.observed.pk}),
    # notifications: nlp's webhooks, the caller's preferences, the deliveries (platform admins)
    Row("api-department-webhooks", "get", WEBHOOKS_READ, kwargs=lambda s: {"department_id": s.world.nlp.pk}),
    Row("api-department-webhooks", "post", WEBHOOKS_ADD, kwargs=lambda s: {"department_id": s.world.nlp.pk},
        body=lambda s, p: {"name": "chat", "url": "https://hooks.example.org/x", "format": "slack"}),
    Row("api-webhook", "get", WEBHOOKS_READ, kwargs=webhook),
    Row("api-webhook", "patch", WEBHOOK_CHANGE, kwargs=webhook, body=lambda s, p: {"is_active": False}),
    Row("api-webhook", "delete", WEBHOOK_REMOVE, kwargs=webhook),
    Row("api-notification-preferences", "get", SIGNED_IN),
    Row("api-notification-preferences", "put", SIGNED_IN, body=lambda s, p: {"allocation.expiring": "digest"}),
    Row("api-notification-deliveries", "get", NODE_TOKENS),
]


class OfflineDriver:
    """Discovery's driver without a cluster behind it: it finds no nodes."""

    def read_nodes(self) -> list[dict[str, Any]]:
        return []

    def close(self) -> None:
        pass


@pytest.fixture
def offline_discovery(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("delivery.discovery.driver_for", lambda cluster: OfflineDriver())


def send(scene: Scene, row: Row, persona: str | None) -> Any:
    """The response ``persona`` gets, with whatever the request changed rolled back."""
    url = reverse(row.route, kwargs=row.kwargs(scene))
    with transaction.atomic():
        response = getattr(scene.world.client(persona), row.method)(url, row.body(scene, persona), format="json")
        if isinstance(response, StreamingHttpResponse):
            response.getvalue()  # the stream reads the database: read it before the rollback
        transaction.set_rollback(True)
    return response


@pytest.mark.parametrize("row", ROWS, ids=lambda row: row.id)
def test_every_route_answers_each_persona_as_the_matrix_says(scene: Scene, row: Row, offline_discovery: None) -> None:
    answered = {persona: send(scene, row, persona).status_code for persona in PERSONAS}
    assert answered == row.expect


# --------------------------------------------------------------------------- every route has a row


def _walk(patterns: list[URLPattern | URLResolver], prefix: str, namespace: str) -> Iterator[tuple[str, str, Any]]:
    """(route, qualified URL name, view) of every pattern, through includes."""
    for pattern in patterns:
        route = prefix + str(pattern.pattern)
        if isinstance(pattern, URLResolver):
            inner = f"{namespace}{pattern.namespace}:" if pattern.namespace else namespace
            yield from _walk(pattern.url_patterns, route, inner)
        else:
            yield route, f"{namespace}{pattern.name}" if pattern.name else "", pattern.callback


def view_methods(view: Any) -> set[str]:
    """The HTTP methods a class-based view implements, without the OPTIONS and HEAD every view has."""
    cls = getattr(view, "view_class", None) or getattr(view, "cls", None)
    assert cls is not None, f"{view} is not a class-based view"
    return {method for method in cls.http_method_names if method not in ("options", "head") and hasattr(cls, method)}


def api_routes() -> set[tuple[str, str]]:
    found: set[tuple[str, str]] = set()
    for route, name, view in _walk(get_resolver().url_patterns, "", ""):
        if route.startswith(API_PREFIX):
            assert name, f"/{route} has no URL name: name it, then give it a row in ROWS"
            found |= {(name, method) for method in view_methods(view)}
    return found


def test_every_api_route_has_a_row() -> None:
    routes = api_routes()
    rows = [(row.route, row.method) for row in ROWS]
    assert len(rows) == len(set(rows)), "a route and method has two rows"
    assert sorted(routes - set(rows)) == [], "routes without a row in ROWS: add one per method"
    assert sorted(set(rows) - routes) == [], "rows for routes or methods that do not exist"


def test_the_walk_finds_the_whole_api() -> None:
    """Guards the walk itself: a known nested route (an app namespace under a prefix) is found."""
    routes = api_routes()
    assert ("audit:checkpoint-latest", "get") in routes
    assert ("api-allocation-renew", "post") in routes
    assert len({name for name, _ in routes}) >= 41


# ----------------------------------------------------------------------------- what lists leak


def _keys(response: Any, key: Callable[[dict[str, Any]], Any]) -> set[Any] | int:
    if response.status_code != 200:
        return int(response.status_code)
    return {key(item) for item in response.json()["results"]}


@dataclass(frozen=True)
class Listing:
    route: str
    key: Callable[[Scene, dict[str, Any]], Any]
    visible: dict[str, set[str] | int]
    kwargs: Callable[[Scene], dict[str, Any]] = nothing


def allocation_label(scene: Scene, item: dict[str, Any]) -> str:
    labels = {scene.pending.pk: "nlp pending", scene.failed.pk: "nlp failed", scene.speech.pk: "speech",
              scene.vision.pk: "vision"}
    return labels.get(item["id"], f"unexpected #{item['id']}")


def slug_or_dash(value: str | None) -> str:
    return value or "-"


def event_department(scene: Scene, item: dict[str, Any]) -> str:
    world = scene.world
    slugs = {department.pk: department.slug for department in (world.acme, world.nlp, world.speech, world.vision)}
    return slugs.get(item["department_id"], "-")


NLP_ALLOCATIONS = {"nlp pending", "nlp failed", "speech"}
ALL_ALLOCATIONS = NLP_ALLOCATIONS | {"vision"}
ALL_PROJECTS = {"nlp-llm", "speech-asr", "vision-seg"}
PUSHED = {"nlp-llm", "vision-seg", "-"}
FLAVORS = {"a100", "a100-1g", "h100", "h100-mps"}

LISTINGS = [
    Listing("api-projects", lambda s, item: item["slug"], {
        "nlp_member": {"nlp-llm", "speech-asr"}, "nlp_admin": {"nlp-llm", "speech-asr"}, "speech_member": {"speech-asr"},
        "vision_member": {"vision-seg"}, "vision_admin": {"vision-seg"}, "auditor": ALL_PROJECTS,
        "platform": ALL_PROJECTS, "nobody": set(),
    }),
    Listing("api-allocations", allocation_label, {
        "nlp_member": NLP_ALLOCATIONS, "nlp_admin": NLP_ALLOCATIONS, "speech_member": {"speech"},
        "vision_member": {"vision"}, "vision_admin": {"vision"}, "auditor": ALL_ALLOCATIONS,
        "platform": ALL_ALLOCATIONS, "nobody": set(),
    }),
    Listing("api-allocation-changes", lambda s, item: item["project"], {
        "nlp_member": set(), "nlp_admin": set(), "speech_member": set(), "vision_member": {"vision-seg"},
        "vision_admin": {"vision-seg"}, "auditor": {"vision-seg"}, "platform": {"vision-seg"}, "nobody": set(),
    }),
    Listing("api-quotas", lambda s, item: item["department"], {
        "nlp_member": {"nlp"}, "nlp_admin": {"nlp"}, "speech_member": set(), "vision_member": {"vision"},
        "vision_admin": {"vision"}, "auditor": {"acme", "nlp", "vision"}, "platform": {"acme", "nlp", "vision"},
        "nobody": set(),
    }),
    Listing("api-quota-windows", lambda s, item: item["department"], {
        "nlp_member": {"nlp"}, "nlp_admin": {"nlp"}, "speech_member": set(), "vision_member": {"vision"},
        "vision_admin": {"vision"}, "auditor": {"nlp", "vision"}, "platform": {"nlp", "vision"}, "nobody": set(),
    }),
    Listing("audit:event-list", event_department, {
        "nlp_member": 404, "nlp_admin": {"nlp", "nlp-speech"}, "speech_member": 404, "vision_member": 404,
        "vision_admin": {"vision"}, "auditor": {"nlp", "nlp-speech", "vision", "-"},
        "platform": {"nlp", "nlp-speech", "vision", "-"}, "nobody": 404,
    }),
    # Pushes of the cluster-wide objects ("-") only for those who read every department.
    Listing("api-cluster-pushes", lambda s, item: slug_or_dash(item["project"]), {
        "nlp_member": {"nlp-llm"}, "nlp_admin": {"nlp-llm"}, "speech_member": set(), "vision_member": {"vision-seg"},
        "vision_admin": {"vision-seg"}, "auditor": PUSHED, "platform": PUSHED, "nobody": 404,
    }, kwargs=cluster),
    Listing("api-cluster-drift", lambda s, item: f"{item['namespace']}/{item['name']}", {
        "nlp_member": set(), "nlp_admin": set(), "speech_member": set(), "vision_member": {"vision-seg/gpu"},
        "vision_admin": {"vision-seg/gpu"}, "auditor": {"vision-seg/gpu"}, "platform": {"vision-seg/gpu"}, "nobody": 404,
    }, kwargs=cluster),
    Listing("api-node-tokens", lambda s, item: item["node_name"], {
        "nlp_member": 403, "nlp_admin": 403, "speech_member": 403, "vision_member": 403, "vision_admin": 403,
        "auditor": 403, "platform": {"h100-0"}, "nobody": 403,
    }),
    Listing("api-flavors", lambda s, item: item["name"], {
        **{persona: FLAVORS for persona in PERSONAS if persona is not None}, "nobody": set(),
    }),
    Listing("api-nodes", lambda s, item: item["name"], {
        **{persona: {"a100-0", "a100-1", "h100-0"} for persona in PERSONAS if persona is not None}, "nobody": set(),
    }),
    Listing("api-telemetry-nodes", lambda s, item: item["name"], {
        **{persona: {"a100-0", "a100-1", "h100-0"} for persona in PERSONAS if persona is not None}, "nobody": set(),
    }),
]


@pytest.mark.parametrize("listing", LISTINGS, ids=lambda listing: listing.route)
def test_lists_show_only_the_rows_within_reach(scene: Scene, listing: Listing) -> None:
    url = reverse(listing.route, kwargs=listing.kwargs(scene))
    seen = {
        persona: _keys(scene.world.client(persona).get(url, {"page_size": 500}), lambda item: listing.key(scene, item))
        for persona in listing.visible
    }
    assert seen == listing.visible


def test_a_node_shows_the_processes_only_of_departments_within_reach(scene: Scene) -> None:
    """The pod on the GPU vision's allocation holds: vision's people, the auditor of the root and
    platform admins see it; nlp's and speech's do not (the node itself they all see)."""
    url = reverse("api-telemetry-node", kwargs={"node_id": scene.node.pk})
    seen = {}
    for persona in ("nlp_member", "nlp_admin", "speech_member", "vision_member", "vision_admin", "auditor", "platform"):
        body = scene.world.client(persona).get(url).json()
        seen[persona] = {process["pod_uid"] for gpu in body["gpus"] for process in gpu["processes"] or []}
    vision = {"pod-of-vision"}
    assert seen == {"nlp_member": set(), "nlp_admin": set(), "speech_member": set(), "vision_member": vision,
                    "vision_admin": vision, "auditor": vision, "platform": vision}


def test_only_a_nodes_own_token_reports(scene: Scene) -> None:
    """The report endpoint answers node tokens only: a user's API token is refused like no token."""
    url = reverse("api-node-report", kwargs={"node_name": scene.node.name})
    other = reverse("api-node-report", kwargs={"node_name": "a100-0"})

    def post(target: str, authorization: str | None) -> int:
        client = APIClient()
        if authorization:
            client.credentials(HTTP_AUTHORIZATION=authorization)
        return int(client.post(target, b"{}", content_type="application/json").status_code)

    user_token = access_token_create(actor=scene.world.users["platform"], name="not a node", scope="write").key
    assert post(url, None) == 401
    assert post(url, f"Token {user_token}") == 401
    assert post(url, "Bearer gpn_unknown.secret") == 401
    assert post(other, f"Bearer {scene.token_text}") == 403  # another node's name
    assert post(url, f"Bearer {scene.token_text}") == 400  # the right token; the empty report fails the schema


# ------------------------------------------------------------------ the first rows, with their effects


@pytest.mark.parametrize("persona", PERSONAS)
def test_it_shows_an_allocation_only_within_reach(world: World, persona: str | None) -> None:
    allocation = pending(world)
    response = world.client(persona).get(f"/api/v1/allocations/{allocation.pk}/")
    assert response.status_code == expect(READ_ALLOCATION, persona)


@pytest.mark.parametrize("action", ["approve", "reject"])
@pytest.mark.parametrize("persona", PERSONAS)
def test_it_lets_only_department_and_platform_admins_decide(
    world: World, persona: str | None, action: str, django_capture_on_commit_callbacks: Any
) -> None:
    allocation = pending(world)
    with django_capture_on_commit_callbacks(execute=False):
        response = world.client(persona).post(
            f"/api/v1/allocations/{allocation.pk}/{action}/", {"comment": "decided"}, format="json"
        )
    assert response.status_code == expect(DECIDE, persona), response.content
    allocation.refresh_from_db()
    assert (allocation.state != "pending") == (response.status_code == 200)


@pytest.mark.parametrize("persona", PERSONAS)
def test_it_lets_members_and_admins_release(world: World, persona: str | None) -> None:
    allocation = pending(world)
    response = world.client(persona).post(f"/api/v1/allocations/{allocation.pk}/release/", {}, format="json")
    assert response.status_code == expect(RELEASE, persona), response.content


@pytest.mark.parametrize("persona", PERSONAS)
def test_it_lets_only_project_members_and_admins_request(world: World, persona: str | None) -> None:
    body = {"project": world.llm.pk, "flavor": world.a100.pk, "quantity": 1, "justification": "x", **world.window()}
    response = world.client(persona).post("/api/v1/allocations/", body, format="json")
    assert response.status_code == expect(REQUEST, persona), response.content
    if response.status_code == 400:
        assert "project" in response.json()["error"]["fields"]
    assert Allocation.objects.count() == (1 if response.status_code == 201 else 0)


@pytest.mark.parametrize("persona", PERSONAS)
def test_it_lets_only_platform_admins_change_the_catalogue(world: World, persona: str | None) -> None:
    body = {"name": "l40s", "display_name": "L40S", "gpu_model": "NVIDIA-L40S", "sharing_mode": "exclusive",
            "resource_name": "nvidia.com/gpu", "memory_mib": 46068, "compute_percent": 100, "gpu_equivalents": "1"}
    response = world.client(persona).post("/api/v1/flavors/", body, format="json")
    assert response.status_code == expect(CREATE_FLAVOR, persona), response.content


@pytest.mark.parametrize("persona", PERSONAS)
def test_it_lets_department_admins_create_projects_in_their_department(world: World, persona: str | None) -> None:
    body = {"slug": "nlp-new", "name": "New", "department": world.nlp.pk}
    response = world.client(persona).post("/api/v1/projects/", body, format="json")
    assert response.status_code == expect(CREATE_PROJECT_IN_NLP, persona), response.content


@pytest.mark.parametrize("persona", PERSONAS)
def test_it_shows_a_project_only_within_reach(world: World, persona: str | None) -> None:
    response = world.client(persona).get(f"/api/v1/projects/{world.llm.pk}/")
    assert response.status_code == expect(READ_PROJECT, persona)


@pytest.mark.parametrize(
    ("persona", "departments", "quotas", "clusters"),
    [
        ("nlp_member", {"nlp", "nlp-speech"}, 4, 1),
        ("speech_member", {"nlp-speech"}, 0, 1),
        ("vision_admin", {"vision"}, 2, 1),
        ("auditor", {"acme", "nlp", "nlp-speech", "vision"}, 7, 1),
        ("platform", {"acme", "nlp", "nlp-speech", "vision"}, 7, 1),
        ("nobody", set(), 0, 0),
    ],
)
def test_it_filters_every_list_by_tenant(
    world: World, persona: str, departments: set[str], quotas: int, clusters: int
) -> None:
    client = world.client(persona)
    assert {row["slug"] for row in client.get("/api/v1/departments/").json()["results"]} == departments
    assert client.get("/api/v1/quotas/").json()["count"] == quotas
    assert client.get("/api/v1/clusters/").json()["count"] == clusters
    pending(world)
    visible = client.get("/api/v1/allocations/").json()["count"]
    assert visible == (1 if "nlp" in departments else 0)
