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


@audit.command("verify")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--key", "keys", multiple=True, metavar="KEY",
              help="A trusted verifier key or PEM public key (string or file; repeatable). Without one, a bundle "
              "is checked against the keys the active context's portal serves.")
@click.option("--filtered", is_flag=True, help="JSON Lines: the export was filtered, so gaps between events are expected.")
@output_option
def audit_verify(file: Path, keys: tuple[str, ...], filtered: bool) -> None:
    """Check an export saved earlier (a bundle, or JSON Lines)."""
    with file.open("rb") as handle:
        bundle = handle.read(13) == b'{"@":"bundle"'
    report = _verify(file, _keys(keys, fetch=bundle), filtered=filtered)
    _report(report, to_stdout=True)


COMMANDS = [audit]
