"""Quotas: what each department is guaranteed, may use, and uses now (or at ``--at``)."""

from __future__ import annotations

from typing import Any

import click

from cli.app import output_option, state
from cli.output import Column, emit_list
from cli.resolve import completer, resolve_id

QUOTA_COLUMNS: list[Column] = [
    ("ID", "id"),
    ("DEPARTMENT", "department"),
    ("FLAVOR", lambda q: q.get("flavor") or "(GPU-equivalents)"),
    ("UNIT", "unit"),
    ("GUARANTEED", "guaranteed"),
    ("LIMIT", "limit"),
    ("IN FORCE", "effective_limit"),
    ("IN USE", "in_use"),
    ("BORROWED", "borrowed"),
    ("AVAILABLE", "available"),
]


@click.group()
def quotas() -> None:
    """Department quotas."""


@quotas.command("show")
@click.option("--department", default=None, shell_complete=completer("department"),
              help="Only this department's quotas (slug or id).")
@click.option("--at", default=None, metavar="ISO-8601",
              help="What is in use and the limit in force at this instant (default: now).")
@output_option
def quotas_show(department: str | None, at: str | None) -> None:
    """The quotas you may see, with what is in use and still available, and the limit in force."""
    api = state().api()
    params: dict[str, Any] = {}
    if department:
        params["department"] = resolve_id(api, "department", department)
    if at:
        params["at"] = at
    emit_list(api.items("quotas/", params), QUOTA_COLUMNS, state().output, empty="No quotas.")


COMMANDS = [quotas]
