"""Objects named on the command line by name (or slug) or by id, resolved through the API's lists,
and completion of those names for the shells."""

from __future__ import annotations

from typing import Any

import click
from click.shell_completion import CompletionItem

from cli.client import Api
from cli.config import context_resolve
from cli.exits import CliError, Exit

# what a kind is listed from, and which fields name one
KINDS: dict[str, tuple[str, tuple[str, ...]]] = {
    "project": ("projects/", ("slug", "name")),
    "flavor": ("flavors/", ("name", "display_name")),
    "department": ("departments/", ("slug", "name")),
    "priority class": ("priority-classes/", ("name",)),
}


def resolve_id(api: Api, kind: str, reference: str) -> int:
    """The id of the ``kind`` that ``reference`` names: an id as is, else the one object whose name
    (or slug) matches exactly, else the one whose name matches ignoring case."""
    if reference.isdigit():
        return int(reference)
    path, names = KINDS[kind]
    items = api.items(path)
    for exact in (True, False):
        matches = [
            item for item in items
            if any(
                isinstance(item.get(n), str) and (item[n] == reference if exact else item[n].lower() == reference.lower())
                for n in names
            )
        ]
        if len(matches) == 1:
            return int(matches[0]["id"])
        if len(matches) > 1:
            ids = ", ".join(str(item["id"]) for item in matches)
            raise CliError(f"{reference!r} names several {kind}s (ids {ids}): give the id", Exit.ERROR)
    known = ", ".join(sorted(str(item.get(names[0])) for item in items)) or "none visible to you"
    raise CliError(f"no {kind} named {reference!r} (known: {known})", Exit.NOT_FOUND)


def completer(kind: str) -> Any:
    """A shell completion callback listing the ``kind``'s names; silent when the API is unreachable."""

    def complete(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[CompletionItem]:
        try:
            context = context_resolve(name=None)
            path, names = KINDS[kind]
            items = Api(context.url, context.token, timeout=5).items(path)
        except Exception:  # noqa: BLE001 - completion must never print a traceback into the shell
            return []
        values = sorted({str(item.get(names[0])) for item in items})
        return [CompletionItem(value) for value in values if value.startswith(incomplete)]

    return complete
