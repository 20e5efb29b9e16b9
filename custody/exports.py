"""An answer written out: CSV, JSON Lines, or a bundle the offline verifier checks (``custody.verify``)."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator
from typing import Any

from custody.anchors import anchors_for
from custody.chain import LEDGER_FIELDS, record_of, time_text
from custody.models import CustodyEvent, CustodyNodeState
from custody.verify import FORMAT

OUTPUTS = ("json", "csv", "jsonl", "bundle")
# The columns of an answer row: the ledger row's fields, then the interval's state now.
COLUMNS: tuple[str, ...] = (*LEDGER_FIELDS, "hash", "state", "last_seen_at")


def row_record(row: dict[str, Any]) -> dict[str, Any]:
    """An answer row with its times as text, the form of every output."""
    record = {**record_of(row), "hash": row["hash"], "state": row["state"], "last_seen_at": time_text(row["last_seen_at"])}
    return {column: record[column] for column in COLUMNS}


def csv_text(rows: list[dict[str, Any]]) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(COLUMNS)
    for row in rows:
        record = row_record(row)
        writer.writerow(["" if record[column] is None else record[column] for column in COLUMNS])
    return buffer.getvalue()


def jsonl_lines(rows: list[dict[str, Any]]) -> Iterator[str]:
    for row in rows:
        yield json.dumps(row_record(row), sort_keys=True) + "\n"


def _event_line(event: CustodyEvent) -> dict[str, Any]:
    return {"type": "event", **record_of({field: getattr(event, field) for field in LEDGER_FIELDS}), "hash": event.hash}


def bundle_lines(*, rows: list[dict[str, Any]], query: dict[str, Any], exported_at: str) -> Iterator[str]:
    """The header, every ledger row of each involved node's chain from the first row the answer
    needs to the node's head, the answer naming its rows, and the anchors of those chains."""
    first: dict[int, int] = {}
    for row in rows:
        first[row["node_id"]] = min(first.get(row["node_id"], row["chain_seq"]), row["chain_seq"])
    heads = {node: (seq, head) for node, seq, head in
             CustodyNodeState.objects.filter(node_id__in=first).values_list("node_id", "chain_seq", "chain_head")}
    for node in set(first) - set(heads):  # a node deleted from the inventory: its chain ends at its last row
        last = CustodyEvent.objects.filter(node_id=node).order_by("-chain_seq").values_list("chain_seq", "hash").first()
        assert last is not None
        heads[node] = last
    runs = {str(node): {"from_seq": seq, "to_seq": heads[node][0], "head_hash": heads[node][1]}
            for node, seq in sorted(first.items())}  # fmt: skip
    header = {"type": "header", "format": FORMAT, "version": 1, "query": query, "exported_at": exported_at, "runs": runs}
    yield json.dumps(header, sort_keys=True) + "\n"
    events: dict[tuple[int, int], dict[str, Any]] = {}
    for node_key, run in runs.items():
        chain = CustodyEvent.objects.filter(node_id=int(node_key), chain_seq__gte=run["from_seq"], chain_seq__lte=run["to_seq"])
        for event in chain.order_by("chain_seq").iterator(chunk_size=2000):
            line = _event_line(event)
            events[(event.node_id, event.chain_seq)] = line
            yield json.dumps(line, sort_keys=True) + "\n"
    for row in rows:
        line = events[(row["node_id"], row["chain_seq"])]
        answer = {**line, "type": "answer", "state": row["state"], "last_seen_at": time_text(row["last_seen_at"])}
        yield json.dumps(answer, sort_keys=True) + "\n"
    for anchor in anchors_for(node_ids=set(first)):
        yield json.dumps({"type": "anchor", **anchor}, sort_keys=True) + "\n"
