"""Writes of node tokens: issue and revoke (each audited in its transaction), and the throttled
record of a token's use. The token's text, generation and constant-time check are ``telemetry.tokens``
(no Django)."""

from __future__ import annotations

import datetime

from django.contrib.auth.models import User
from django.db import transaction
from django.http import Http404

from audit import actions
from audit.services import audit_record
from clusters.models import Cluster
from kernel.clock import clock_now
from kernel.errors import FieldError
from telemetry import conf, tokens
from telemetry.models import NodeToken
from tenants.access import require_platform_admin


@transaction.atomic
def node_token_issue(*, actor: User, cluster_id: int, node_name: str, description: str = "") -> tuple[NodeToken, str]:
    """A new token for ``node_name`` of the cluster; the token text is returned here only. The node
    need not be in the inventory yet (its Secret can be prepared before it joins)."""
    require_platform_admin(actor, to="issue node tokens")
    cluster = Cluster.objects.filter(pk=cluster_id).first()
    if cluster is None:
        raise FieldError("cluster", "No such cluster.")
    new = tokens.token_generate()
    token = NodeToken(
        cluster=cluster, node_name=node_name, key_id=new.key_id, secret_hash=new.secret_hash,
        description=description, created_by=actor,
    )
    token.full_clean()
    token.save()
    audit_record(
        actor=actor,
        action=actions.NODE_TOKEN_ISSUED,
        target=token,
        after={"cluster": cluster.name, "node_name": node_name, "description": description},
    )
    return token, new.text


@transaction.atomic
def node_token_revoke(*, actor: User, token_id: int) -> NodeToken:
    """Revoke a token; revoking a revoked token changes nothing."""
    require_platform_admin(actor, to="revoke node tokens")
    token = NodeToken.objects.select_for_update(of=("self",)).select_related("cluster").filter(pk=token_id).first()
    if token is None:
        raise Http404("No such node token.")
    if token.revoked_at is not None:
        return token
    token.revoked_at = clock_now()
    token.revoked_by = actor
    token.save(update_fields=["revoked_at", "revoked_by"])
    audit_record(
        actor=actor,
        action=actions.NODE_TOKEN_REVOKED,
        target=token,
        before={"revoked": False},
        after={"revoked": True},
        details={"cluster": token.cluster.name, "node_name": token.node_name},
    )
    return token


def node_token_touch_due(*, token: NodeToken, now: datetime.datetime) -> bool:
    """Whether the token's use is to be recorded now: at most once a minute per token (the report
    ingest writes it with its other writes)."""
    return token.last_used_at is None or now - token.last_used_at >= conf.TOKEN_LAST_USED_RESOLUTION

