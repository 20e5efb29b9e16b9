"""Approvals: the requests (and, with --changes, the renewals and resizes) waiting for a decision."""

from __future__ import annotations

import click

from cli.app import output_option, state
from cli.commands.allocations import DETAIL_COLUMNS, LIST_COLUMNS
from cli.output import Column, emit_list, emit_one

CHANGE_COLUMNS: list[Column] = [
    ("CHANGE", "id"),
    ("KIND", "kind"),
    ("STATE", "state"),
    ("ALLOCATION", "allocation"),
    ("PROJECT", "project"),
    ("NEW END", "ends_at"),
    ("NEW COUNT", "quantity"),
    ("REQUESTED BY", "requested_by"),
    ("REASON", "justification"),
]


@click.group()
def approvals() -> None:
    """Decide requests as a department admin: list, approve, reject."""


@approvals.command("list")
@click.option("--changes", is_flag=True, help="Renewals and resizes waiting for a decision, instead of requests.")
@output_option
def approvals_list(changes: bool) -> None:
    """What waits for a decision among what you may see (a department admin sees the department's)."""
    api = state().api()
    if changes:
        rows = api.items("allocation-changes/", {"state": "pending"})
        emit_list(rows, CHANGE_COLUMNS, state().output, empty="No changes wait for a decision.")
        return
    rows = api.items("allocations/", {"state": ["pending"]})
    emit_list(rows, [*LIST_COLUMNS, ("REASON", "justification")], state().output,
              empty="No requests wait for a decision.")


def _decide(verb: str, item_id: int, comment: str, change: bool) -> None:
    path = f"allocation-changes/{item_id}/{verb}/" if change else f"allocations/{item_id}/{verb}/"
    _, body = state().api().post(path, {"comment": comment})
    what = f"Change {item_id}" if change else f"Request {item_id}"
    click.echo(f"{what} is {body.get('state')}.", err=True)
    emit_one(body, CHANGE_COLUMNS if change else DETAIL_COLUMNS, state().output)


@approvals.command("approve")
@click.argument("item_id", metavar="ID", type=int)
@click.option("--comment", default="", help="A comment for the requester (kept in the audit log).")
@click.option("--note", default=None, hidden=True, help="Deprecated: --comment, as every other command names it.")
@click.option("--change", is_flag=True, help="ID is a renewal or resize (from 'approvals list --changes').")
@output_option
def approvals_approve(item_id: int, comment: str, note: str | None, change: bool) -> None:
    """Approve request ID: its GPUs are booked and it is provisioned (or scheduled for its start)."""
    if note is not None:  # the option's former name, kept so that scripts using it go on working
        click.echo("warning: --note is deprecated; use --comment", err=True)
        comment = comment or note
    _decide("approve", item_id, comment, change)


@approvals.command("reject")
@click.argument("item_id", metavar="ID", type=int)
@click.option("--reason", required=True, help="Why (shown to the requester, kept in the audit log).")
@click.option("--change", is_flag=True, help="ID is a renewal or resize (from 'approvals list --changes').")
@output_option
def approvals_reject(item_id: int, reason: str, change: bool) -> None:
    """Reject request ID."""
    _decide("reject", item_id, reason, change)


COMMANDS = [approvals]
