"""The registry of audit action codes: stable, unique, grouped by domain in hundreds.

Codes are part of the exported log's contract; never renumber or reuse one.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class AuditAction:
    number: int
    code: str
    description: str


_REGISTRY: dict[str, AuditAction] = {}
_NUMBERS: dict[int, str] = {}


def register(number: int, code: str, description: str) -> AuditAction:
    if code in _REGISTRY or number in _NUMBERS:
        raise ValueError(f"audit action {code!r} / {number} is registered twice")
    action = AuditAction(number=number, code=code, description=description)
    _REGISTRY[code] = action
    _NUMBERS[number] = code
    return action


def get_action(code: str) -> AuditAction:
    try:
        return _REGISTRY[code]
    except KeyError:
        raise ValueError(f"unknown audit action {code!r}; register it in audit.actions") from None


def all_actions() -> list[AuditAction]:
    return sorted(_REGISTRY.values(), key=lambda action: action.number)


# 1xx authentication and authorisation
AUTH_LOGIN = register(100, "auth.login", "A user logged in")
AUTH_LOGIN_FAILED = register(101, "auth.login_failed", "A login attempt failed")
AUTH_LOGOUT = register(102, "auth.logout", "A user logged out")
AUTH_TOKEN_ISSUED = register(103, "auth.token_issued", "An API token was issued")
AUTH_LOCKED_OUT = register(104, "auth.locked_out", "Sign-in was locked for a username or address after repeated failures")
AUTH_UNLOCKED = register(105, "auth.unlocked", "A sign-in lock was lifted by an administrator")
AUTH_DENIED = register(110, "auth.denied", "An action was refused for lack of permission")
ACCESS_TOKEN_CREATED = register(120, "access_token.created", "A personal access token was created")
ACCESS_TOKEN_REVOKED = register(121, "access_token.revoked", "A personal access token was revoked")
ACCESS_TOKEN_ISSUED = register(
    122, "access_token.issued", "A platform admin issued a personal access token for someone else (its owner claims its text)"
)
ACCESS_TOKEN_CLAIMED = register(123, "access_token.claimed", "A token issued by a platform admin was claimed by its owner")
ACCOUNT_DEACTIVATED = register(
    130, "account.deactivated", "An account was deactivated (its sessions ended, its tokens revoked)"
)
ACCOUNT_REACTIVATED = register(131, "account.reactivated", "An account was reactivated")
ACCOUNT_CREATED_ADMIN = register(132, "account.created", "An account was created in the Django admin")
ACCOUNT_CHANGED_ADMIN = register(
    133, "account.changed", "An account's name, e-mail, flags or groups were changed in the Django admin"
)
ACCOUNT_PASSWORD_SET = register(
    134, "account.password_set", "An administrator set another account's password in the Django admin"
)
ACCOUNT_PROVISIONED_OIDC = register(
    145, "account.provisioned_oidc", "An account was created at its first sign-in through an OpenID Connect provider"
)
# LDAP directory (tenants/ldap/, docs/identity.md "LDAP")
LDAP_ACCOUNT_LINKED = register(146, "ldap.account_linked", "A portal account was created for a directory entry")
LDAP_LINK_REFUSED = register(
    147, "ldap.link_refused", "A directory sign-in was refused: a local account already has that username"
)
LDAP_SYNC_HALTED = register(148, "ldap.sync_halted", "The directory sync deactivated nobody: past its safety threshold")

# 2xx tenants
DEPARTMENT_CREATED = register(200, "department.created", "A department was created")
DEPARTMENT_UPDATED = register(201, "department.updated", "A department was changed")
MEMBERSHIP_GRANTED = register(210, "membership.granted", "A role was granted")
MEMBERSHIP_REVOKED = register(211, "membership.revoked", "A role was revoked")
MEMBERSHIP_CHANGED = register(212, "membership.changed", "A role grant was changed (its user, department, role or source)")
PROJECT_CREATED = register(220, "project.created", "A project was created")
PROJECT_UPDATED = register(221, "project.updated", "A project was changed")
PROJECT_MEMBER_ADDED = register(222, "project.member_added", "A member was added to a project")
PROJECT_MEMBER_REMOVED = register(223, "project.member_removed", "A member was removed from a project")
PROJECT_QUOTA_SET = register(224, "project.quota_set", "A project's share of its department's quota was set")
GROUP_MAPPING_CREATED = register(230, "group_mapping.created", "An identity provider group was mapped to a role")
GROUP_MAPPING_DELETED = register(231, "group_mapping.deleted", "A group-to-role mapping was removed")
GROUP_MAPPING_UPDATED = register(232, "group_mapping.updated", "A group-to-role mapping was changed")

# 3xx catalogue: flavors, quotas, priority classes
FLAVOR_CREATED = register(300, "flavor.created", "A flavor was created")
FLAVOR_UPDATED = register(301, "flavor.updated", "A flavor was changed")
QUOTA_SET = register(310, "quota.set", "A quota was created or changed")
QUOTA_DELETED = register(311, "quota.deleted", "A quota was removed")
QUOTA_WINDOW_REQUESTED = register(312, "quota_window.requested", "A quota window was requested for approval")
QUOTA_WINDOW_APPROVED = register(313, "quota_window.approved", "A quota window was approved (or created in force by a platform admin)")
QUOTA_WINDOW_REJECTED = register(314, "quota_window.rejected", "A quota window was rejected")
QUOTA_WINDOW_CANCELLED = register(315, "quota_window.cancelled", "A quota window was cancelled")
QUOTA_WINDOW_EDGE = register(316, "quota_window.edge", "A quota window began or ended: the effective quota changed")
QUOTA_WINDOW_SHRINK_WARNED = register(317, "quota_window.shrink_warned", "A coming shrink of a quota was announced to the grants it hits")
QUOTA_WINDOW_RECLAIM_MET = register(
    319, "quota_window.reclaim_met", "A quota window's shrink reclaimed, on a later tick, the grants that were in its way"
)
PLACEMENT_DEFRAG_RUN = register(318, "placement.defrag_run", "A scheduled defragmentation pass ran (or reported, dry-run)")
PRIORITY_CLASS_CREATED = register(320, "priority_class.created", "A priority class was created")
PRIORITY_CLASS_UPDATED = register(321, "priority_class.updated", "A priority class was changed")
PRIORITY_CLASS_DELETED = register(322, "priority_class.deleted", "A priority class was removed")
RULE_CHANGE_PROPOSED = register(
    330, "rule_change.proposed", "A change of a quota or priority class waits for a second platform admin (four-eyes)"
)
RULE_CHANGE_APPROVED = register(331, "rule_change.approved", "A pending change of a quota or priority class was approved and applied")
RULE_CHANGE_REJECTED = register(332, "rule_change.rejected", "A pending change of a quota or priority class was rejected")
RULE_CHANGE_WITHDRAWN = register(333, "rule_change.withdrawn", "A pending change of a quota or priority class was withdrawn")
RULE_CHANGE_EMERGENCY = register(
    334, "rule_change.emergency", "A change of a quota, quota window or priority class applied at once as an emergency, with its reason"
)

# 4xx allocations
ALLOCATION_REQUESTED = register(400, "allocation.requested", "An allocation was requested")
ALLOCATION_APPROVED = register(401, "allocation.approved", "An allocation was approved")
ALLOCATION_REJECTED = register(402, "allocation.rejected", "An allocation was rejected")
ALLOCATION_CANCELLED = register(403, "allocation.cancelled", "A pending allocation was withdrawn")
ALLOCATION_PROVISIONING = register(404, "allocation.provisioning", "Provisioning of an allocation started")
ALLOCATION_ACTIVATED = register(405, "allocation.activated", "An allocation reached its cluster")
ALLOCATION_FAILED = register(406, "allocation.failed", "Provisioning of an allocation failed")
ALLOCATION_RELEASED = register(407, "allocation.released", "An allocation was released")
ALLOCATION_EXPIRED = register(408, "allocation.expired", "An allocation expired")
ALLOCATION_RENEWED = register(409, "allocation.renewed", "An allocation's end was extended")
ALLOCATION_ADMISSION_DENIED = register(410, "allocation.admission_denied", "Approval was refused by admission")
ALLOCATION_PLACED = register(411, "allocation.placed", "Units granted before GPU placement were booked on GPUs")
ALLOCATION_MOVED = register(412, "allocation.moved", "A defragmentation plan moved an allocation's units to other GPUs")
ALLOCATION_SCHEDULED = register(413, "allocation.scheduled", "An approved allocation holds its booking until its start")
ALLOCATION_STARTED = register(414, "allocation.started", "A scheduled allocation reached its start and is provisioned")
ALLOCATION_RECLAIMING = register(
    415, "allocation.reclaiming", "An allocation was chosen to make room for another request and runs until its notice ends"
)
ALLOCATION_RECLAIMED = register(416, "allocation.reclaimed", "A reclaimed allocation's capacity and quota were released")
ALLOCATION_RESIZED = register(417, "allocation.resized", "An allocation's quantity was changed")
ALLOCATION_RECLAIM_CANCELLED = register(
    418, "allocation.reclaim_cancelled", "A reclaim was called off: the request it made room for is gone, the grant keeps its units"
)
ALLOCATION_CHANGE_REQUESTED = register(420, "allocation.change_requested", "A change to a grant was requested for approval")
ALLOCATION_CHANGE_APPROVED = register(421, "allocation.change_approved", "A change to a grant was approved and applied")
ALLOCATION_CHANGE_REJECTED = register(422, "allocation.change_rejected", "A change to a grant was rejected")
ALLOCATION_CHANGE_CANCELLED = register(423, "allocation.change_cancelled", "A pending change to a grant was withdrawn")

# 5xx clusters and inventory
CLUSTER_CREATED = register(500, "cluster.created", "A cluster was registered")
CLUSTER_UPDATED = register(501, "cluster.updated", "A cluster was changed")
CLUSTER_PUSHED = register(510, "cluster.pushed", "Desired state was pushed to a cluster")
CLUSTER_PUSH_FAILED = register(511, "cluster.push_failed", "A push to a cluster failed")
CLUSTER_PODS_EVICTED = register(512, "cluster.pods_evicted", "Pods beyond a lowered GPU quota were evicted")
NODE_UPDATED = register(520, "node.updated", "A node's inventory changed")
CLUSTER_DRIFT_REPAIRED = register(530, "cluster.drift_repaired", "Objects changed by hand on a cluster were re-applied")
CLUSTER_KUBECONFIG_SET = register(531, "cluster.kubeconfig_set", "A cluster's kubeconfig was replaced")
CLUSTER_DISCOVERED = register(532, "cluster.discovered", "A cluster's nodes were read into the inventory")

# 6xx the audit log itself
AUDIT_EXPORTED = register(600, "audit.exported", "Audit events were exported")
AUDIT_CHECKPOINT_REQUESTED = register(601, "audit.checkpoint_requested", "A checkpoint was published on demand")
AUDIT_QUARANTINED = register(
    602, "audit.quarantined", "Rows that no checkpoint covered were moved out of the chain into quarantine"
)
AUDIT_REANCHORED = register(603, "audit.reanchored", "The chain resumed on the last event before a quarantine")

# 7xx node telemetry: node tokens and what the GPU node agents report
NODE_TOKEN_ISSUED = register(700, "node_token.issued", "A node agent token was issued")
NODE_TOKEN_REVOKED = register(701, "node_token.revoked", "A node agent token was revoked")
NODE_GPUS_OBSERVED = register(710, "node.gpus_observed", "A node's agent reported GPUs appearing, going absent or unidentified")
NODE_MIG_MISMATCH_FLAGGED = register(711, "node.mig_mismatch_flagged", "A node's actual MIG layout differs from the plan")
NODE_MIG_MISMATCH_CLEARED = register(712, "node.mig_mismatch_cleared", "A node's actual MIG layout matches the plan again")
NODE_REPORTS_STALE = register(713, "node.reports_stale", "A node's agent stopped reporting")
NODE_REPORTS_RESUMED = register(714, "node.reports_resumed", "A stale node's agent reported again")
CUSTODY_ALARM_RAISED = register(
    720, "custody.alarm_raised",
    "A custody mismatch: a GPU used with no grant, a pod on another project's GPU, an unused grant or a silent node",
)
CUSTODY_ALARM_CLEARED = register(721, "custody.alarm_cleared", "A custody mismatch no longer holds")
CUSTODY_ANCHORED = register(722, "custody.anchored", "The custody ledger's chain heads were written into the audit log")
CUSTODY_EXPORTED = register(723, "custody.exported", "Custody intervals were exported (CSV, JSON Lines or a bundle)")

# Usage accounting (docs/accounting.md).
RATE_CARD_CREATED = register(800, "rate_card.created", "A rate card (price per GPU-equivalent-hour of a flavor) was created")
RATE_CARD_ENDED = register(801, "rate_card.ended", "A rate card's validity was ended")
STATEMENT_CLOSED = register(810, "statement.closed", "A department's monthly statement was closed (its lines and SHA-256 fixed)")
STATEMENT_CORRECTED = register(811, "statement.corrected", "A correction line was added to a closed statement")
FAIR_SHARE_SHARES_SET = register(820, "fair_share.shares_set", "A department's fair-share shares (its weight among its siblings) were set")
IDLE_POLICY_CREATED = register(830, "idle_policy.created", "An idle policy (when a grant counts as idle, what follows) was created")
IDLE_POLICY_UPDATED = register(831, "idle_policy.updated", "An idle policy was changed")
IDLE_CASE_OPENED = register(832, "idle_case.opened", "A grant was idle for half its policy's window: a case is observing it")
IDLE_CASE_WARNED = register(833, "idle_case.warned", "A grant was idle for its policy's window: its owner and admins were warned")
IDLE_CASE_CLEARED = register(834, "idle_case.cleared", "An idle case closed: the grant was busy again, ended, or no policy applies")
IDLE_CASE_KEPT = register(835, "idle_case.kept", "A grant's owner kept an idle grant, with a reason")
IDLE_CASE_EXEMPTED = register(836, "idle_case.exempted", "An admin exempted an idle grant until a date, with a reason")
IDLE_CASE_RECLAIMED = register(837, "idle_case.reclaimed", "A grant still idle after its warning and grace was reclaimed")
IDLE_CASE_RELEASED = register(838, "idle_case.released", "An idle grant was released from its case")

# Notifications (docs/notifications.md).
WEBHOOK_CREATED = register(900, "webhook.created", "A notification webhook was added")
WEBHOOK_UPDATED = register(901, "webhook.updated", "A notification webhook was changed")
WEBHOOK_DELETED = register(902, "webhook.deleted", "A notification webhook was removed")
NOTIFICATION_PREFERENCES_SET = register(910, "notification.preferences_set", "A user changed their notification preferences")

# What-ifs: proposed changes of the rules replayed by the policy twin (docs/twin.md, "What-if").
WHAT_IF_REQUESTED = register(1000, "what_if.requested", "A what-if (proposed changes of the rules, replayed on a workload) was asked for")
WHAT_IF_STARTED = register(1001, "what_if.started", "A what-if's replay began")
WHAT_IF_FINISHED = register(1002, "what_if.finished", "A what-if's replay finished: current against proposed, per department")
WHAT_IF_FAILED = register(1003, "what_if.failed", "A what-if's replay failed")
