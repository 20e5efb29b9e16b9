"""The inventory stamp and the placement version's sequence.

The inventory stamp: database triggers move ``Node.inventory_stamp`` forward whenever a node row
or one of its GPU rows is inserted, updated or deleted, whatever wrote it (a service, the node
agent's bulk statements, a raw UPDATE). A process that keeps a cluster's placement state compares
the sum of its nodes' stamps (with their count and highest id) to see whether the inventory moved
(``allocations.booking.state``), at the cost of one small aggregate instead of reading every node
and GPU again.

The triggers only ever touch the node row itself or, for a GPU, its node's row, which every writer
of GPUs locks first anyway (kernel/locks.py: nodes, then their GPUs).
"""

from __future__ import annotations

PLACEMENT_VERSION_SEQUENCE = "clusters_placement_version_seq"
"""Where ``Cluster.placement_version`` takes its numbers on PostgreSQL: a sequence never hands out
a number twice, not even one a rolled-back transaction took (allocations.booking.state)."""

POSTGRESQL = [
    f"CREATE SEQUENCE IF NOT EXISTS {PLACEMENT_VERSION_SEQUENCE}",
    """
    CREATE OR REPLACE FUNCTION clusters_node_stamp() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        NEW.inventory_stamp := OLD.inventory_stamp + 1;
        RETURN NEW;
    END $$
    """,
    "DROP TRIGGER IF EXISTS clusters_node_stamp ON clusters_node",
    """
    CREATE TRIGGER clusters_node_stamp BEFORE UPDATE ON clusters_node
    FOR EACH ROW EXECUTE FUNCTION clusters_node_stamp()
    """,
    """
    CREATE OR REPLACE FUNCTION clusters_gpu_stamp() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        IF TG_OP <> 'INSERT' THEN
            UPDATE clusters_node SET inventory_stamp = inventory_stamp + 1 WHERE id = OLD.node_id;
        END IF;
        IF TG_OP <> 'DELETE' THEN
            UPDATE clusters_node SET inventory_stamp = inventory_stamp + 1 WHERE id = NEW.node_id;
        END IF;
        RETURN NULL;
    END $$
    """,
    "DROP TRIGGER IF EXISTS clusters_gpu_stamp ON clusters_gpu",
    """
    CREATE TRIGGER clusters_gpu_stamp AFTER INSERT OR UPDATE OR DELETE ON clusters_gpu
    FOR EACH ROW EXECUTE FUNCTION clusters_gpu_stamp()
    """,
]

SQLITE = [
    "DROP TRIGGER IF EXISTS clusters_node_stamp",
    """
    CREATE TRIGGER clusters_node_stamp AFTER UPDATE ON clusters_node
    FOR EACH ROW WHEN NEW.inventory_stamp = OLD.inventory_stamp
    BEGIN UPDATE clusters_node SET inventory_stamp = OLD.inventory_stamp + 1 WHERE id = NEW.id; END
    """,
    *[
        f"DROP TRIGGER IF EXISTS clusters_gpu_stamp_{event}" for event in ("insert", "update", "delete")
    ],
    """
    CREATE TRIGGER clusters_gpu_stamp_insert AFTER INSERT ON clusters_gpu
    FOR EACH ROW BEGIN UPDATE clusters_node SET inventory_stamp = inventory_stamp + 1 WHERE id = NEW.node_id; END
    """,
    """
    CREATE TRIGGER clusters_gpu_stamp_update AFTER UPDATE ON clusters_gpu
    FOR EACH ROW BEGIN
        UPDATE clusters_node SET inventory_stamp = inventory_stamp + 1 WHERE id = OLD.node_id;
        UPDATE clusters_node SET inventory_stamp = inventory_stamp + 1 WHERE id = NEW.node_id;
    END
    """,
    """
    CREATE TRIGGER clusters_gpu_stamp_delete AFTER DELETE ON clusters_gpu
    FOR EACH ROW BEGIN UPDATE clusters_node SET inventory_stamp = inventory_stamp + 1 WHERE id = OLD.node_id; END
    """,
]

DROP = {
    "postgresql": [
        "DROP TRIGGER IF EXISTS clusters_gpu_stamp ON clusters_gpu",
        "DROP TRIGGER IF EXISTS clusters_node_stamp ON clusters_node",
        "DROP FUNCTION IF EXISTS clusters_gpu_stamp()",
        "DROP FUNCTION IF EXISTS clusters_node_stamp()",
        f"DROP SEQUENCE IF EXISTS {PLACEMENT_VERSION_SEQUENCE}",
    ],
    "sqlite": [f"DROP TRIGGER IF EXISTS {name}" for name in (
        "clusters_node_stamp", "clusters_gpu_stamp_insert", "clusters_gpu_stamp_update", "clusters_gpu_stamp_delete")],
}


def stamp_statements(vendor: str) -> list[str]:
    """The statements that create the triggers on ``vendor`` (none on another database)."""
    return {"postgresql": POSTGRESQL, "sqlite": SQLITE}.get(vendor, [])
