"""What-ifs (docs/twin.md, "What-if"): ask the portal to replay demand under proposed quotas or
priority-class factors, wait for it with its progress, and print current against proposed per
department. Over the REST API only."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from cli.app import output_option, state
from cli.client import Api
from cli.exits import CliError, Exit
from cli.output import Column, dump, emit_list, table
from cli.resolve import completer, resolve_id

F = TypeVar("F", bound=Callable[..., Any])
FIRST_DELAY, GROWTH, MAX_DELAY = 0.5, 1.5, 5.0
SETTLED = ("done", "failed")
QUOTA_FLAGS = {
    "raise_limit": ("limit_delta", 1), "lower_limit": ("limit_delta", -1), "set_limit": ("limit", 1),
    "raise_guarantee": ("guarantee_delta", 1), "lower_guarantee": ("guarantee_delta", -1), "set_guarantee": ("guarantee", 1),
}
_DAYS = re.compile(r"^(\d+)d?$")

LIST_COLUMNS: list[Column] = [
    ("ID", "id"), ("TITLE", "title"), ("FOR", lambda w: w.get("department_slug") or "(platform)"),
    ("BY", "requested_by"), ("STATE", "state"), ("PROGRESS", "progress"), ("ASKED", "created_at"),
]
FIGURE_COLUMNS: list[Column] = [
    ("DEPARTMENT", "department"), ("FIGURE", "figure"), ("CURRENT", "current"), ("PROPOSED", "proposed"),
    ("DIFFERENCE", "difference"),
]


def _quota_change(flag: str, text: str) -> dict[str, Any]:
    """``DEPARTMENT[/FLAVOR]=N`` as one quota change."""
    key, sign = QUOTA_FLAGS[flag]
    target, _, amount = text.partition("=")
    if not target or not amount:
        raise click.BadParameter(f"{text!r}: write DEPARTMENT=N or DEPARTMENT/FLAVOR=N",
                                 param_hint=f"--{flag.replace('_', '-')}")
    try:
        number = float(amount)
    except ValueError:
        raise click.BadParameter(f"{amount!r} is not a number", param_hint=f"--{flag.replace('_', '-')}") from None
    department, _, flavor = target.partition("/")
    change: dict[str, Any] = {"kind": "quota", "department": department, key: amount if sign > 0 else str(-number)}
    if flavor:
        change["flavor"] = flavor
    return change


def _days(text: str) -> int:
    found = _DAYS.match(text.strip())
    if not found:
        raise click.BadParameter(f"{text!r}: write a number of days such as 7d", param_hint="--history")
    return int(found.group(1))


def what_if_wait(api: Api, what_if: dict[str, Any], *, timeout: float, quiet: bool) -> dict[str, Any]:
    """Poll until the what-if is done or failed, reporting its progress on standard error."""
    deadline, delay, seen = time.monotonic() + timeout, FIRST_DELAY, None
    while True:
        progress = (what_if.get("state"), what_if.get("progress"))
        if progress != seen and not quiet:
            click.echo(f"what-if #{what_if['id']}: {progress[0]}, {progress[1]} %", err=True)
            seen = progress
        if what_if.get("state") in SETTLED:
            return what_if
        left = deadline - time.monotonic()
        if left <= 0:
            raise CliError(f"what-if #{what_if['id']} was still {what_if.get('state')} after {timeout:g} s; "
                           f"'gpuportal what-if show {what_if['id']}' follows it", Exit.TIMEOUT)
        time.sleep(min(delay, left))
        delay = min(delay * GROWTH, MAX_DELAY)
        what_if = api.get(f"what-ifs/{what_if['id']}/")


def figure_rows(what_if: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per department and figure: current, proposed and the difference."""
    result = what_if.get("result") or {}
    rows = []
    for row in result.get("departments", []):
        for figure in result.get("figures", []):
            rows.append({"department": row["department"], "figure": figure, "current": row["current"][figure],
                         "proposed": row["proposed"][figure], "difference": row["difference"][figure]})
    return rows


def held_back_lines(what_if: dict[str, Any]) -> list[str]:
    """Which level of each department's quota chain held its waiting demand back, current then
    proposed, in the words the portal stored with the result."""
    rows = [row for row in (what_if.get("result") or {}).get("departments", []) if row.get("binding")]
    if not rows:
        return []
    lines = ["held back (share of the GPU-hours waiting):"]
    for row in rows:
        for side in ("current", "proposed"):
            lines.append(f"  {side}: {row['binding'][side]['words']}")
    return lines


def emit_result(what_if: dict[str, Any], fmt: str) -> None:
    if fmt != "table":
        click.echo(dump(what_if, fmt))
        return
    if what_if.get("state") == "failed":
        click.echo(f"what-if #{what_if['id']} failed: {what_if.get('error')}")
        return
    if what_if.get("state") != "done":
        click.echo(f"what-if #{what_if['id']}: {what_if.get('state')}, {what_if.get('progress')} %")
        return
    result = what_if["result"]
    click.echo(f"what-if #{what_if['id']}: {result['requests']} requests on {result['installed_gpus']} GPUs, "
               f"the portal's rules now against the proposed ones")
    click.echo(table(figure_rows(what_if), FIGURE_COLUMNS))
    for line in held_back_lines(what_if):
        click.echo(line)
    if result.get("booked_ahead"):
        click.echo(f"{result['booked_ahead']} of the requests asked for a later start than their submission: decided "
                   f"at their submission, over the period they asked for (as the portal approves them ahead)")
    if result.get("not_replayed"):
        click.echo(f"not replayed (run before the replay had windows and idle policies): {', '.join(result['not_replayed'])}")


def _changes(options: dict[str, Any], changes: str | None) -> list[dict[str, Any]]:
    listed = [_quota_change(flag, text) for flag in QUOTA_FLAGS for text in options.get(flag, ())]
    if changes:
        path = Path(changes)
        text = path.read_text() if path.exists() else changes
        try:
            extra = json.loads(text)
        except json.JSONDecodeError as error:
            raise click.BadParameter(f"not JSON: {error.msg}", param_hint="--changes") from None
        listed += extra if isinstance(extra, list) else [extra]
    if not listed:
        raise click.UsageError("propose at least one change (--raise-limit nlp=4, --changes FILE, ...)")
    return listed


def _quota_option(flag: str, help_text: str) -> Callable[[F], F]:
    return click.option(f"--{flag.replace('_', '-')}", flag, multiple=True, metavar="DEPT[/FLAVOR]=N", help=help_text)


@click.group("what-if", invoke_without_command=True)
@_quota_option("raise_limit", "Raise a quota's limit by N (repeatable).")
@_quota_option("lower_limit", "Lower a quota's limit by N.")
@_quota_option("set_limit", "Set a quota's limit to N.")
@_quota_option("raise_guarantee", "Raise a quota's guarantee by N.")
@_quota_option("lower_guarantee", "Lower a quota's guarantee by N.")
@_quota_option("set_guarantee", "Set a quota's guarantee to N.")
@click.option("--changes", default=None, metavar="FILE|JSON",
              help="More changes as the API takes them: a JSON list (or a file holding one).")
@click.option("--history", default="7d", show_default=True, metavar="DAYS", help="Replay the last DAYS (e.g. 7d, 30d).")
@click.option("--workload", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help="Replay this workload file (JSON Lines, or CSV if it ends in .csv) instead of the history.")
@click.option("--department", default=None, shell_complete=completer("department"),
              help="Whose what-if (slug or id; default: the one you administer, or the platform's).")
@click.option("--title", default="", help="A title to find it by.")
@click.option("--no-wait", is_flag=True, help="Print the id and return; do not wait for the result.")
@click.option("--timeout", type=float, default=600.0, show_default=True, help="Seconds to wait for the result.")
@output_option
@click.pass_context
def what_if(ctx: click.Context, /, **options: Any) -> None:
    """Replay demand under proposed quotas or priority classes; print current against proposed.

    \b
    gpuportal what-if --raise-limit nlp=4 --history 7d
    gpuportal what-if --set-limit vision/h100-80gb=12 --history 30d -o json
    gpuportal what-if list | gpuportal what-if show ID
    """
    if ctx.invoked_subcommand is not None:
        return
    api = state().api()
    done = _ask(api, options)
    if done is None:
        return
    emit_result(done, state().output)
    if done.get("state") == "failed":
        raise CliError(f"what-if #{done['id']} failed: {done.get('error')}", Exit.ERROR)


def _ask(api: Api, options: dict[str, Any]) -> dict[str, Any] | None:
    """Ask for the what-if the options describe; wait for it unless ``--no-wait`` (then None)."""
    body: dict[str, Any] = {"changes": _changes(options, options["changes"]), "title": options["title"]}
    workload: Path | None = options["workload"]
    if workload is not None:
        body.update(workload=workload.read_text(), workload_format="csv" if workload.suffix.lower() == ".csv" else "jsonl")
    else:
        body["history_days"] = _days(options["history"])
    if options["department"]:
        body["department"] = resolve_id(api, "department", options["department"])
    _, created = api.post("what-ifs/", body)
    if options["no_wait"]:
        click.echo(created["id"] if state().output == "table" else dump(created, state().output))
        return None
    return what_if_wait(api, created, timeout=options["timeout"], quiet=state().output != "table")


@what_if.command("show")
@click.argument("what_if_id", type=int)
@click.option("--wait", is_flag=True, help="Wait until it is done, with its progress.")
@output_option
def what_if_show(what_if_id: int, wait: bool) -> None:
    """One what-if: its state, and once done current against proposed per department."""
    api = state().api()
    found = api.get(f"what-ifs/{what_if_id}/")
    if wait:
        found = what_if_wait(api, found, timeout=600.0, quiet=state().output != "table")
    emit_result(found, state().output)


@what_if.command("list")
@output_option
def what_if_list() -> None:
    """The what-ifs you may read, newest first."""
    emit_list(state().api().items("what-ifs/"), LIST_COLUMNS, state().output, empty="No what-ifs.")


COMMANDS = [what_if]
