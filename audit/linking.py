"""The chain step of ``audit_record`` on PostgreSQL, sent as late as the writer's transaction allows.

The chain lock is held from the chain step until the transaction ends, and every other writer of
an event waits for it. Sent at once, the step would hold the lock across a round trip to the
writer's process and back (the result, the caller's remaining work, the COMMIT), and on a busy
machine across the time that process waits to be scheduled. So ``append_deferred`` returns the
event at once, its chain fields not yet assigned, and the step (one ``audit_event_append``
statement, unchanged) is sent on the same connection, in the same transaction:

* before the next statement of the connection (an execute wrapper, installed once per
  connection, outermost), so that whatever the transaction does next, and every query it runs,
  sees the event as if it had been appended at once, and the lock order of ``kernel.locks`` is
  unchanged: the lock is taken no later than before;
* when the caller reads one of the event's chain fields (``seq``, ``occurred_at``,
  ``department_seq``, ``hash``, ``record``, see ``audit.models``);
* at the latest, when the event is the last thing its transaction writes, together with the
  COMMIT, in one round trip (psycopg's pipeline mode): the database then takes the chain lock,
  appends and commits without waiting for the writer's process in between.

A rollback (of the transaction, or to a savepoint, which is a statement and so sends the step
first) takes the event with it, as before. Nothing is ever appended outside the writer's
transaction, and the database assigns the chain fields under the lock exactly as before, so the
chain, its order (the order of the commits) and what it proves are unchanged.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import DEFERRED

from audit.models import CHAIN_FIELDS, AuditEvent

# The template's six pieces go as one text, split by the database: a record is printable ASCII (its
# canonical JSON escapes every control character), so chr(1) never occurs in it, and one string is
# about ten times cheaper for the client to send than an array of six (measured: 6 and 68 µs).
APPEND = "SELECT * FROM audit_event_append(string_to_array(%s, chr(1)), %s, %s, %s, %s, %s, %s, %s, %s)"
_SEPARATOR = "\x01"
_PENDING = "audit_pending_append"  # the connection's pending step, if any
_INSTALLED = "audit_linking_installed"

Append = Callable[[BaseDatabaseWrapper, tuple[str, ...], dict[str, Any]], AuditEvent]


class AuditEventNotLinked(RuntimeError):
    """A chain field was read of an event whose transaction rolled back before it was appended."""


def append_parameters(template: tuple[str, ...], columns: dict[str, Any]) -> list[Any]:
    pieces = _SEPARATOR.join(template)
    if pieces.count(_SEPARATOR) != len(template) - 1:
        raise ValueError("an audit record template holds a control character")
    return [pieces, columns["department_id"], columns["actor_id"], columns["actor_username"], columns["action"],
            columns["target_type"], columns["target_id"], columns["outcome"], columns["request_id"]]


class _Pending:
    __slots__ = ("append", "columns", "connection", "event", "raw", "state", "template")

    def __init__(self, connection: BaseDatabaseWrapper, template: tuple[str, ...], columns: dict[str, Any],
                 append: Append, event: AuditEvent) -> None:
        self.connection, self.template, self.columns, self.append, self.event = connection, template, columns, append, event
        self.raw = connection.connection  # the database session whose transaction the step belongs to
        self.state = "pending"  # then "linked", or "dropped" (rolled back, or the step failed)

    def link(self) -> None:
        """Read access to a chain field of the event: send the step now, if it is still pending."""
        if self.state == "pending" and getattr(self.connection, _PENDING, None) is self:
            pending_flush(self.connection)
        if self.state != "linked":
            raise AuditEventNotLinked("the audit event was rolled back before it was appended to the chain")

    def fill(self, seq: int, occurred_at: Any, department_seq: int | None, hash_: str, record: str) -> None:
        values = {"seq": seq, "occurred_at": occurred_at, "department_seq": department_seq, "hash": hash_, "record": record}
        self.event.__dict__.update(values)
        self.event.__dict__.pop("_link", None)
        self.state = "linked"


def _take(connection: BaseDatabaseWrapper) -> _Pending | None:
    pending: _Pending | None = getattr(connection, _PENDING, None)
    if pending is None:
        return None
    setattr(connection, _PENDING, None)
    if pending.raw is not connection.connection:  # the session it belonged to was closed: so was its transaction
        pending.state = "dropped"
        return None
    return pending


def pending_flush(connection: BaseDatabaseWrapper) -> None:
    """Send the connection's pending chain step now (a no-op when there is none)."""
    pending = _take(connection)
    if pending is None:
        return
    try:
        appended = pending.append(connection, pending.template, pending.columns)
    except BaseException:
        pending.state = "dropped"
        raise
    pending.fill(appended.seq, appended.occurred_at, appended.department_seq, appended.hash, appended.record)


def _flush_first(execute: Callable[..., Any], sql: str, params: Any, many: bool, context: dict[str, Any]) -> Any:
    pending_flush(context["connection"])
    return execute(sql, params, many, context)


def _commit_with(connection: BaseDatabaseWrapper, commit: Callable[[], None]) -> Callable[[], None]:
    def run() -> None:
        pending = _take(connection)
        raw = connection.connection
        if pending is None or raw is None:
            commit()
            return
        pending.state = "dropped"  # until the COMMIT has succeeded
        started = time.monotonic()
        with connection.wrap_database_errors:
            with raw.pipeline(), raw.cursor() as cursor:  # the step and the COMMIT in one round trip
                cursor.execute(APPEND, append_parameters(pending.template, pending.columns))
                raw.commit()
                row = cursor.fetchone()
        assert row is not None
        pending.fill(*row)
        if connection.queries_logged:  # counted like the statement it is
            connection.queries_log.append({"sql": f"{APPEND} -- with the COMMIT",
                                           "time": f"{time.monotonic() - started:.3f}"})
    return run


def _dropping(connection: BaseDatabaseWrapper, end: Callable[[], None]) -> Callable[[], None]:
    def run() -> None:
        pending = _take(connection)
        if pending is not None:
            pending.state = "dropped"
        end()
    return run


def _install(connection: BaseDatabaseWrapper) -> None:
    """Once per connection object: the execute wrapper first in the list (outermost, and never the
    one a ``connection.execute_wrapper`` block pops), and the COMMIT, ROLLBACK and close hooks."""
    if getattr(connection, _INSTALLED, False):
        return
    connection.execute_wrappers.insert(0, _flush_first)
    setattr(connection, "_commit", _commit_with(connection, getattr(connection, "_commit")))  # noqa: B009, B010
    setattr(connection, "_rollback", _dropping(connection, getattr(connection, "_rollback")))  # noqa: B009, B010
    setattr(connection, "_close", _dropping(connection, getattr(connection, "_close")))  # noqa: B009, B010
    setattr(connection, _INSTALLED, True)


def append_deferred(connection: BaseDatabaseWrapper, template: tuple[str, ...], columns: dict[str, Any], *,
                    append: Append) -> AuditEvent:
    """The event, its chain step pending on ``connection`` (see the module's documentation)."""
    _install(connection)
    connection.ensure_connection()
    pending_flush(connection)  # one at a time: an earlier event of the transaction is appended first
    event = AuditEvent(**columns, **dict.fromkeys(CHAIN_FIELDS, DEFERRED))
    event._state.adding, event._state.db = False, connection.alias  # it will be stored by its transaction
    pending = _Pending(connection, template, columns, append, event)
    event.__dict__["_link"] = pending.link
    setattr(connection, _PENDING, pending)
    return event
