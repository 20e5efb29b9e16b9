"""``request create``: ask for GPUs, and with ``--wait`` follow the request until it settles."""

from __future__ import annotations

import datetime
import sys
from typing import Any

import click

from cli.app import output_option, state
from cli.client import Api
from cli.commands.allocations import DETAIL_COLUMNS
from cli.exits import CliError, Exit
from cli.output import emit_one
from cli.resolve import completer, resolve_id
from cli.times import TIME
from cli.waiting import allocation_wait, describe


@click.group("request")
def request_group() -> None:
    """Requests for GPUs (they become allocations once approved)."""


@request_group.command("create")
@click.option("--project", required=True, shell_complete=completer("project"), help="Project (slug or id).")
@click.option("--flavor", required=True, shell_complete=completer("flavor"), help="Flavor (name or id).")
@click.option("--count", required=True, type=click.IntRange(1, 10000), help="How many units of the flavor.")
@click.option("--start", "starts_at", type=TIME, default=None, help="When it starts (default: as soon as approved).")
@click.option("--end", "ends_at", type=TIME, required=True, help="When it ends (ISO 8601, or e.g. +7d).")
@click.option("--reason", required=True, help="Why the project needs the GPUs (shown to the approver).")
@click.option("--priority-class", default=None, shell_complete=completer("priority class"),
              help="Priority class (name or id; default: the portal's).")
@click.option("--yes", "-y", "confirmed", is_flag=True,
              help="Submit even if approval would reclaim grants or be refused as things stand (no question asked).")
@click.option("--wait", is_flag=True, help="Follow approval and provisioning until the request settles.")
@click.option("--timeout", type=click.FloatRange(min=0), default=3600.0, show_default=True,
              help="With --wait: give up after this many seconds (exit 6).")
@output_option
def request_create(
    project: str, flavor: str, count: int, starts_at: datetime.datetime | None, ends_at: datetime.datetime,
    reason: str, priority_class: str | None, confirmed: bool, wait: bool, timeout: float,
) -> None:
    """Request GPUs for a project.

    First it asks the portal what approving it would do now. When approval would reclaim other
    grants or be refused as things stand (where the portal's form asks to confirm), it says so on
    standard error and asks whether to submit it anyway; without a terminal to ask on, it submits
    nothing and exits 11 unless --yes is given.

    Without --wait it prints the new request and ends. With --wait it reports each change of
    state on standard error and ends when the request is active (exit 0), scheduled for a later
    start (exit 0), rejected, cancelled or failed (exit 7), or after --timeout (exit 6); the
    request is printed last in every case. Ctrl-C stops waiting (exit 130), not the request.
    """
    api = state().api()
    body: dict[str, Any] = {
        "project": resolve_id(api, "project", project),
        "flavor": resolve_id(api, "flavor", flavor),
        "quantity": count,
        "ends_at": ends_at.isoformat(),
        "justification": reason,
    }
    if starts_at is not None:
        body["starts_at"] = starts_at.isoformat()
    if priority_class is not None:
        body["priority_class"] = resolve_id(api, "priority class", priority_class)
    _confirm_outlook(api, body, confirmed=confirmed)
    _, allocation = api.post("allocations/", body)
    click.echo(f"Request {allocation['id']} submitted.", err=True)
    if not wait:
        emit_one(allocation, DETAIL_COLUMNS, state().output)
        return

    def report(seen: str, item: dict[str, Any]) -> None:
        stamp = datetime.datetime.now(datetime.UTC).strftime("%H:%M:%S")
        click.echo(f"{stamp}  {item['id']}  {seen}: {describe(item)}", err=True)

    def warn(message: str) -> None:
        click.echo(f"warning: {message}", err=True)

    try:
        outcome = allocation_wait(api, allocation, timeout=timeout, report=report, warn=warn)
    except KeyboardInterrupt:
        click.echo(f"Stopped waiting; request {allocation['id']} goes on "
                   f"(follow it with 'gpuportal allocations show {allocation['id']}').", err=True)
        raise click.exceptions.Exit(int(Exit.INTERRUPTED)) from None
    emit_one(outcome.allocation, DETAIL_COLUMNS, state().output)
    if outcome.code == Exit.TIMEOUT:
        raise CliError(
            f"request {allocation['id']} is still {outcome.allocation.get('state')} after {timeout:g} s "
            f"(follow it with 'gpuportal allocations show {allocation['id']}')",
            Exit.TIMEOUT,
        )
    if outcome.code == Exit.NOT_GRANTED:
        raise CliError(f"request {allocation['id']} was not granted: {describe(outcome.allocation)}", Exit.NOT_GRANTED)


def _interactive() -> bool:
    """Whether there is a person at a terminal to ask (standard input is one)."""
    return sys.stdin is not None and sys.stdin.isatty()


def _confirm_outlook(api: Api, body: dict[str, Any], *, confirmed: bool) -> None:
    """Warn, and ask, when approval would reclaim grants or be refused (POST allocations/preview/)."""
    try:
        _, outlook = api.post("allocations/preview/", body)
    except CliError as error:
        if error.code != Exit.NOT_FOUND:
            raise
        click.echo("warning: this portal cannot say what approval would do (no allocations/preview/)", err=True)
        return
    if not outlook.get("needs_confirmation"):
        return
    click.echo(f"warning: {outlook.get('summary', '')}", err=True)
    for line in outlook.get("reclaim") or []:
        click.echo(f"  #{line.get('allocation')} {line.get('units')} of {line.get('quantity')} × {line.get('flavor')} "
                   f"of {line.get('project')} (department {line.get('department')}): {line.get('why')}", err=True)
    if confirmed:
        return
    if not _interactive():
        raise CliError("not submitted: approval would reclaim grants or be refused as things stand; "
                       "give --yes to submit it anyway", Exit.NOT_CONFIRMED)
    if not click.confirm("Submit the request anyway?", default=False, err=True):
        raise CliError("not submitted", Exit.NOT_CONFIRMED)


COMMANDS = [request_group]
