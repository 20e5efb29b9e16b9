"""Anchoring the ledger in the audit log: the head (sequence number and hash) of every node chain
that moved since the last anchor, written as one ``custody.anchored`` audit event. The audit log
is hash-chained and its checkpoints signed, so a ledger rewritten after an anchor (even with every
hash recomputed by someone who dropped the triggers) no longer reaches the anchored head: the
offline verifier checks each anchor a bundle carries (``custody.verify``)."""

from __future__ import annotations

from typing import Any

from django.db import transaction

from audit import actions
from audit.models import AuditEvent
from audit.services import audit_record
from custody.models import CustodyNodeState


def _last_anchored() -> dict[str, list[Any]]:
    last = AuditEvent.objects.filter(action=actions.CUSTODY_ANCHORED.code).order_by("-seq").first()
    heads: dict[str, list[Any]] = (last.details.get("all_heads") or {}) if last is not None else {}
    return heads


@transaction.atomic
def custody_anchor() -> AuditEvent | None:
    """Write the moved heads into the audit log; None when nothing moved."""
    heads = {str(node_id): [seq, head] for node_id, seq, head in
             CustodyNodeState.objects.filter(chain_seq__gt=0).values_list("node_id", "chain_seq", "chain_head")}  # fmt: skip
    last = _last_anchored()
    moved = {node: head for node, head in heads.items() if last.get(node) != head}
    if not moved:
        return None
    return audit_record(actor=None, action=actions.CUSTODY_ANCHORED, details={"heads": moved, "all_heads": heads})


def anchors_for(*, node_ids: set[int]) -> list[dict[str, Any]]:
    """Every anchor of these nodes' chains: (audit seq, audit hash, node, chain seq, head hash)."""
    found: list[dict[str, Any]] = []
    wanted = {str(node_id) for node_id in node_ids}
    for event in AuditEvent.objects.filter(action=actions.CUSTODY_ANCHORED.code).order_by("seq"):
        for node, (seq, head) in (event.details.get("heads") or {}).items():
            if node in wanted:
                found.append({"audit_seq": event.seq, "audit_hash": event.hash, "node_id": int(node),
                              "chain_seq": seq, "hash": head})  # fmt: skip
    return found
