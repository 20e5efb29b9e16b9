"""GPU custody: who held a device, what a pod or a grant held, between two times (the custody
API, GET /api/v1/custody/); downloads as CSV, JSON Lines or a verifiable bundle."""

from __future__ import annotations

import datetime
import os
import tempfile
from pathlib import Path
from typing import Any

import click

from cli.app import output_option, state
from cli.output import Column, dump, table
from cli.times import TIME

COLUMNS: list[Column] = [("FROM", "started_at"), ("UNTIL", lambda row: row["ended_at"] or f"open (seen {row['last_seen_at']})"),
           ("NODE", "node"), ("DEVICE", "device_id"), ("POD", lambda row: _pod(row)), ("GRANT", "allocation_id"),
           ("OBSERVED", lambda row: f"{row['start_observed'] or '-'}/{row['end_observed'] or '-'}"),
           ("CONFIDENCE", "confidence")]  # fmt: skip


def _pod(row: dict[str, Any]) -> str:
    if row["state"] == "gap":
        return f"GAP: custody unknown ({row['gap_cause']})"
    return f"{row['namespace']}/{row['pod']}/{row['container']}"


@click.command("custody")
@click.option("--device", default=None, help="A GPU UUID, MIG device UUID or replica ID (GPU-uuid::N).")
@click.option("--pod", default=None, help="A pod UID, or namespace/name.")
@click.option("--allocation", type=int, default=None, help="An allocation (grant) id.")
@click.option("--from", "start", type=TIME, default=None, help="Intervals that ended at or after this time.")
@click.option("--to", "end", type=TIME, default=None, help="Intervals that started at or before this time.")
@click.option("--format", "download", type=click.Choice(["csv", "jsonl", "bundle"]), default=None,
              help="Download instead of listing (a bundle: check it with python -m custody.verify).")
@click.option("-f", "--file", "file", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write the download here (mode 0600) instead of standard output.")
@output_option
def custody(**options: Any) -> None:
    """Who held a GPU, from when to when, with the grant; gaps where custody was unknown.

    Auditors and platform admins read every device; department admins their departments' pods.
    """
    device, pod, allocation = options["device"], options["pod"], options["allocation"]
    start: datetime.datetime | None = options["start"]
    end: datetime.datetime | None = options["end"]
    download: str | None = options["download"]
    file: Path | None = options["file"]
    if not (device or pod or allocation):
        raise click.UsageError("name --device, --pod or --allocation")
    api = state().api()
    params: dict[str, Any] = {key: value for key, value in
                              (("device", device), ("pod", pod), ("allocation", allocation)) if value}  # fmt: skip
    if start is not None:
        params["from"] = start.isoformat()
    if end is not None:
        params["to"] = end.isoformat()
    if download is None:
        answer = api.get("custody/", params)
        fmt = state().output
        click.echo(table(answer["results"], COLUMNS) if fmt == "table" else dump(answer, fmt))
        if answer.get("truncated"):
            click.echo("warning: the answer was cut; narrow --from/--to", err=True)
        return
    _download(api, {**params, "output": download}, file)


def _download(api: Any, params: dict[str, Any], file: Path | None) -> None:
    handle, temporary = tempfile.mkstemp(prefix=".gpuportal-custody-", dir=file.parent if file is not None else None)
    try:
        with os.fdopen(handle, "wb") as sink:
            size = api.download("custody/", params, sink)
        if file is not None:
            os.replace(temporary, file)
            click.echo(f"Wrote {size} bytes to {file}.", err=True)
        else:
            click.echo(Path(temporary).read_text(encoding="utf-8"), nl=False)
    finally:
        if os.path.exists(temporary):
            os.unlink(temporary)


COMMANDS = [custody]
