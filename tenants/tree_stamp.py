"""The department tree's stamp: how a process knows its cached tree is still the database's.

A trigger moves ``Department.tree_stamp`` forward whenever a department's parent changes, whatever
wrote it (a service, the admin, a raw UPDATE), and keeps it where it was on any other update (an
ORM save writes back the value it read, which may be stale). The tree's signature is then
``(count, highest id, sum of stamps)``: a department added raises the highest id (ids are never
reused), one removed lowers the count, one moved raises the sum. ``tenants.access`` reads the
signature (one small aggregate) instead of every department's parent, and reads the parents again
only when it changed. Only read outside a transaction: within one, the transaction's own
uncommitted move could give a signature that a later committed state shares.
"""

from __future__ import annotations

POSTGRESQL = [
    """
    CREATE OR REPLACE FUNCTION tenants_department_tree_stamp() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        NEW.tree_stamp := OLD.tree_stamp + (CASE WHEN NEW.parent_id IS DISTINCT FROM OLD.parent_id THEN 1 ELSE 0 END);
        RETURN NEW;
    END $$
    """,
    "DROP TRIGGER IF EXISTS tenants_department_tree_stamp ON tenants_department",
    """
    CREATE TRIGGER tenants_department_tree_stamp BEFORE UPDATE ON tenants_department
    FOR EACH ROW EXECUTE FUNCTION tenants_department_tree_stamp()
    """,
]

SQLITE = [
    "DROP TRIGGER IF EXISTS tenants_department_tree_stamp",
    """
    CREATE TRIGGER tenants_department_tree_stamp AFTER UPDATE ON tenants_department
    FOR EACH ROW WHEN NEW.tree_stamp IS NOT OLD.tree_stamp + (NEW.parent_id IS NOT OLD.parent_id)
    BEGIN
        UPDATE tenants_department SET tree_stamp = OLD.tree_stamp + (NEW.parent_id IS NOT OLD.parent_id) WHERE id = NEW.id;
    END
    """,
]

DROP = {
    "postgresql": [
        "DROP TRIGGER IF EXISTS tenants_department_tree_stamp ON tenants_department",
        "DROP FUNCTION IF EXISTS tenants_department_tree_stamp()",
    ],
    "sqlite": ["DROP TRIGGER IF EXISTS tenants_department_tree_stamp"],
}


def tree_stamp_statements(vendor: str) -> list[str]:
    """The statements that create the trigger on ``vendor`` (none on another database)."""
    return {"postgresql": POSTGRESQL, "sqlite": SQLITE}.get(vendor, [])
