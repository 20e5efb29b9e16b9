"""Hand-written DDL for the custody ledger, per database vendor, applied by the migrations.

As the audit log's (``audit.schema``): triggers refuse UPDATE, DELETE and TRUNCATE for everybody,
the owner included until it drops them (what the per-node hash chains and their anchors in the
audit log catch), and ``audit.grants`` leaves the application's role SELECT and INSERT only.
A BEFORE INSERT trigger refuses a row that is not the next of its node's chain.

The indexes lead with what the auditor asks by (a GPU, a device, a pod, a grant), so "who held
device X between t1 and t2" reads one device's rows, whatever the size of the whole history.
Once released, change the schema with a new migration that carries its own statements.
"""

from __future__ import annotations

from django.core.exceptions import ImproperlyConfigured

LEDGER_TABLE = "custody_event"
_MESSAGE = "the custody ledger is append-only"

_COLUMNS = """
        node_id bigint NOT NULL,
        chain_seq bigint NOT NULL CHECK (chain_seq > 0),
        kind varchar(8) NOT NULL,
        recorded_at {ts} NOT NULL,
        cluster varchar(63) NOT NULL,
        node varchar(253) NOT NULL,
        gpu_uuid varchar(96) NOT NULL,
        device_id varchar(128) NOT NULL,
        resource varchar(253) NOT NULL,
        sharing varchar(16) NOT NULL,
        namespace varchar(63) NOT NULL,
        pod varchar(253) NOT NULL,
        pod_uid varchar(64) NOT NULL,
        container varchar(253) NOT NULL,
        project_id bigint NULL,
        department_id bigint NULL,
        allocation_id bigint NULL,
        attribution varchar(16) NOT NULL,
        started_at {ts} NULL,
        start_observed varchar(16) NOT NULL,
        ended_at {ts} NULL,
        end_observed varchar(16) NOT NULL,
        gone_at {ts} NULL,
        confidence varchar(8) NOT NULL,
        gap_cause varchar(24) NOT NULL,
        opened_seq bigint NULL,
        prev_hash char(64) NOT NULL,
        hash char(64) NOT NULL,
        CONSTRAINT custody_event_chain_unique UNIQUE (node_id, chain_seq)
"""

_INDEXES = [
    f"CREATE INDEX custody_event_gpu_start ON {LEDGER_TABLE} (gpu_uuid, started_at)",
    f"CREATE INDEX custody_event_gpu_end ON {LEDGER_TABLE} (gpu_uuid, ended_at)",
    f"CREATE INDEX custody_event_device_start ON {LEDGER_TABLE} (device_id, started_at)",
    f"CREATE INDEX custody_event_pod_uid ON {LEDGER_TABLE} (pod_uid, started_at)",
    f"CREATE INDEX custody_event_pod_name ON {LEDGER_TABLE} (namespace, pod, started_at)",
    f"CREATE INDEX custody_event_allocation ON {LEDGER_TABLE} (allocation_id, started_at)",
    f"CREATE INDEX custody_event_recorded ON {LEDGER_TABLE} (recorded_at)",
]

POSTGRESQL_TABLES = [
    f"CREATE TABLE {LEDGER_TABLE} (id bigserial PRIMARY KEY, {_COLUMNS.format(ts='timestamptz')})",
    *_INDEXES,
    f"REVOKE ALL ON {LEDGER_TABLE} FROM PUBLIC",
]

POSTGRESQL_TRIGGERS = [
    f"""
    CREATE FUNCTION custody_refuse_change() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        RAISE EXCEPTION '{_MESSAGE}: % on % refused', TG_OP, TG_TABLE_NAME USING ERRCODE = 'insufficient_privilege';
    END
    $$
    """,
    f"""
    CREATE FUNCTION custody_event_next_only() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        IF NEW.chain_seq <> COALESCE((SELECT max(chain_seq) FROM {LEDGER_TABLE} WHERE node_id = NEW.node_id), 0) + 1 THEN
            RAISE EXCEPTION 'custody_event.chain_seq % is not the next number of node %', NEW.chain_seq, NEW.node_id
                USING ERRCODE = 'integrity_constraint_violation';
        END IF;
        RETURN NEW;
    END
    $$
    """,  # noqa: S608 (a fixed table name)
    f"CREATE TRIGGER custody_event_next_only BEFORE INSERT ON {LEDGER_TABLE} "
    "FOR EACH ROW EXECUTE FUNCTION custody_event_next_only()",
    f"CREATE TRIGGER custody_event_no_update_delete BEFORE UPDATE OR DELETE ON {LEDGER_TABLE} "
    "FOR EACH ROW EXECUTE FUNCTION custody_refuse_change()",
    f"CREATE TRIGGER custody_event_no_truncate BEFORE TRUNCATE ON {LEDGER_TABLE} "
    "FOR EACH STATEMENT EXECUTE FUNCTION custody_refuse_change()",
]

POSTGRESQL_DROP_TRIGGERS = [
    f"DROP TRIGGER IF EXISTS custody_event_next_only ON {LEDGER_TABLE}",
    f"DROP TRIGGER IF EXISTS custody_event_no_update_delete ON {LEDGER_TABLE}",
    f"DROP TRIGGER IF EXISTS custody_event_no_truncate ON {LEDGER_TABLE}",
    "DROP FUNCTION IF EXISTS custody_refuse_change()",
    "DROP FUNCTION IF EXISTS custody_event_next_only()",
]

SQLITE_TABLES = [
    f"CREATE TABLE {LEDGER_TABLE} (id integer PRIMARY KEY AUTOINCREMENT, {_COLUMNS.format(ts='datetime')})",
    *_INDEXES,
]

SQLITE_TRIGGERS = [
    *[
        f"CREATE TRIGGER custody_event_no_{operation.lower()} BEFORE {operation} ON {LEDGER_TABLE} "
        f"BEGIN SELECT RAISE(ABORT, '{_MESSAGE}: {operation} refused'); END"
        for operation in ("UPDATE", "DELETE")
    ],
    f"CREATE TRIGGER custody_event_next_only BEFORE INSERT ON {LEDGER_TABLE} "  # noqa: S608 (a fixed table name)
    f"WHEN NEW.chain_seq <> COALESCE((SELECT max(chain_seq) FROM {LEDGER_TABLE} WHERE node_id = NEW.node_id), 0) + 1 "
    "BEGIN SELECT RAISE(ABORT, 'custody_event.chain_seq is not the next number of its node'); END",
]

SQLITE_DROP_TRIGGERS = [
    "DROP TRIGGER IF EXISTS custody_event_no_update",
    "DROP TRIGGER IF EXISTS custody_event_no_delete",
    "DROP TRIGGER IF EXISTS custody_event_next_only",
]

_STATEMENTS = {
    ("postgresql", "tables"): POSTGRESQL_TABLES,
    ("postgresql", "triggers"): POSTGRESQL_TRIGGERS,
    ("postgresql", "drop_triggers"): POSTGRESQL_DROP_TRIGGERS,
    ("postgresql", "drop_tables"): [f"DROP TABLE IF EXISTS {LEDGER_TABLE}"],
    ("sqlite", "tables"): SQLITE_TABLES,
    ("sqlite", "triggers"): SQLITE_TRIGGERS,
    ("sqlite", "drop_triggers"): SQLITE_DROP_TRIGGERS,
    ("sqlite", "drop_tables"): [f"DROP TABLE IF EXISTS {LEDGER_TABLE}"],
}


def statements_for(vendor: str, part: str) -> list[str]:
    try:
        return list(_STATEMENTS[(vendor, part)])
    except KeyError:
        raise ImproperlyConfigured(f"the custody ledger supports PostgreSQL and SQLite, not {vendor!r}") from None
