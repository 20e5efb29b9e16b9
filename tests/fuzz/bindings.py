"""How the fuzz step makes its generated writes valid: for every write operation of the API (POST,
PUT, PATCH, DELETE), the identity whose valid requests to it are counted (its actor), the fresh
objects its path names, and what binds its body; and for every id, time or name field of a write,
what it is bound to.

schemathesis generates each request from the OpenAPI schema; for a request it generated to be
valid ("positive"), sent by the operation's actor, ``tests/fuzz/hooks.py`` (its ``before_call``
hook) then binds:

- the path's ids named in ``Binding.targets`` to an object made for that request alone (a pending
  allocation for each approval, a token for each revocation: a decision consumes its object; a
  ``*_own`` recipe's object is made once per run and changed by every request after), the
  other path ids and the body's fields named in ``FIELDS`` to objects the actor can see and to
  times in the ranges the services accept;
- the body, where ``Binding.body`` names a fix, to the rules across fields that the schema cannot
  state (a temporary window has no recurrence rule; a flavor's mode decides its replicas).

What schemathesis generated elsewhere stays as it is (free text, numbers, flags, enums). The step
prints, for every write operation, how many of its actor's valid requests were answered 2xx and
fails when it is under half (``MIN_VALID_SHARE``), unless ``EXCEPTIONS`` says why that operation
cannot do better; ``tests/fuzz/test_harness.py`` fails when a write operation of the schema, or an
id, time or name field of one, has no binding here, so a new route is never left unexercised.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

WRITE_METHODS = frozenset({"post", "put", "patch", "delete"})
MIN_VALID_SHARE = 0.5


@dataclass(frozen=True)
class Binding:
    """``actor``: the identity (``tests/fuzz/run.py``) whose valid requests count for the operation.
    ``targets``: path parameter → recipe (``hooks.RECIPES``) making a fresh object for each request;
    a recipe may give several path parameters (a membership and its department).
    ``body``: a fix (``hooks.FIXES``) for the rules across body fields, or None."""

    actor: str
    targets: Mapping[str, str] = field(default_factory=dict)
    body: str | None = None


R, D, P = "researcher", "department-admin", "platform-admin"

OPERATIONS: dict[str, Binding] = {
    # Allocations: the researcher asks, the department admin decides (never their own: four-eyes).
    "v1_allocations_create": Binding(R, body="allocation"),
    # What approving a request would do, before it is submitted: the same body, nothing written.
    "v1_allocations_preview_create": Binding(R, body="allocation"),
    # Why such a request would wait (the same body, nothing written).
    "v1_allocations_simulate_create": Binding(R, body="allocation"),
    "v1_allocations_approve_create": Binding(D, {"allocation_id": "allocation_pending"}),
    "v1_allocations_reject_create": Binding(D, {"allocation_id": "allocation_pending"}, body="reject"),
    "v1_allocations_release_create": Binding(R, {"allocation_id": "allocation_granted"}),
    "v1_allocations_renew_create": Binding(R, {"allocation_id": "allocation_granted"}, body="renew"),
    "v1_allocations_resize_create": Binding(R, {"allocation_id": "allocation_granted"}, body="resize"),
    "v1_allocations_retry_create": Binding(P, {"allocation_id": "allocation_granted"}),
    "v1_allocation_changes_approve_create": Binding(D, {"change_id": "change_pending"}),
    "v1_allocation_changes_reject_create": Binding(D, {"change_id": "change_pending"}, body="reject"),
    "v1_allocation_changes_cancel_create": Binding(R, {"change_id": "change_pending"}),
    # Quota windows: a department admin asks, a platform admin decides.
    "v1_quota_windows_create": Binding(D, body="window"),
    "v1_quota_windows_approve_create": Binding(P, {"window_id": "window_pending"}),
    "v1_quota_windows_reject_create": Binding(P, {"window_id": "window_pending"}, body="reject"),
    "v1_quota_windows_cancel_create": Binding(D, {"window_id": "window_pending"}),
    # Quotas, priority classes, flavors, clusters, departments, projects: the platform admin, on
    # objects made for the request where a change could starve the other identities' runs.
    "v1_quotas_create": Binding(P, body="quota"),
    # With four-eyes on, their changes answer 202 with a pending rule change (an emergency with its
    # reason applies at once): both are 2xx.
    "v1_quotas_partial_update": Binding(P, {"quota_id": "quota_own"}, body="quota_numbers"),
    "v1_quotas_destroy": Binding(P, {"quota_id": "quota_fresh"}, body="emergency"),
    "v1_priority_classes_create": Binding(P, body="priority_class"),
    "v1_priority_classes_partial_update": Binding(P, {"priority_class_id": "priority_class_own"}, body="priority_class_change"),
    "v1_priority_classes_destroy": Binding(P, {"priority_class_id": "priority_class_fresh"}, body="emergency"),
    # Four-eyes on the rules: the platform admin decides a change the second platform admin proposed,
    # and withdraws one of its own.
    "v1_rule_changes_approve_create": Binding(P, {"change_id": "rule_change_pending"}),
    "v1_rule_changes_reject_create": Binding(P, {"change_id": "rule_change_pending"}, body="reject"),
    "v1_rule_changes_withdraw_create": Binding(P, {"change_id": "rule_change_own"}),
    "v1_flavors_create": Binding(P, body="flavor"),
    "v1_flavors_partial_update": Binding(P, {"flavor_id": "flavor_own"}, body="flavor"),
    "v1_clusters_create": Binding(P, body="cluster"),
    "v1_clusters_partial_update": Binding(P, {"cluster_id": "cluster_own"}, body="cluster_settings"),
    "v1_clusters_discover_create": Binding(P),
    "v1_clusters_sync_create": Binding(P),
    "v1_clusters_kubeconfig_update": Binding(P, {"cluster_id": "cluster_own"}, body="kubeconfig"),
    "v1_departments_create": Binding(P, body="department"),
    "v1_departments_partial_update": Binding(P, {"department_id": "department_fresh"}),
    "v1_departments_members_create": Binding(P, body="membership"),
    "v1_departments_members_destroy": Binding(P, {"membership_id": "membership_fresh"}),
    "v1_departments_webhooks_create": Binding(D, body="webhook"),
    "v1_webhooks_partial_update": Binding(D, {"webhook_id": "webhook_fresh"}, body="webhook"),
    "v1_webhooks_destroy": Binding(D, {"webhook_id": "webhook_fresh"}),
    "v1_fair_share_partial_update": Binding(P),
    "v1_group_mappings_create": Binding(P),
    "v1_group_mappings_destroy": Binding(P, {"mapping_id": "group_mapping_fresh"}),
    "v1_projects_create": Binding(P, body="project"),
    "v1_projects_partial_update": Binding(P, {"project_id": "project_fresh"}),
    "v1_projects_members_create": Binding(P, {"project_id": "project_fresh"}),
    "v1_projects_members_destroy": Binding(P, {"user_id": "project_member_fresh"}),
    "v1_projects_quotas_update": Binding(D, body="project_caps"),
    # Idle cases, policies; accounting.
    "v1_idle_cases_exempt_create": Binding(D, {"case_id": "idle_case_open"}, body="idle_reason"),
    "v1_idle_cases_keep_create": Binding(R, {"case_id": "idle_case_open"}, body="idle_reason"),
    "v1_idle_cases_release_create": Binding(R, {"case_id": "idle_case_open"}),
    "v1_idle_policies_create": Binding(P, body="idle_policy"),
    # A policy made for the request: a change of the demo's policies could close the open cases.
    "v1_idle_policies_partial_update": Binding(P, {"policy_id": "idle_policy_own"}, body="idle_policy"),
    "v1_rate_cards_create": Binding(P, body="rate_card"),
    "v1_rate_cards_end_create": Binding(P, {"rate_card_id": "rate_card_fresh"}),
    "v1_statements_corrections_create": Binding(P, body="correction"),
    # Tokens, sign-in, nodes, the audit log, preferences.
    "v1_auth_token_create": Binding(P),
    "v1_auth_tokens_create": Binding(R),
    "v1_auth_tokens_destroy": Binding("auditor", {"token_id": "access_token_fresh"}),
    # A token a platform admin issued for the researcher (identities.py), claimed once by its owner.
    "v1_auth_tokens_claim_create": Binding(R, {"token_id": "access_token_issued"}),
    "v1_auth_unlock_create": Binding(P, body="unlock"),
    "v1_node_tokens_create": Binding(P, body="node_token"),
    "v1_node_tokens_revoke_create": Binding(P, {"token_id": "node_token_fresh"}),
    "v1_nodes_partial_update": Binding(P, {"node_id": "node_fresh"}, body="node_settings"),
    "v1_nodes_report_create": Binding("node-agent", body="node_report"),
    "v1_audit_checkpoints_create": Binding("auditor"),
    # A what-if replays a short uploaded workload under a proposed change (the task runs in-process here; hooks.fix_what_if).
    "v1_what_ifs_create": Binding(P, body="what_if"),
    "v1_me_notification_preferences_update": Binding(R),
}

# Write operations whose valid requests cannot mostly succeed, and why; they are still bound and
# counted, not held to MIN_VALID_SHARE.
EXCEPTIONS: dict[str, str] = {
    "v1_allocations_retry_create": "only an allocation whose push failed can be retried; the step's manifests cluster never fails a push",
    "v1_clusters_discover_create": "discovery needs the Kubernetes driver and a live cluster; the step has a manifests cluster only",
}

# Body fields and path parameters of the writes → what binds them (``hooks.BINDERS``): ids of the
# objects the actor can see, times in the accepted ranges, the demo users. Fields a ``Binding.body``
# fix sets need no entry; an id, time or name field of a write with neither fails the harness test.
FIELDS: dict[str, str] = {
    "department": "department", "department_id": "department", "parent": "department",
    "project": "project", "project_id": "project", "flavor": "flavor", "flavor_id": "flavor",
    "cluster": "cluster", "cluster_id": "cluster", "priority_class": "priority_class",
    "priority_class_id": "priority_class", "quota": "quota", "quota_id": "quota", "node_id": "node",
    "policy_id": "policy", "statement_id": "statement", "node_name": "node_name",
    "starts_at": "soon", "begins_at": "soon", "valid_from": "soon", "ends_at": "later", "valid_to": "later",
    "until": "later", "expires_at": "later", "quantity": "one",
    "username": "username", "password": "password", "user": "username", "members": "no_members",
}  # fmt: skip
