"""``-o table|json|yaml``: tables of chosen columns for people, the API's full objects for scripts.

JSON and YAML print exactly what the API returned (a list for list commands), so a script sees every
field; a table shows the columns that matter, aligned, one object a line (or one field a line for a
single object). Values are never truncated.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

import click
import yaml

FORMATS = ("table", "json", "yaml")
Column = tuple[str, str | Callable[[dict[str, Any]], Any]]


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list | dict):
        return json.dumps(value, separators=(",", ":")) if value else "-"
    return str(value).replace("\n", " ")


def _value(item: dict[str, Any], key: str | Callable[[dict[str, Any]], Any]) -> str:
    return _cell(key(item) if callable(key) else item.get(key))


def table(rows: Sequence[dict[str, Any]], columns: Sequence[Column]) -> str:
    cells = [[header for header, _ in columns]] + [[_value(row, key) for _, key in columns] for row in rows]
    widths = [max(len(line[i]) for line in cells) for i in range(len(columns))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip() for line in cells)


def fields(item: dict[str, Any], columns: Sequence[Column]) -> str:
    width = max(len(header) for header, _ in columns)
    return "\n".join(f"{header.ljust(width)}  {_value(item, key)}" for header, key in columns)


def dump(data: Any, fmt: str) -> str:
    if fmt == "json":
        return json.dumps(data, indent=2, sort_keys=False, ensure_ascii=False)
    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True).rstrip("\n")


def emit_list(rows: Sequence[dict[str, Any]], columns: Sequence[Column], fmt: str, *, empty: str = "") -> None:
    if fmt != "table":
        click.echo(dump(list(rows), fmt))
    elif not rows and empty:
        click.echo(empty, err=True)
    else:
        click.echo(table(rows, columns))


def emit_one(item: dict[str, Any], columns: Sequence[Column], fmt: str) -> None:
    click.echo(fields(item, columns) if fmt == "table" else dump(item, fmt))
