"""What a notification says, in words: the title and lines an e-mail, a digest and a chat webhook
show, made from its payload (which holds ids, names and times, never a secret)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kernel.times import time_readable
from kernel.words import counted
from notifications import events


@dataclass(frozen=True)
class Message:
    title: str
    lines: list[str] = field(default_factory=list)
    path: str = ""  # the portal page it is about, e.g. /allocations/12/


def _grant(p: dict[str, Any]) -> str:
    return f"#{p.get('allocation')} ({p.get('quantity')} × {p.get('flavor')} for {p.get('project')})"


def _period(p: dict[str, Any]) -> str:
    return f"From {time_readable(p.get('starts_at'))} to {time_readable(p.get('ends_at'))}."


def describe(event: str, payload: dict[str, Any]) -> Message:
    p = payload
    path = f"/allocations/{p['allocation']}/" if p.get("allocation") else ""
    if event == events.SUBMITTED.code:
        return Message(f"Request {_grant(p)} waits for your decision",
                       [f"Requested by {p.get('requested_by')}.", _period(p), f"Justification: {p.get('justification', '')}"],
                       "/approvals/")
    if event == events.DECIDED.code:
        verdict = "approved" if p.get("decision") == "approved" else "rejected"
        lines = [f"Decided by {p.get('decided_by')}."]
        if p.get("comment"):
            lines.append(f"Comment: {p['comment']}")
        if verdict == "approved":
            lines.append(_period(p))
        return Message(f"Your request {_grant(p)} was {verdict}", lines, path)
    if event == events.STARTED.code:
        return Message(f"Your grant {_grant(p)} has started", [_period(p), "It is being provisioned on its cluster."], path)
    if event == events.RECLAIM_NOTICE.code and p.get("cancelled"):
        return Message(f"The reclaim of your grant {_grant(p)} is called off", [str(p.get("reason", ""))], path)
    if event == events.RECLAIM_NOTICE.code and p.get("partial"):
        return Message(f"Your grant {_grant(p)} gives back {p.get('units')} of its units",
                       [str(p.get("reason", "")), f"They keep running until {time_readable(p.get('deadline'))}."], path)
    if event == events.RECLAIM_NOTICE.code:
        return Message(f"Your grant {_grant(p)} is reclaimed",
                       [str(p.get("reason", "")), f"Its workloads keep running until {time_readable(p.get('deadline'))}."], path)
    if event == events.EXPIRING.code:
        return Message(f"Your grant {_grant(p)} ends in {counted(int(p.get('days') or 0), 'day')}",
                       [f"It ends at {time_readable(p.get('ends_at'))}. Renew it from its page if you still need it."], path)
    if event == events.EXPIRED.code:
        return Message(f"Your {'request' if p.get('was') == 'pending' else 'grant'} {_grant(p)} expired",
                       [f"It ended at {time_readable(p.get('ends_at'))}."], path)
    if event == events.IDLE_WARNING.code:
        return Message(f"Your grant {_grant(p)} is idle",
                       [f"It has been idle for {p.get('idle_minutes')} minutes under idle policy {p.get('policy')}.",
                        (f"Unless it is busy again, it will be reclaimed from {time_readable(p.get('action_due_at'))}."
                         if p.get("action") == "reclaim" else "Release it if you no longer need it.")], "/idle/")
    if event == events.PUSH_FAILED.code:
        target = f"project {p['project']}" if p.get("project") else "the cluster-wide objects"
        lines = [f"Error: {p.get('error', '')}"]
        if p.get("allocation"):
            lines.append(f"Allocation #{p['allocation']} is marked failed; retry it from its page once the cause is fixed.")
        return Message(f"A push of {target} to cluster {p.get('cluster')} failed", lines,
                       path or f"/platform/clusters/{p.get('cluster_id')}/")
    if event == events.DIGEST.code:
        items = p.get("items", [])
        return Message(f"Your GPU Portal digest: {counted(len(items), 'notification')}",
                       [f"{item['title']}" for item in items], "/")
    return Message(event, [])
