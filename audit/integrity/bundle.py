"""Export bundles: the events of an export with the proofs that make it verifiable offline.

A bundle is JSON Lines. Event lines are the canonical records exactly as stored and hashed; the
other lines are objects whose first key is ``"@"``::

    {"@":"bundle","version":1,"checkpoint":"<signed checkpoint>","scope":{...},"exported_at":"..."}
    {"@":"departments","items":[{"entry":{...}} | {"node":[level,"hex"]}, ...]}   department scopes only
    {"@":"nodes","nodes":[[start,level,"hex"], ...]}  subtrees covering events that are not exported
    {"@":"context","record":"<record>"}             a boundary event just outside the range
    {"@":"quarantine","record":"<record>"}          an audit.quarantined event outside the scope
    <record>                                        an exported event
    {"@":"end","events":N,"context":M}

Walking the lines in order covers leaves ``[0, size)`` of the checkpoint's tree exactly once, so
the verifier rebuilds the signed root from the revealed events and the subtree hashes (a
multi-leaf inclusion proof). Completeness comes from the chains: within the range the revealed
events of each department (or, without a department filter, of the whole log) must be consecutive,
start at the first event or at a boundary event dated before the range, and end at the head the
checkpoint commits to or at a boundary event dated at or after its end. Every ``audit.quarantined``
event up to the checkpoint is revealed, as an exported event or a quarantine line, and the
checkpoint counts them, so no bundle can leave a quarantine out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from audit.integrity.canonical import EventFacts, canonical_json

BUNDLE_VERSION = 1
META_PREFIX = b'{"@":'


@dataclass(frozen=True)
class Scope:
    """What an export selected. Times are canonical UTC strings; ``to`` is exclusive."""

    time_from: str | None = None
    time_to: str | None = None
    departments: tuple[int, ...] | None = None
    actors: tuple[str, ...] | None = None
    actions: tuple[str, ...] | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "from": self.time_from,
            "to": self.time_to,
            "departments": list(self.departments) if self.departments is not None else None,
            "actors": list(self.actors) if self.actors is not None else None,
            "actions": list(self.actions) if self.actions is not None else None,
        }

    @classmethod
    def from_json(cls, value: Any) -> Scope:
        if not isinstance(value, dict):
            raise ValueError("scope is not an object")

        def strings(name: str) -> tuple[str, ...] | None:
            items = value.get(name)
            if items is None:
                return None
            if not isinstance(items, list) or not all(isinstance(item, str) for item in items):
                raise ValueError(f"scope.{name} is not a list of strings")
            return tuple(items)

        departments = value.get("departments")
        if departments is not None and (
            not isinstance(departments, list) or not all(isinstance(item, int) for item in departments)
        ):
            raise ValueError("scope.departments is not a list of integers")
        for name in ("from", "to"):
            if value.get(name) is not None and not isinstance(value[name], str):
                raise ValueError(f"scope.{name} is not a timestamp")
        return cls(
            time_from=value.get("from"),
            time_to=value.get("to"),
            departments=tuple(departments) if departments is not None else None,
            actors=strings("actors"),
            actions=strings("actions"),
        )

    @property
    def proves_completeness(self) -> bool:
        return self.actors is None and self.actions is None

    def in_range(self, occurred_at: str) -> bool:
        return (self.time_from is None or occurred_at >= self.time_from) and (
            self.time_to is None or occurred_at < self.time_to
        )

    def matches(self, event: EventFacts) -> bool:
        return (
            self.in_range(event.occurred_at)
            and (self.departments is None or event.department_id in self.departments)
            and (self.actors is None or event.actor_username in self.actors)
            and (self.actions is None or event.action in self.actions)
        )

    def describe(self) -> str:
        parts = []
        if self.departments is not None:
            parts.append("departments " + ", ".join(str(item) for item in self.departments))
        else:
            parts.append("all departments")
        parts.append(f"from {self.time_from or 'the first event'} to {self.time_to or 'the checkpoint'}")
        return ", ".join(parts)


def header_line(*, checkpoint_note: str, scope: Scope, exported_at: str) -> bytes:
    return canonical_json(
        {"@": "bundle", "version": BUNDLE_VERSION, "checkpoint": checkpoint_note, "scope": scope.to_json(),
         "exported_at": exported_at}
    )


def departments_line(items: list[dict[str, Any]]) -> bytes:
    return canonical_json({"@": "departments", "items": items})


def nodes_line(start: int, nodes: list[tuple[int, bytes]]) -> bytes:
    """Subtrees covering leaves from ``start`` (0-based) on, each ``(level, hash)``."""
    items = []
    for level, hash_ in nodes:
        items.append([start, level, hash_.hex()])
        start += 1 << level
    return canonical_json({"@": "nodes", "nodes": items})


def context_line(record: bytes) -> bytes:
    return canonical_json({"@": "context", "record": record.decode("ascii")})


def quarantine_line(record: bytes) -> bytes:
    return canonical_json({"@": "quarantine", "record": record.decode("ascii")})


def end_line(*, events: int, context: int) -> bytes:
    return canonical_json({"@": "end", "events": events, "context": context})
