"""Allocations: list, show, release, renew."""

from __future__ import annotations

import datetime
from typing import Any

import click

from cli.app import output_option, state
from cli.output import Column, emit_list, emit_one
from cli.resolve import completer, resolve_id
from cli.times import TIME

STATES = (
    "pending", "scheduled", "approved", "provisioning", "active", "failed", "rejected", "cancelled", "released",
    "expired", "reclaiming", "reclaimed",
)


def _when(value: Any) -> str:
    """An API timestamp shortened to minutes, in UTC, for tables."""
    if not isinstance(value, str):
        return "-"
    try:
        moment = datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return value
    return moment.astimezone(datetime.UTC).strftime("%Y-%m-%d %H:%M")


LIST_COLUMNS: list[Column] = [
    ("ID", "id"),
    ("STATE", "state"),
    ("PROJECT", "project"),
    ("FLAVOR", "flavor"),
    ("COUNT", "quantity"),
    ("START (UTC)", lambda a: _when(a.get("starts_at"))),
    ("END (UTC)", lambda a: _when(a.get("ends_at"))),
    ("REQUESTED BY", "requested_by"),
]
DETAIL_COLUMNS: list[Column] = [
    ("ID", "id"),
    ("STATE", "state"),
    ("PROJECT", "project"),
    ("DEPARTMENT", "department"),
    ("FLAVOR", "flavor"),
    ("COUNT", "quantity"),
    ("GPU-EQUIVALENTS", "gpu_equivalents"),
    ("PRIORITY CLASS", "priority_class"),
    ("CLUSTER", "cluster"),
    ("START", "starts_at"),
    ("END", "ends_at"),
    ("REQUESTED BY", "requested_by"),
    ("REASON", "justification"),
    ("DECIDED BY", "decided_by"),
    ("DECIDED AT", "decided_at"),
    ("DECISION COMMENT", "decision_comment"),
    ("FAILURE", "failure_reason"),
    ("PENDING CHANGE", "pending_change"),
]


@click.group()
def allocations() -> None:
    """Allocations: GPU grants of projects, from request to release."""


@allocations.command("list")
@click.option("--state", "states", multiple=True, type=click.Choice(STATES), help="Only these states (repeatable).")
@click.option("--project", default=None, shell_complete=completer("project"), help="Only this project (slug or id).")
@click.option("--department", default=None, shell_complete=completer("department"),
              help="Only this department (slug or id).")
@click.option("--mine", is_flag=True, help="Only the allocations I requested.")
@output_option
def allocations_list(states: tuple[str, ...], project: str | None, department: str | None, mine: bool) -> None:
    """The allocations you may see (a researcher: their projects'; an admin: the department's)."""
    api = state().api()
    params: dict[str, Any] = {}
    if states:
        params["state"] = list(states)
    if project:
        params["project"] = resolve_id(api, "project", project)
    if department:
        params["department"] = resolve_id(api, "department", department)
    if mine:
        params["mine"] = "true"
    emit_list(api.items("allocations/", params), LIST_COLUMNS, state().output, empty="No allocations.")


@allocations.command("show")
@click.argument("allocation_id", type=int)
@output_option
def allocations_show(allocation_id: int) -> None:
    """One allocation, with its decision and placement."""
    emit_one(state().api().get(f"allocations/{allocation_id}/"), DETAIL_COLUMNS, state().output)


@allocations.command("release")
@click.argument("allocation_id", type=int)
@click.option("--comment", default="", help="Why (kept in the audit log).")
@output_option
def allocations_release(allocation_id: int, comment: str) -> None:
    """Give an allocation's GPUs back now (or withdraw a pending request)."""
    _, body = state().api().post(f"allocations/{allocation_id}/release/", {"comment": comment})
    click.echo(f"Allocation {allocation_id} is {body.get('state')}.", err=True)
    emit_one(body, DETAIL_COLUMNS, state().output)


@allocations.command("renew")
@click.argument("allocation_id", type=int)
@click.option("--end", "ends_at", required=True, type=TIME, help="The new end (ISO 8601, or +7d from now).")
@click.option("--reason", default="", help="Why it needs longer (shown to the approver).")
@output_option
def allocations_renew(allocation_id: int, ends_at: datetime.datetime, reason: str) -> None:
    """Move an allocation's end. Within the self-service window it moves at once; beyond it the
    renewal waits for a department admin (see 'gpuportal approvals list --changes')."""
    status, body = state().api().post(
        f"allocations/{allocation_id}/renew/", {"ends_at": ends_at.isoformat(), "justification": reason}
    )
    if status == 202:
        click.echo(f"Renewal #{body.get('id')} waits for a department admin's approval.", err=True)
        emit_one(body, [("CHANGE", "id"), ("KIND", "kind"), ("STATE", "state"), ("ALLOCATION", "allocation"),
                        ("NEW END", "ends_at")], state().output)
        return
    click.echo(f"Allocation {allocation_id} now ends at {body.get('ends_at')}.", err=True)
    emit_one(body, DETAIL_COLUMNS, state().output)


COMMANDS = [allocations]
