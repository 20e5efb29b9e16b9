"""Idle policies: platform admins create and change them (audited); a policy is retired by
deactivating it (``is_active``), never deleted, because its cases refer to it. A change applies from
the next evaluation; a case keeps the numbers it was judged by in its evidence."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import User
from django.db import transaction
from django.forms.models import model_to_dict

from accounting.idle_models import IdlePolicy
from audit import actions
from audit.services import audit_record
from tenants.access import require_platform_admin

POLICIES = "manage idle policies"


def _state(policy: IdlePolicy) -> dict[str, Any]:
    return model_to_dict(policy, exclude=["id"])


@transaction.atomic
def idle_policy_create(*, actor: User, **fields: Any) -> IdlePolicy:
    require_platform_admin(actor, to=POLICIES)
    policy = IdlePolicy(**fields)
    policy.full_clean()
    policy.save()
    audit_record(actor=actor, action=actions.IDLE_POLICY_CREATED, target=policy, after=_state(policy))
    return policy


@transaction.atomic
def idle_policy_update(*, actor: User, policy_id: int, **fields: Any) -> IdlePolicy:
    require_platform_admin(actor, to=POLICIES)
    policy = IdlePolicy.objects.select_for_update().get(pk=policy_id)
    before = _state(policy)
    for name, value in fields.items():
        setattr(policy, name, value)
    policy.full_clean()
    policy.save()
    after = _state(policy)
    changed = [key for key in after if after[key] != before.get(key)]
    audit_record(
        actor=actor, action=actions.IDLE_POLICY_UPDATED, target=policy, before={key: before.get(key) for key in changed},
        after={key: after[key] for key in changed},
    )  # fmt: skip
    return policy
