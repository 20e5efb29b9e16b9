"""Offline verifier for custody bundles. Imports nothing from Django.

    python -m custody.verify BUNDLE

A bundle (``GET /api/v1/custody/?…&output=bundle``) is JSON Lines: a ``header`` line (the query,
and for each node the run of its chain the bundle carries), the ``event`` lines of those runs (every
row of the node's chain from the first one the answer needs to the node's head when exported),
the ``answer`` lines (the intervals and gaps asked for, each naming its row), and the ``anchor``
lines (heads of those chains as the audit log recorded them).

Genuine when: each run is unbroken (consecutive sequence numbers, each row's ``prev_hash`` its
predecessor's hash, each hash SHA-256 over the previous hash and the row's canonical record,
``custody.chain``) and ends at the head the header names; every answer line repeats its row's
fields exactly; every anchor that falls inside a run names the hash that row has there. Check the
anchors' audit sequence numbers and hashes against a verified audit export (``python -m
audit.verify``) to know that the anchors themselves are the audit log's.

Exit status: 0 genuine, 1 not (the first defect is printed), 2 bad usage.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from custody.chain import LEDGER_FIELDS, row_hash

FORMAT = "gpuportal-custody-bundle"
EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


class BundleDefect(Exception):
    pass


@dataclass
class _Bundle:
    header: dict[str, Any] = field(default_factory=dict)
    events: dict[tuple[int, int], dict[str, Any]] = field(default_factory=dict)
    answers: list[dict[str, Any]] = field(default_factory=list)
    anchors: list[dict[str, Any]] = field(default_factory=list)


def _read(lines: Iterable[bytes | str]) -> _Bundle:
    bundle = _Bundle()
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except ValueError:
            raise BundleDefect(f"line {number}: not JSON") from None
        kind = item.get("type")
        if number == 1 and (kind != "header" or item.get("format") != FORMAT):
            raise BundleDefect(f"line 1: not a {FORMAT} header")
        if kind == "header":
            bundle.header = item
        elif kind == "event":
            bundle.events[(int(item["node_id"]), int(item["chain_seq"]))] = item
        elif kind == "answer":
            bundle.answers.append(item)
        elif kind == "anchor":
            bundle.anchors.append(item)
        else:
            raise BundleDefect(f"line {number}: unknown line type {kind!r}")
    return bundle


def _check_run(bundle: _Bundle, node_id: int, run: dict[str, Any]) -> None:
    previous: str | None = None
    for seq in range(int(run["from_seq"]), int(run["to_seq"]) + 1):
        event = bundle.events.get((node_id, seq))
        if event is None:
            raise BundleDefect(f"node {node_id}: row {seq} of the chain is missing")
        if previous is not None and event["prev_hash"] != previous:
            raise BundleDefect(f"node {node_id}: row {seq} does not follow row {seq - 1} (prev_hash)")
        if row_hash(event) != event["hash"]:
            raise BundleDefect(f"node {node_id}: row {seq} was altered (its hash does not match its record)")
        previous = event["hash"]
    if previous != run["head_hash"]:
        raise BundleDefect(f"node {node_id}: the chain does not end at the head the bundle names")


def _check_answers(bundle: _Bundle) -> None:
    for answer in bundle.answers:
        key = (int(answer["node_id"]), int(answer["chain_seq"]))
        event = bundle.events.get(key)
        if event is None:
            raise BundleDefect(f"answer node {key[0]} row {key[1]}: no such row in the bundle")
        for name in LEDGER_FIELDS:
            if answer.get(name) != event.get(name):
                raise BundleDefect(f"answer node {key[0]} row {key[1]}: {name} differs from the ledger row")


def _check_anchors(bundle: _Bundle) -> int:
    checked = 0
    for anchor in bundle.anchors:
        event = bundle.events.get((int(anchor["node_id"]), int(anchor["chain_seq"])))
        if event is None:
            continue  # outside the runs this bundle carries
        if event["hash"] != anchor["hash"]:
            raise BundleDefect(
                f"node {anchor['node_id']}: row {anchor['chain_seq']} differs from what audit event "
                f"{anchor['audit_seq']} anchored (the ledger was rewritten)"
            )
        checked += 1
    return checked


def bundle_verify(lines: Iterable[bytes | str]) -> str:
    """The OK line of a genuine bundle; raises BundleDefect naming the first defect otherwise."""
    bundle = _read(lines)
    if not bundle.header:
        raise BundleDefect("empty bundle")
    runs: dict[str, dict[str, Any]] = bundle.header.get("runs") or {}
    for node, run in runs.items():
        _check_run(bundle, int(node), run)
    carried = {key for key in bundle.events if str(key[0]) in runs}
    if carried != set(bundle.events):
        raise BundleDefect("the bundle carries rows outside the runs its header names")
    _check_answers(bundle)
    anchored = _check_anchors(bundle)
    return (f"OK custody bundle: {len(bundle.answers)} answer rows, {len(bundle.events)} ledger rows in "
            f"{len(runs)} node chains, {anchored} anchors checked")  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m custody.verify", description="Verify a custody bundle offline.")
    parser.add_argument("bundle", help="the bundle file, or - for standard input")
    arguments = parser.parse_args(argv)
    try:
        if arguments.bundle == "-":
            verdict = bundle_verify(sys.stdin)
        else:
            with Path(arguments.bundle).open("rb") as handle:
                verdict = bundle_verify(handle)
    except OSError as error:
        sys.stderr.write(f"cannot read the bundle: {error}\n")
        return EXIT_USAGE
    except (BundleDefect, KeyError, TypeError, ValueError) as error:
        sys.stdout.write(f"NOT GENUINE: {error}\n")
        return EXIT_FAILED
    sys.stdout.write(verdict + "\n")
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
