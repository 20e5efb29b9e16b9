"""The audit log: export it (with proofs), and verify an export with the client's own checker."""

from __future__ import annotations

import datetime
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import click

from cli.app import output_option, state
from cli.auditcheck import ExportInvalid, Report, TrustedKey, export_verify, trusted_key_parse
from cli.auditcurrency import currency_check, currency_unknown, proof_nodes
from cli.exits import CliError, Exit
from cli.output import dump
from cli.resolve import completer, resolve_id
from cli.times import TIME


@click.group()
def audit() -> None:
    """The audit log (auditors, platform admins and department admins)."""


def _keys(arguments: tuple[str, ...], *, fetch: bool) -> list[TrustedKey]:
    keys = []
    for argument in arguments:
        try:
            keys.append(trusted_key_parse(argument))
        except (OSError, ValueError) as error:
            raise click.BadParameter(f"cannot read key {argument!r}: {error}", param_hint="--key") from None
    if keys or not fetch:
        return keys
    click.echo(
        "warning: checking against the keys the portal serves (GET /api/v1/audit/keys/); pass --key with a copy "
        "obtained out of band for a check that does not trust the portal", err=True,
    )
    served = state().api().get("audit/keys/").get("keys", [])
    return [trusted_key_parse(key) for key in served]


def _report(report: Report, *, to_stdout: bool) -> None:
    fmt = state().output
    if fmt == "table" or not to_stdout:
        click.echo(report.summary(), err=not to_stdout)
        return
    data: dict[str, Any] = {
        "verified": True, "format": report.format, "events": report.events, "first_seq": report.first_seq,
        "last_seq": report.last_seq, "complete": report.complete, "signed_by": report.signed_by, "notes": report.notes,
    }
    if report.checkpoint:
        data["checkpoint"] = {k: report.checkpoint[k] for k in ("origin", "number", "size", "time")}
    if report.as_of_now:
        data["current"] = report.current
        data["as_of_now"] = report.as_of_now
        data["latest_checkpoint"] = (
            {k: report.latest[k] for k in ("number", "size", "time", "signed_by")} if report.latest else None
        )
    click.echo(dump(data, fmt))


def _verify(path: Path, keys: list[TrustedKey], *, filtered: bool) -> Report:
    try:
        return export_verify(path, keys=keys, filtered=filtered)
    except ExportInvalid as failure:
        raise CliError(failure.line(), Exit.VERIFY_FAILED) from None


@audit.command("export")
@click.option("--from", "start", type=TIME, default=None, help="Events at or after this time.")
@click.option("--to", "end", type=TIME, default=None, help="Events before this time.")
@click.option("--department", default=None, shell_complete=completer("department"),
              help="Only this department and its subtree (slug or id).")
@click.option("--actor", default=None, help="Only events of this username.")
@click.option("--action", default=None, help="Only this action, e.g. allocation.approved.")
@click.option("--format", "export_format", type=click.Choice(["bundle", "jsonl", "csv"]), default="bundle",
              show_default=True, help="bundle: events with a signed checkpoint and proofs; jsonl: the records; csv.")
@click.option("-f", "--file", "file", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write the export here (mode 0600) instead of standard output.")
@click.option("--verify", is_flag=True, help="Check the export before writing it out (not for csv).")
@click.option("--key", "keys", multiple=True, metavar="KEY",
              help="A trusted verifier key or PEM public key (string or file; repeatable).")
@output_option
def audit_export(
    start: datetime.datetime | None, end: datetime.datetime | None, department: str | None, actor: str | None,
    action: str | None, export_format: str, file: Path | None, verify: bool, keys: tuple[str, ...],
) -> None:
    """Export the audit events you may read; with --verify, check them first.

    The export goes to --file, or to standard output (then the verification report goes to
    standard error). A failed verification exits 8 and writes nothing to standard output (a
    --file is kept, for inspection).
    """
    if verify and export_format == "csv":
        raise click.UsageError("--verify needs --format bundle or jsonl (CSV is for spreadsheets)")
    api = state().api()
    params: dict[str, Any] = {"output": export_format}
    if start is not None:
        params["start"] = start.isoformat()
    if end is not None:
        params["end"] = end.isoformat()
    if department:
        params["department"] = resolve_id(api, "department", department)
    if actor:
        params["actor"] = actor
    if action:
        params["action"] = action
    trusted = _keys(keys, fetch=verify and export_format == "bundle")
    folder = file.parent if file is not None else None
    handle, temporary = tempfile.mkstemp(prefix=".gpuportal-audit-", dir=folder)
    try:
        with os.fdopen(handle, "wb") as sink:
            size = api.download("audit/export/", params, sink)
        if file is not None:
            os.replace(temporary, file)
            click.echo(f"Wrote {size} bytes to {file}.", err=True)
        path = file or Path(temporary)
        if verify:
            filtered = any(x is not None for x in (department, actor, action))
            _report(_verify(path, trusted, filtered=filtered), to_stdout=file is not None)
        if file is None:
            stdout = sys.stdout.buffer
            with open(temporary, "rb") as source:
                shutil.copyfileobj(source, stdout)
            stdout.flush()
    finally:
        Path(temporary).unlink(missing_ok=True)


def _latest_from_portal() -> tuple[str | None, str]:
    """The portal's latest signed checkpoint note, or None and why it could not be had."""
    try:
        latest = state().api().get("audit/checkpoints/latest/")
    except CliError as error:
        return None, f"the portal's latest checkpoint could not be fetched ({error.message})"
    note = latest.get("note") if isinstance(latest, dict) else None
    if not isinstance(note, str):
        raise CliError("FAILED export [malformed]: the portal's latest checkpoint has no signed note",
                       Exit.VERIFY_FAILED)
    return note, ""


def _proof_from_portal(first: int, second: int) -> list[tuple[int, int, bytes]] | None:
    """The portal's consistency proof between two tree sizes; None where it offers none."""
    try:
        data = state().api().get("audit/checkpoints/consistency/", {"first": first, "second": second})
    except CliError:
        return None  # the answer stays NOT complete; only the link to the newer tree goes unchecked
    return proof_nodes(data)


def _no_proof(_first: int, _second: int) -> None:
    return None


def _as_of_now(report: Report, keys: list[TrustedKey], checkpoint: Path | None, offline: bool) -> None:
    """The second answer: is the bundle complete as of the newest checkpoint we can know?"""
    if checkpoint is not None:
        try:
            note = checkpoint.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as error:
            raise click.BadParameter(f"cannot read {checkpoint}: {error}", param_hint="--checkpoint") from None
        currency_check(report, note, keys=keys, source=f"the checkpoint in {checkpoint.name}", proof=_no_proof)
        return
    if offline:
        currency_unknown(report, "--offline: no newer checkpoint was fetched or given with --checkpoint")
        return
    fetched, why = _latest_from_portal()
    if fetched is None:
        currency_unknown(report, why)
        return
    currency_check(report, fetched, keys=keys, source="the portal's latest", proof=_proof_from_portal)


@audit.command("verify")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--key", "keys", multiple=True, metavar="KEY",
              help="A trusted verifier key or PEM public key (string or file; repeatable). Without one, a bundle "
              "is checked against the keys the active context's portal serves.")
@click.option("--filtered", is_flag=True, help="JSON Lines: the export was filtered, so gaps between events are expected.")
@click.option("--checkpoint", "checkpoint", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help="A bundle: the newest signed checkpoint to answer 'complete as of now' against, from a file (e.g. "
              "the checkpoint folder's latest), instead of the portal's latest.")
@click.option("--offline", is_flag=True, help="A bundle: fetch no newer checkpoint from the portal.")
@click.option("--allow-stale", is_flag=True,
              help="A genuine bundle that is not complete as of now exits 0 instead of 10.")
@output_option
def audit_verify(
    file: Path, keys: tuple[str, ...], filtered: bool, checkpoint: Path | None, offline: bool, allow_stale: bool
) -> None:
    """Check an export saved earlier (a bundle, or JSON Lines).

    A bundle gets two answers. Genuine: its signed checkpoint, every event's place and links, the
    signed root and the completeness of its range, as of its own checkpoint (not genuine: exit 8).
    Complete as of now (the AS OF NOW line): checked against a newer signed checkpoint, the
    portal's latest (GET /api/v1/audit/checkpoints/latest/) or the one in --checkpoint, verified
    with the same trusted keys (one that does not verify fails: exit 8). When it covers more
    events, the bundle is genuine but NOT complete as of now (exit 10, naming the newer
    checkpoint's size and the seqs missing) and the newer tree must extend the bundle's: the
    portal's consistency proof is checked, and a tree that does not extend it fails as rewritten
    (exit 8). When no newer checkpoint can be had (--offline, not signed in, portal unreachable),
    the answer is "AS OF NOW: unknown" and a genuine bundle exits 0.

    \b
    Exit: 0 genuine (and complete as of now, or unknown), 8 not genuine, 2 bad usage,
    10 genuine but NOT complete as of now (0 with --allow-stale).
    These mean what python -m audit.verify's 0, 1, 2 and 3 mean; the client keeps
    its own numbers, as every command does (its 1 and 3 are API and sign-in errors).
    """
    with file.open("rb") as handle:
        bundle = handle.read(13) == b'{"@":"bundle"'
    if (checkpoint is not None or offline) and not bundle:
        raise click.UsageError("--checkpoint and --offline are for bundles (JSON Lines carry no checkpoint)")
    trusted = _keys(keys, fetch=bundle)
    report = _verify(file, trusted, filtered=filtered)
    if bundle:
        try:
            _as_of_now(report, trusted, checkpoint, offline)
        except ExportInvalid as failure:
            raise CliError(failure.line(), Exit.VERIFY_FAILED) from None
    _report(report, to_stdout=True)
    if report.current is False and not allow_stale:
        raise click.exceptions.Exit(int(Exit.NOT_CURRENT))


COMMANDS = [audit]
