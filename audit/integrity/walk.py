"""The event lines of a bundle in one pass: every event's place and links, the proof nodes, the
prefixes the store's checkpoints sign (``audit.integrity.fork``), the scope, the completeness the
scope claims, and the quarantines the checkpoint counts (``audit.integrity.quarantine``)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from audit.integrity.bundle import META_PREFIX, Scope
from audit.integrity.canonical import EventFacts
from audit.integrity.chain import department_link_check, link_check, record_parse_or_fail, sequence_failure
from audit.integrity.checkpoint import Checkpoint
from audit.integrity.departments import DepartmentHead
from audit.integrity.errors import VerificationFailure
from audit.integrity.fork import ForkWatch
from audit.integrity.lines import BundleLines
from audit.integrity.merkle import CompactRange
from audit.integrity.quarantine import QUARANTINE_ACTION, quarantine_describe
from audit.integrity.report import BundleReport
from audit.integrity.store import ChainSummary


@dataclass
class DepartmentRun:
    """One exported department's first and latest revealed events so far."""

    first: EventFacts
    first_is_context: bool
    last: EventFacts
    last_is_context: bool


class EventWalk:
    """One pass over the event lines of a bundle."""

    def __init__(
        self, *, checkpoint: Checkpoint, scope: Scope, lines: BundleLines, store: ChainSummary | None,
        conflict: VerificationFailure | None = None,
    ) -> None:
        self.checkpoint = checkpoint
        self.scope = scope
        self.lines = lines
        self.heads: dict[int, DepartmentHead] = {}
        self.compact = CompactRange()
        self.last: EventFacts | None = None  # the latest revealed leaf (for the links)
        self.scoped_last: EventFacts | None = None  # the latest exported or context event (for completeness)
        self.before_last: EventFacts | None = None
        self.hidden_since_last = False
        self.first_global: tuple[EventFacts, bool] | None = None
        self.last_is_context = False
        self.runs: dict[int, DepartmentRun] = {}
        self.report = BundleReport(checkpoint=checkpoint, scope=scope)
        self.fork = ForkWatch(store=store, checkpoint=checkpoint) if store is not None and store.roots_by_size else None
        self.prefix_roots = store.roots_by_size if store is not None else {}
        self.conflict = conflict  # the bundle's checkpoint disagrees with the store's: raised after the events
        self.quarantines: list[tuple[EventFacts, bytes]] = []
        self.ended: dict[str, Any] | None = None
        self._unfiltered = scope == Scope()
        self._complete = scope.proves_completeness
        self._global = scope.departments is None

    @property
    def position(self) -> int:
        return self.compact.size

    def walk(self) -> BundleReport:
        for line in self.lines:
            if self.ended is not None:
                raise VerificationFailure("malformed", f"line {self.lines.number} follows the end line")
            if line.startswith(META_PREFIX):
                self._meta(line)
            else:
                self._event(line, context=False)
        if self.conflict is not None:
            conflict = self.conflict
            where = self.fork.agreement() if self.fork is not None else ""
            raise VerificationFailure(conflict.kind, f"{conflict.message}; {where}", seq=conflict.seq)
        self._finish()
        return self.report

    def _meta(self, line: bytes) -> None:
        try:
            meta = json.loads(line)
        except json.JSONDecodeError:
            raise VerificationFailure("malformed", f"line {self.lines.number} is not valid JSON") from None
        kind = meta.get("@")
        if kind == "nodes":
            self._nodes(meta.get("nodes"))
        elif kind == "context":
            record = meta.get("record")
            if not isinstance(record, str):
                raise VerificationFailure("malformed", f"line {self.lines.number}: a context line without a record")
            self._event(record.encode("ascii", "replace"), context=True)
        elif kind == "quarantine":
            record = meta.get("record")
            if not isinstance(record, str):
                raise VerificationFailure("malformed", f"line {self.lines.number}: a quarantine line without a record")
            self._event(record.encode("ascii", "replace"), context=False, disclosed=True)
        elif kind == "end":
            self.ended = meta
        else:
            raise VerificationFailure("malformed", f"line {self.lines.number}: unexpected {kind!r} line")

    def _nodes(self, nodes: Any) -> None:
        try:
            for start, level, hash_hex in nodes:
                level = int(level)
                if start > self.position:
                    raise VerificationFailure(
                        "missing",
                        f"seq {self.position + 1} is missing: neither the event nor a proof node covers it: it was "
                        "deleted or dropped",
                        seq=self.position + 1,
                    )
                if start != self.position:
                    raise VerificationFailure(
                        "malformed", f"a proof node for leaf {start} appears at leaf {self.position}",
                        seq=self.position + 1,
                    )
                if self.position + (1 << level) > self.checkpoint.size:
                    raise VerificationFailure(
                        "malformed", f"a proof node reaches beyond {self.checkpoint.describe()}", seq=self.position + 1
                    )
                start = self.position
                hash_ = bytes.fromhex(hash_hex)
                self.compact.append_subtree(level, hash_)
                if self.fork is not None:
                    self.fork.observe(start, level, hash_)
                    self.fork.check(self.compact)
        except (TypeError, ValueError) as error:
            raise VerificationFailure(
                "malformed", f"line {self.lines.number}: bad proof nodes ({error})", seq=self.position + 1
            ) from None
        self.hidden_since_last = True

    def _event(self, data: bytes, *, context: bool, disclosed: bool = False) -> None:
        """One revealed event: its place, its links, its scope. Runs once per exported event.
        ``disclosed``: an ``audit.quarantined`` event outside the scope, revealed by every bundle."""
        compact = self.compact
        expected = compact.size + 1
        event = record_parse_or_fail(data, expected_seq=expected)
        if expected > self.checkpoint.size:
            raise VerificationFailure(
                "stale-checkpoint",
                f"seq {event.seq} is not covered by {self.checkpoint.describe()}: the bundle holds events newer "
                "than its checkpoint (an older checkpoint was substituted)",
                seq=event.seq,
            )
        if event.seq != expected:
            raise sequence_failure(
                event=event, expected=expected, last=self.last, next_seq=self.lines.peek_next_event_seq(),
                deleted="neither the event nor a proof node covers it: it was deleted or dropped",
            )
        last = self.last
        adjacent = last if last is not None and last.seq == expected - 1 else None
        if adjacent is not None or expected == 1:
            link_check(event=event, previous=adjacent, before_previous=self.before_last if adjacent else None)
        if event.action == QUARANTINE_ACTION:
            self.quarantines.append((event, data))
        if disclosed:
            self._disclosed_check(event)
        else:
            if context or not self._unfiltered:
                self._scope_check(event, context)
            if self._complete:
                if self._global:
                    self._global_step(event, context)
                else:
                    self._department_step(event, context)
        compact.append_leaf(event.hash)
        if self.fork is not None:
            self.fork.observe(expected - 1, 0, event.hash)
            if expected in self.prefix_roots:
                self.fork.check(compact)
        self.before_last, self.last = adjacent, event
        if disclosed:
            return  # neither exported nor context: the scope's completeness ignores it
        self.scoped_last, self.last_is_context = event, context
        self.hidden_since_last = False
        if context:
            self.report.context += 1
        else:
            self.report.events += 1

    def _disclosed_check(self, event: EventFacts) -> None:
        if event.action != QUARANTINE_ACTION:
            raise VerificationFailure(
                "scope", f"seq {event.seq} is disclosed as a quarantine but is a {event.action!r} event", seq=event.seq
            )
        if self.scope.matches(event):
            raise VerificationFailure(
                "scope", f"seq {event.seq} matches the export's filters but is only disclosed, not exported",
                seq=event.seq,
            )

    def _scope_check(self, event: EventFacts, context: bool) -> None:
        if not context:
            if not self.scope.matches(event):
                raise VerificationFailure(
                    "scope", f"seq {event.seq} does not match the export's filters", seq=event.seq
                )
            return
        if not self.scope.proves_completeness:
            raise VerificationFailure("scope", f"seq {event.seq}: context events need a complete scope", seq=event.seq)
        if self.scope.in_range(event.occurred_at):
            raise VerificationFailure(
                "scope", f"seq {event.seq} lies in the export's range but is marked as context", seq=event.seq
            )
        if self.scope.departments is not None and event.department_id not in self.scope.departments:
            raise VerificationFailure("scope", f"context event seq {event.seq} is of another department", seq=event.seq)

    def _before_range(self, event: EventFacts) -> bool:
        return self.scope.time_from is not None and event.occurred_at < self.scope.time_from

    def _global_step(self, event: EventFacts, context: bool) -> None:
        if self.first_global is not None and context and self._before_range(event):
            raise VerificationFailure("scope", f"seq {event.seq}: only the first revealed event may open the range")
        if self.first_global is None:
            self.first_global = (event, context)
            if event.seq != 1 and not (context and self._before_range(event)):
                raise VerificationFailure(
                    "incomplete",
                    f"seq {event.seq - 1} is not in the bundle, so the events before seq {event.seq} are not proven to "
                    "lie outside the range: it was dropped from the export",
                    seq=event.seq - 1,
                )
            return
        if self.hidden_since_last:
            assert self.scoped_last is not None
            raise VerificationFailure(
                "incomplete",
                f"seqs {self.scoped_last.seq + 1}..{event.seq - 1} are hidden behind proof nodes inside the range: "
                "events were dropped from the export",
                seq=self.scoped_last.seq + 1,
            )
        last = self.scoped_last
        if last is not None and self.last_is_context and not self._before_range(last):
            raise VerificationFailure("scope", f"seq {event.seq} follows the closing context event", seq=event.seq)

    def _department_step(self, event: EventFacts, context: bool) -> None:
        department_id = event.department_id
        if department_id is None or department_id not in (self.scope.departments or ()):
            raise VerificationFailure("scope", f"seq {event.seq} is not of an exported department", seq=event.seq)
        run = self.runs.get(department_id)
        assert event.department_seq is not None
        if run is None:
            if event.department_seq != 1 and not (context and self._before_range(event)):
                raise VerificationFailure(
                    "incomplete",
                    f"department {department_id}: its event department_seq {event.department_seq - 1} before seq "
                    f"{event.seq} is not in the bundle: it was dropped from the export",
                    seq=event.seq,
                )
            department_link_check(event=event, previous=None)
            self.runs[department_id] = DepartmentRun(event, context, event, context)
            return
        previous = run.last
        assert previous.department_seq is not None
        if run.last_is_context and not self._before_range(previous):
            raise VerificationFailure("scope", f"seq {event.seq} follows department {department_id}'s closing context")
        if context and self._before_range(event):
            raise VerificationFailure("scope", f"seq {event.seq}: only the first event of a department may open it")
        if event.department_seq != previous.department_seq + 1:
            raise VerificationFailure(
                "incomplete",
                f"department {department_id}: department_seq {previous.department_seq + 1}.."
                f"{event.department_seq - 1} between seq {previous.seq} and seq {event.seq} are not in the bundle: "
                "events were dropped from the export",
                seq=event.seq,
            )
        department_link_check(event=event, previous=previous)
        run.last, run.last_is_context = event, context

    def _finish(self) -> None:
        checkpoint = self.checkpoint
        if self.position < checkpoint.size:
            last_seq = self.last.seq if self.last is not None else 0
            if self.hidden_since_last or last_seq != self.position:
                raise VerificationFailure(
                    "truncated",
                    f"the proof stops at leaf {self.position} but {checkpoint.describe()} covers {checkpoint.size}",
                    seq=self.position + 1,
                )
            raise VerificationFailure(
                "truncated",
                f"the bundle ends at seq {self.position} but {checkpoint.describe()} covers {checkpoint.size} events: "
                f"seqs {self.position + 1}..{checkpoint.size} were deleted",
                seq=self.position + 1,
            )
        if self.compact.root() != checkpoint.root:
            last = self.last
            if last is not None and last.seq == checkpoint.size and last.hash != checkpoint.head:
                raise VerificationFailure(
                    "altered",
                    f"seq {last.seq} was altered: its hash does not match the head of {checkpoint.describe()}",
                    seq=last.seq,
                )
            raise VerificationFailure(
                "root-mismatch",
                f"the events and proof nodes do not reproduce the root of {checkpoint.describe()}: an event or a "
                "proof node was altered",
            )
        self._quarantines_check()
        self.report.completeness = self._completeness()
        if self.ended is None:
            raise VerificationFailure("malformed", "the bundle has no end line: it was cut short")
        if self.ended.get("events") != self.report.events or self.ended.get("context") != self.report.context:
            raise VerificationFailure("malformed", "the end line's counts do not match the bundle")

    def _completeness(self) -> str:
        scope = self.scope
        if not scope.proves_completeness:
            return "inclusion only: every event is genuine; an actor or action filter cannot prove completeness"
        if scope.departments is None:
            return self._global_completeness()
        for department_id in scope.departments:
            self._department_completeness(department_id)
        return f"complete: no event of {scope.describe()} is missing"

    def _quarantines_check(self) -> None:
        """Every quarantine the checkpoint counts must be in the bundle, and is reported."""
        checkpoint, found = self.checkpoint, self.quarantines
        latest = found[-1][0].hash if found else None
        if len(found) != checkpoint.quarantines or (found and latest != checkpoint.quarantine_head):
            raise VerificationFailure(
                "quarantine-hidden",
                f"{checkpoint.describe()} counts {checkpoint.quarantines} quarantines of the log but the bundle "
                f"reveals {len(found)}: a quarantine was left out of the export",
            )
        self.report.quarantines = [quarantine_describe(data) for _, data in found]

    def _global_completeness(self) -> str:
        scope, last = self.scope, self.scoped_last
        if last is None:
            if self.checkpoint.size:
                raise VerificationFailure("incomplete", "the bundle reveals no event, so nothing bounds the range")
        elif not (last.seq == self.checkpoint.size or (self.last_is_context and not self._before_range(last))):
            raise VerificationFailure(
                "incomplete",
                f"seq {last.seq + 1} is not in the bundle, so the events after seq {last.seq} are not proven to lie "
                "outside the range: it was dropped from the export",
                seq=last.seq + 1,
            )
        return f"complete: no event of {scope.describe()} is missing"

    def _department_completeness(self, department_id: int) -> None:
        run = self.runs.get(department_id)
        head = self.heads.get(department_id)
        if run is None:
            if head is not None:
                raise VerificationFailure(
                    "incomplete",
                    f"department {department_id} has {head.size} events in {self.checkpoint.describe()} but the bundle "
                    "reveals none of them and nothing proves they lie outside the range",
                )
            return
        if run.last_is_context and not self._before_range(run.last):
            return
        last = run.last
        assert last.department_seq is not None
        if head is None or last.department_seq < head.size:
            size = head.size if head is not None else 0
            raise VerificationFailure(
                "incomplete",
                f"department {department_id}: its events department_seq {last.department_seq + 1}..{size} after seq "
                f"{last.seq} are not in the bundle: they were dropped from the end of the export",
            )
        if last.department_seq > head.size or last.hash_hex != head.hash:
            raise VerificationFailure(
                "altered",
                f"seq {last.seq} was altered: it does not match department {department_id}'s head in "
                f"{self.checkpoint.describe()}",
                seq=last.seq,
            )
