"""Hand-written DDL for the audit tables, per database vendor, applied by the migrations.

Append-only is enforced twice on PostgreSQL: triggers that refuse UPDATE, DELETE and TRUNCATE for
everybody (even the owner, until the owner drops them: that is what the signed checkpoints
catch), and privileges (``audit.grants``): the application's role has INSERT and SELECT only.
The migrations apply these lists; once released, change the schema with a new migration that
carries its own statements, never by editing these in place.

A BEFORE INSERT trigger also refuses any event whose ``seq`` or ``department_seq`` is not the next
number, so the database itself keeps both sequences gapless.

``audit_event_append`` (``POSTGRESQL_APPEND``, migration 0004) is ``audit_record``'s chain step on
PostgreSQL: one statement under the chain lock (see docs/audit.md, "Appending").

The quarantine tables (``QUARANTINE_TABLES``, migration 0003) hold rows moved out of the chain by
``manage.py audit_recover`` (``audit.recovery``), as they were. They are append-only too, and the
application's role has no privilege on them at all: only the owner reads or writes them.
"""

from __future__ import annotations

from django.core.exceptions import ImproperlyConfigured

AUDIT_TABLES = ("audit_event", "audit_checkpoint", "audit_merkle_node")
CHAIN_LOCK_ID = 0x6770_7561_7564_0001  # pg_advisory_xact_lock key of the event chain
QUARANTINE_TABLES = ("audit_quarantine", "audit_quarantined_event")

_APPEND_ONLY_MESSAGE = "audit tables are append-only"

# Tables of the apps above that keep their own append-only records (the custody ledger): each
# registers its table when its app is ready, and ``audit.grants`` gives the application's role
# SELECT and INSERT only on it, exactly as on the audit tables. Their triggers are their own.
_APPEND_ONLY_ELSEWHERE: list[str] = []


def append_only_table_register(table: str) -> None:
    if table not in _APPEND_ONLY_ELSEWHERE:
        _APPEND_ONLY_ELSEWHERE.append(table)


def append_only_tables_elsewhere() -> tuple[str, ...]:
    return tuple(_APPEND_ONLY_ELSEWHERE)

POSTGRESQL_TABLES = [
    """
    CREATE TABLE audit_event (
        seq bigint PRIMARY KEY CHECK (seq > 0),
        occurred_at timestamptz NOT NULL,
        actor_id bigint NULL,
        actor_username varchar(150) NOT NULL,
        action varchar(64) NOT NULL,
        target_type varchar(64) NOT NULL,
        target_id varchar(64) NOT NULL,
        department_id bigint NULL,
        department_seq bigint NULL,
        outcome varchar(16) NOT NULL,
        request_id varchar(64) NOT NULL,
        hash char(64) NOT NULL,
        record text NOT NULL,
        CONSTRAINT audit_event_department_seq_unique UNIQUE (department_id, department_seq),
        CONSTRAINT audit_event_department_pair CHECK ((department_id IS NULL) = (department_seq IS NULL))
    )
    """,
    "CREATE INDEX audit_event_occurred_at ON audit_event (occurred_at)",
    "CREATE INDEX audit_event_department ON audit_event (department_id, seq) WHERE department_id IS NOT NULL",
    "CREATE INDEX audit_event_actor ON audit_event (actor_username, seq)",
    "CREATE INDEX audit_event_action ON audit_event (action, seq)",
    "CREATE INDEX audit_event_target ON audit_event (target_type, target_id)",
    "CREATE INDEX audit_event_request ON audit_event (request_id)",
    """
    CREATE TABLE audit_checkpoint (
        number bigint PRIMARY KEY CHECK (number > 0),
        size bigint NOT NULL CHECK (size >= 0),
        root char(64) NOT NULL,
        created_at timestamptz NOT NULL,
        note text NOT NULL,
        frontier text NOT NULL,
        departments text NOT NULL
    )
    """,
    """
    CREATE TABLE audit_merkle_node (
        level smallint NOT NULL CHECK (level > 0),
        position bigint NOT NULL CHECK (position >= 0),
        hash char(64) NOT NULL,
        PRIMARY KEY (level, position)
    )
    """,
]

POSTGRESQL_DROP = ["DROP TABLE IF EXISTS audit_merkle_node, audit_checkpoint, audit_event"]

POSTGRESQL_TRIGGERS = [
    f"""
    CREATE FUNCTION audit_refuse_change() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        RAISE EXCEPTION '{_APPEND_ONLY_MESSAGE}: % on % refused', TG_OP, TG_TABLE_NAME
            USING ERRCODE = 'insufficient_privilege';
    END
    $$
    """,
    """
    CREATE FUNCTION audit_event_next_only() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        IF NEW.seq <> COALESCE((SELECT max(seq) FROM audit_event), 0) + 1 THEN
            RAISE EXCEPTION 'audit_event.seq % is not the next number', NEW.seq
                USING ERRCODE = 'integrity_constraint_violation';
        END IF;
        IF NEW.department_id IS NOT NULL AND NEW.department_seq <> COALESCE(
            (SELECT max(department_seq) FROM audit_event WHERE department_id = NEW.department_id), 0) + 1 THEN
            RAISE EXCEPTION 'audit_event.department_seq % is not the next number of department %',
                NEW.department_seq, NEW.department_id USING ERRCODE = 'integrity_constraint_violation';
        END IF;
        RETURN NEW;
    END
    $$
    """,
    """
    CREATE FUNCTION audit_checkpoint_next_only() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        IF NEW.number <> COALESCE((SELECT max(number) FROM audit_checkpoint), 0) + 1 THEN
            RAISE EXCEPTION 'audit_checkpoint.number % is not the next number', NEW.number
                USING ERRCODE = 'integrity_constraint_violation';
        END IF;
        RETURN NEW;
    END
    $$
    """,
    "CREATE TRIGGER audit_event_next_only BEFORE INSERT ON audit_event "
    "FOR EACH ROW EXECUTE FUNCTION audit_event_next_only()",
    "CREATE TRIGGER audit_checkpoint_next_only BEFORE INSERT ON audit_checkpoint "
    "FOR EACH ROW EXECUTE FUNCTION audit_checkpoint_next_only()",
    *[
        statement
        for table in AUDIT_TABLES
        for statement in (
            f"CREATE TRIGGER {table}_no_update_delete BEFORE UPDATE OR DELETE ON {table} "
            "FOR EACH ROW EXECUTE FUNCTION audit_refuse_change()",
            f"CREATE TRIGGER {table}_no_truncate BEFORE TRUNCATE ON {table} "
            "FOR EACH STATEMENT EXECUTE FUNCTION audit_refuse_change()",
        )
    ],
    # Nobody but the owner (and roles granted explicitly by audit.grants) may use the tables.
    *[f"REVOKE ALL ON {table} FROM PUBLIC" for table in AUDIT_TABLES],
]

POSTGRESQL_DROP_TRIGGERS = [
    *[f"DROP TRIGGER IF EXISTS {table}_no_update_delete ON {table}" for table in AUDIT_TABLES],
    *[f"DROP TRIGGER IF EXISTS {table}_no_truncate ON {table}" for table in AUDIT_TABLES],
    "DROP TRIGGER IF EXISTS audit_event_next_only ON audit_event",
    "DROP TRIGGER IF EXISTS audit_checkpoint_next_only ON audit_checkpoint",
    "DROP FUNCTION IF EXISTS audit_refuse_change()",
    "DROP FUNCTION IF EXISTS audit_event_next_only()",
    "DROP FUNCTION IF EXISTS audit_checkpoint_next_only()",
]

SQLITE_TABLES = [
    """
    CREATE TABLE audit_event (
        seq integer NOT NULL PRIMARY KEY CHECK (seq > 0),
        occurred_at datetime NOT NULL,
        actor_id bigint NULL,
        actor_username varchar(150) NOT NULL,
        action varchar(64) NOT NULL,
        target_type varchar(64) NOT NULL,
        target_id varchar(64) NOT NULL,
        department_id bigint NULL,
        department_seq bigint NULL,
        outcome varchar(16) NOT NULL,
        request_id varchar(64) NOT NULL,
        hash char(64) NOT NULL,
        record text NOT NULL,
        CONSTRAINT audit_event_department_seq_unique UNIQUE (department_id, department_seq),
        CONSTRAINT audit_event_department_pair CHECK ((department_id IS NULL) = (department_seq IS NULL))
    )
    """,
    "CREATE INDEX audit_event_occurred_at ON audit_event (occurred_at)",
    "CREATE INDEX audit_event_department ON audit_event (department_id, seq)",
    "CREATE INDEX audit_event_actor ON audit_event (actor_username, seq)",
    "CREATE INDEX audit_event_action ON audit_event (action, seq)",
    "CREATE INDEX audit_event_target ON audit_event (target_type, target_id)",
    "CREATE INDEX audit_event_request ON audit_event (request_id)",
    """
    CREATE TABLE audit_checkpoint (
        number integer NOT NULL PRIMARY KEY CHECK (number > 0),
        size bigint NOT NULL CHECK (size >= 0),
        root char(64) NOT NULL,
        created_at datetime NOT NULL,
        note text NOT NULL,
        frontier text NOT NULL,
        departments text NOT NULL
    )
    """,
    """
    CREATE TABLE audit_merkle_node (
        level smallint NOT NULL CHECK (level > 0),
        position bigint NOT NULL CHECK (position >= 0),
        hash char(64) NOT NULL,
        PRIMARY KEY (level, position)
    )
    """,
]

SQLITE_DROP = [f"DROP TABLE IF EXISTS {table}" for table in reversed(AUDIT_TABLES)]

SQLITE_TRIGGERS = [
    *[
        f"CREATE TRIGGER {table}_no_{operation.lower()} BEFORE {operation} ON {table} "
        f"BEGIN SELECT RAISE(ABORT, '{_APPEND_ONLY_MESSAGE}: {operation} on {table} refused'); END"
        for table in AUDIT_TABLES
        for operation in ("UPDATE", "DELETE")
    ],
    "CREATE TRIGGER audit_event_next_only BEFORE INSERT ON audit_event "
    "WHEN NEW.seq <> COALESCE((SELECT max(seq) FROM audit_event), 0) + 1 "
    "OR (NEW.department_id IS NOT NULL AND NEW.department_seq <> COALESCE("
    "(SELECT max(department_seq) FROM audit_event WHERE department_id = NEW.department_id), 0) + 1) "
    "BEGIN SELECT RAISE(ABORT, 'audit_event.seq or department_seq is not the next number'); END",
    "CREATE TRIGGER audit_checkpoint_next_only BEFORE INSERT ON audit_checkpoint "
    "WHEN NEW.number <> COALESCE((SELECT max(number) FROM audit_checkpoint), 0) + 1 "
    "BEGIN SELECT RAISE(ABORT, 'audit_checkpoint.number is not the next number'); END",
]

SQLITE_DROP_TRIGGERS = [
    *[
        f"DROP TRIGGER IF EXISTS {table}_no_{operation.lower()}"
        for table in AUDIT_TABLES
        for operation in ("UPDATE", "DELETE")
    ],
    "DROP TRIGGER IF EXISTS audit_event_next_only",
    "DROP TRIGGER IF EXISTS audit_checkpoint_next_only",
]

_QUARANTINE_COLUMNS = """
        id bigint PRIMARY KEY CHECK (id > 0),
        created_at {time} NOT NULL,
        from_seq bigint NOT NULL CHECK (from_seq > 0),
        to_seq bigint NOT NULL,
        event_count bigint NOT NULL CHECK (event_count > 0),
        digest char(64) NOT NULL,
        checkpoint_number bigint NOT NULL CHECK (checkpoint_number >= 0),
        checkpoint_size bigint NOT NULL CHECK (checkpoint_size >= 0),
        anchor_hash char(64) NOT NULL,
        failure_kind varchar(32) NOT NULL,
        failure_seq bigint NULL,
        failure_message text NOT NULL,
        reason text NOT NULL,
        operator varchar(150) NOT NULL,
        CONSTRAINT audit_quarantine_range CHECK (to_seq - from_seq + 1 = event_count AND from_seq > checkpoint_size)
"""

_QUARANTINED_EVENT_COLUMNS = """
        quarantine_id bigint NOT NULL REFERENCES audit_quarantine (id),
        seq bigint NOT NULL,
        occurred_at {time} NOT NULL,
        actor_id bigint NULL,
        actor_username varchar(150) NOT NULL,
        action varchar(64) NOT NULL,
        target_type varchar(64) NOT NULL,
        target_id varchar(64) NOT NULL,
        department_id bigint NULL,
        department_seq bigint NULL,
        outcome varchar(16) NOT NULL,
        request_id varchar(64) NOT NULL,
        hash char(64) NOT NULL,
        record text NOT NULL,
        PRIMARY KEY (quarantine_id, seq)
"""

POSTGRESQL_QUARANTINE = [
    f"CREATE TABLE audit_quarantine ({_QUARANTINE_COLUMNS.format(time='timestamptz')})",
    f"CREATE TABLE audit_quarantined_event ({_QUARANTINED_EVENT_COLUMNS.format(time='timestamptz')})",
    # A function of their own, so that dropping the event tables' protection leaves this one in place.
    f"""
    CREATE FUNCTION audit_quarantine_refuse_change() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        RAISE EXCEPTION '{_APPEND_ONLY_MESSAGE}: % on % refused', TG_OP, TG_TABLE_NAME
            USING ERRCODE = 'insufficient_privilege';
    END
    $$
    """,
    *[
        statement
        for table in QUARANTINE_TABLES
        for statement in (
            f"CREATE TRIGGER {table}_no_update_delete BEFORE UPDATE OR DELETE ON {table} "
            "FOR EACH ROW EXECUTE FUNCTION audit_quarantine_refuse_change()",
            f"CREATE TRIGGER {table}_no_truncate BEFORE TRUNCATE ON {table} "
            "FOR EACH STATEMENT EXECUTE FUNCTION audit_quarantine_refuse_change()",
            f"REVOKE ALL ON {table} FROM PUBLIC",
        )
    ],
]

POSTGRESQL_QUARANTINE_DROP = [
    "DROP TABLE IF EXISTS audit_quarantined_event, audit_quarantine",
    "DROP FUNCTION IF EXISTS audit_quarantine_refuse_change()",
]

SQLITE_QUARANTINE = [
    f"CREATE TABLE audit_quarantine ({_QUARANTINE_COLUMNS.format(time='datetime')})",
    f"CREATE TABLE audit_quarantined_event ({_QUARANTINED_EVENT_COLUMNS.format(time='datetime')})",
    *[
        f"CREATE TRIGGER {table}_no_{operation.lower()} BEFORE {operation} ON {table} "
        f"BEGIN SELECT RAISE(ABORT, '{_APPEND_ONLY_MESSAGE}: {operation} on {table} refused'); END"
        for table in QUARANTINE_TABLES
        for operation in ("UPDATE", "DELETE")
    ],
]

SQLITE_QUARANTINE_DROP = [f"DROP TABLE IF EXISTS {table}" for table in reversed(QUARANTINE_TABLES)]

# What ``audit.recovery`` switches off, inside its transaction, to move rows out of audit_event.
POSTGRESQL_EVENT_DELETE_OFF = ["ALTER TABLE audit_event DISABLE TRIGGER audit_event_no_update_delete"]
POSTGRESQL_EVENT_DELETE_ON = ["ALTER TABLE audit_event ENABLE TRIGGER audit_event_no_update_delete"]
SQLITE_EVENT_DELETE_OFF = ["DROP TRIGGER audit_event_no_delete"]
SQLITE_EVENT_DELETE_ON = [statement for statement in SQLITE_TRIGGERS if statement.startswith(
    "CREATE TRIGGER audit_event_no_delete ")]

# Migration 0004: the chain step of ``audit_record`` on PostgreSQL, in one round trip. Everything that
# does not depend on the chain (the record's other fields, canonical JSON: ``template``, the six pieces
# of ``audit.integrity.canonical.record_template``) is prepared by the caller before it. The function
# runs the pending deferred constraint checks (as ``kernel.locks.deferred_checks_run``: their waits come
# before the chain lock, never while holding it), takes the chain lock, which stays held until the
# transaction ends, reads both chain heads, assigns seq, department_seq and the time (the database's
# clock, never earlier than the previous event's), puts the five chain fields into the template,
# hashes it (the RFC 6962 leaf hash) and inserts the row. VOLATILE, so each statement in it takes a
# new snapshot: the heads are read after the lock is granted, and so include the previous holder's
# committed event. SECURITY INVOKER: it can do only what its caller's role may (the application's:
# SELECT and INSERT), and the insert triggers still check the row.
POSTGRESQL_APPEND = [
    f"""
    CREATE FUNCTION audit_event_append(
        template text[], p_department_id bigint, p_actor_id bigint, p_actor_username text, p_action text,
        p_target_type text, p_target_id text, p_outcome text, p_request_id text,
        OUT new_seq bigint, OUT new_occurred_at timestamptz, OUT new_department_seq bigint, OUT new_hash text,
        OUT new_record text
    ) LANGUAGE plpgsql VOLATILE AS $$
    DECLARE
        last_hash text;
        last_time timestamptz;
        department_hash text;
    BEGIN
        IF array_length(template, 1) IS DISTINCT FROM 6 THEN
            RAISE EXCEPTION 'audit_event_append: the template has 6 pieces' USING ERRCODE = 'invalid_parameter_value';
        END IF;
        SET CONSTRAINTS ALL IMMEDIATE;
        SET CONSTRAINTS ALL DEFERRED;
        PERFORM pg_advisory_xact_lock({CHAIN_LOCK_ID});
        SELECT e.seq, e.hash, e.occurred_at INTO new_seq, last_hash, last_time
            FROM audit_event AS e ORDER BY e.seq DESC LIMIT 1;
        new_seq := COALESCE(new_seq, 0) + 1;
        new_occurred_at := GREATEST(clock_timestamp(), last_time);
        IF p_department_id IS NOT NULL THEN
            SELECT e.department_seq, e.hash INTO new_department_seq, department_hash
                FROM audit_event AS e WHERE e.department_id = p_department_id ORDER BY e.department_seq DESC LIMIT 1;
            new_department_seq := COALESCE(new_department_seq, 0) + 1;
            department_hash := '"' || COALESCE(department_hash, repeat('0', 64)) || '"';
        END IF;
        new_record := template[1] || COALESCE(department_hash, 'null') || template[2]
            || COALESCE(new_department_seq::text, 'null') || template[3]
            || '"' || to_char(new_occurred_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') || '"' || template[4]
            || '"' || COALESCE(last_hash, repeat('0', 64)) || '"' || template[5] || new_seq::text || template[6];
        new_hash := encode(sha256('\\x00'::bytea || convert_to(new_record, 'UTF8')), 'hex');
        INSERT INTO audit_event (seq, occurred_at, actor_id, actor_username, action, target_type, target_id,
                                 department_id, department_seq, outcome, request_id, hash, record)
            VALUES (new_seq, new_occurred_at, p_actor_id, p_actor_username, p_action, p_target_type, p_target_id,
                    p_department_id, new_department_seq, p_outcome, p_request_id, new_hash, new_record);
    END
    $$
    """,  # noqa: S608 (fixed names; the lock key is a constant)
]

APPEND_FUNCTION = "audit_event_append(text[], bigint, bigint, text, text, text, text, text, text)"

POSTGRESQL_APPEND_DROP = [
    "DROP FUNCTION IF EXISTS audit_event_append(text[], bigint, bigint, text, text, text, text, text, text)",
]

STATEMENTS = {
    "postgresql": {"tables": POSTGRESQL_TABLES, "drop": POSTGRESQL_DROP, "triggers": POSTGRESQL_TRIGGERS,
                   "drop_triggers": POSTGRESQL_DROP_TRIGGERS, "quarantine": POSTGRESQL_QUARANTINE,
                   "quarantine_drop": POSTGRESQL_QUARANTINE_DROP, "event_delete_off": POSTGRESQL_EVENT_DELETE_OFF,
                   "event_delete_on": POSTGRESQL_EVENT_DELETE_ON, "append": POSTGRESQL_APPEND,
                   "append_drop": POSTGRESQL_APPEND_DROP},
    "sqlite": {"tables": SQLITE_TABLES, "drop": SQLITE_DROP, "triggers": SQLITE_TRIGGERS,
               "drop_triggers": SQLITE_DROP_TRIGGERS, "quarantine": SQLITE_QUARANTINE,
               "quarantine_drop": SQLITE_QUARANTINE_DROP, "event_delete_off": SQLITE_EVENT_DELETE_OFF,
               "event_delete_on": SQLITE_EVENT_DELETE_ON, "append": [], "append_drop": []},
}


def statements_for(vendor: str, kind: str) -> list[str]:
    try:
        return STATEMENTS[vendor][kind]
    except KeyError:
        raise ImproperlyConfigured(f"the audit log supports PostgreSQL and SQLite, not {vendor}") from None
