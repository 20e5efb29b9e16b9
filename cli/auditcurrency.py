"""The second answer of a bundle check: is the bundle complete as of now?

Written from the format in docs/audit.md, like ``cli.auditcheck`` (which gives the first answer,
genuine): against a newer signed checkpoint (the portal's latest, or one given in a file), checked
with the same trusted keys. When the newer checkpoint covers more events, the bundle is genuine but
NOT complete as of now, so an old bundle can never be passed off as current. The newer tree must
then extend the one the bundle's events rebuilt: the consistency proof is the subtrees covering the
added events (compact-range form, as in the checkpoint folder's proof files), appended to the
bundle's tree, which must then fold to the newer signed root; otherwise the log was rewritten.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from cli.auditcheck import ExportInvalid, Report, TrustedKey, _nodes, _Tree, checkpoint_check


def _describe(checkpoint: dict[str, Any]) -> str:
    return f"checkpoint #{checkpoint['number']} (size {checkpoint['size']}, {checkpoint['time']})"


def currency_unknown(report: Report, reason: str) -> None:
    """No newer checkpoint could be known: the bundle is proven only as of its own."""
    assert report.checkpoint is not None
    report.current = None
    report.as_of_now = (
        f"AS OF NOW: unknown: {reason}, so this bundle is proven only as of its {_describe(report.checkpoint)}"
    )


def currency_check(
    report: Report,
    note: str,
    *,
    keys: Sequence[TrustedKey],
    source: str,
    proof: Callable[[int, int], list[tuple[int, int, bytes]] | None],
) -> None:
    """Answer whether the bundle of ``report`` is complete as of the signed checkpoint ``note``
    (from ``source``, e.g. "the portal's latest"). ``proof(first, second)`` gives the subtrees
    ``(start, level, hash)`` covering leaves ``[first, second)``, or None where none is offered.
    Raises ``ExportInvalid`` when the note's signature does not verify, when it is another log's,
    when it commits to another tree of the bundle's size, or when its tree does not extend the
    bundle's."""
    bundle, tree = report.checkpoint, report.tree
    assert bundle is not None and tree is not None, "a bundle's report"
    try:
        latest, signer = checkpoint_check(note, keys)
    except ExportInvalid as failure:
        raise ExportInvalid(failure.kind, f"{source} checkpoint is not trusted: {failure.message}") from None
    if latest["origin"] != bundle["origin"]:
        raise ExportInvalid(
            "other-log", f"{source} checkpoint is of the log {latest['origin']!r}, the bundle of {bundle['origin']!r}"
        )
    report.latest = {**latest, "signed_by": signer}
    if latest["size"] <= bundle["size"]:
        if latest["size"] == bundle["size"] and latest["root"] != bundle["root"]:
            raise ExportInvalid(
                "split-view",
                f"{source} {_describe(latest)} signs another tree of the same {latest['size']} events as the bundle's "
                f"{_describe(bundle)}: two histories of one log",
            )
        if latest["number"] == bundle["number"]:
            detail = f"its checkpoint is {source} (#{latest['number']})"
        elif latest["size"] == bundle["size"]:
            detail = f"{source} {_describe(latest)} covers the same {latest['size']} events"
        else:
            detail = f"{source} is the older {_describe(latest)}: that copy is behind the bundle"
        report.current, report.as_of_now = True, f"AS OF NOW: complete: {detail}"
        return
    added = latest["size"] - bundle["size"]
    missing = f"seq {latest['size']} is" if added == 1 else f"seqs {bundle['size'] + 1}..{latest['size']} are"
    report.current = False
    report.as_of_now = (
        f"AS OF NOW: NOT complete: {source} {_describe(latest)} covers {added} event{'' if added == 1 else 's'} "
        f"after this bundle's {_describe(bundle)} ({missing} not in it); "
        + _consistency(tree, bundle, latest, proof(bundle["size"], latest["size"]), source)
    )


def _consistency(tree: _Tree, bundle: dict[str, Any], latest: dict[str, Any],
                 nodes: list[tuple[int, int, bytes]] | None, source: str) -> str:
    """Extend the bundle's own tree by ``nodes`` and compare with the newer signed root."""
    if nodes is None:
        return "no consistency proof was offered, so none was checked (its signed root alone is trusted)"
    extended = _Tree()
    extended.size, extended.stack = tree.size, list(tree.stack)
    for start, level, hash_ in nodes:
        if start != extended.size:
            raise ExportInvalid("malformed", f"a consistency proof node starts at leaf {start}, not {extended.size}")
        extended.append(level, hash_)
    if extended.size != latest["size"] or extended.root() != latest["root"]:
        raise ExportInvalid(
            "rewritten",
            f"{source} {_describe(latest)} does not extend the tree of this bundle's {_describe(bundle)}: its "
            "consistency proof fails, so the log was rewritten after the bundle's checkpoint",
            bundle["size"] + 1,
        )
    return (
        f"its tree extends this bundle's: the consistency proof from {bundle['size']} to {latest['size']} events "
        "was checked"
    )


def proof_nodes(data: Any) -> list[tuple[int, int, bytes]]:
    """The ``nodes`` of a consistency proof answer, checked for shape."""
    if not isinstance(data, dict):
        raise ExportInvalid("malformed", "the consistency proof is not a JSON object")
    try:
        return _nodes(data, 0)
    except ExportInvalid:
        raise ExportInvalid("malformed", "the consistency proof is not a list of [start, level, hash] nodes") from None
