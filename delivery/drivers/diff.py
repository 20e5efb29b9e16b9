"""Which fields of a live object differ from what the portal wants, in server-side-apply terms.

An object needs applying when a field we want differs from the live value, when a field we want
is not (or no longer) owned by our field manager (someone edited it by hand: an update moves its
ownership), or when we still own a field we no longer want (applying drops it). Lists are
compared whole: every list the portal renders is atomic for server-side apply.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from decimal import Decimal, InvalidOperation
from typing import Any

from kernel.quantity import parse_quantity

FIELD_MANAGER = "gpuportal"
_IDENTITY = {("apiVersion",), ("kind",), ("metadata", "name"), ("metadata", "namespace")}
_QUANTITY = re.compile(r"^[+-]?[0-9.]+([eE][+-]?[0-9]+|[numkMGTPE]|[KMGTPE]i)?$")

Path = tuple[str, ...]


def leaves(document: Any, prefix: Path = ()) -> Iterator[Path]:
    """Paths to the leaves of a rendered object; lists and empty maps are leaves."""
    if isinstance(document, dict) and document:
        for key, value in document.items():
            yield from leaves(value, (*prefix, str(key)))
    elif prefix not in _IDENTITY:
        yield prefix


def owned_leaves(fields_v1: dict[str, Any], prefix: Path = ()) -> Iterator[Path]:
    """Leaves of a managedFields ``fieldsV1`` set. An entry keyed ``k:``/``v:``/``i:`` belongs to a
    list; the list itself then counts as the owned leaf."""
    children = {key: value for key, value in fields_v1.items() if key != "."}
    if not children:
        yield prefix
        return
    if any(not key.startswith("f:") for key in children):
        yield prefix
        return
    for key, value in children.items():
        yield from owned_leaves(value if isinstance(value, dict) else {}, (*prefix, key[2:]))


def manager_leaves(live: dict[str, Any], manager: str = FIELD_MANAGER) -> set[Path]:
    owned: set[Path] = set()
    for entry in live.get("metadata", {}).get("managedFields") or []:
        if entry.get("manager") == manager and entry.get("operation") == "Apply":
            owned.update(owned_leaves(entry.get("fieldsV1") or {}))
    return owned


def value_at(document: Any, path: Path) -> Any:
    for key in path:
        if not isinstance(document, dict) or key not in document:
            return None
        document = document[key]
    return document


def _empty(value: Any) -> bool:
    return value is None or value == "" or value == [] or value == {} or value is False or value == 0


def values_equal(wanted: Any, live: Any) -> bool:
    """Equal, treating an absent field as its zero value and quantities by amount (the server
    writes ``24000m`` back as ``24``)."""
    if wanted == live or (_empty(wanted) and _empty(live)):
        return True
    if isinstance(wanted, str) and isinstance(live, str) and _QUANTITY.match(wanted) and _QUANTITY.match(live):
        try:
            return bool(parse_quantity(wanted) == parse_quantity(live))
        except (ValueError, InvalidOperation):
            return False
    if isinstance(wanted, list) and isinstance(live, list) and len(wanted) == len(live):
        return all(_structures_equal(a, b) for a, b in zip(wanted, live, strict=True))
    return False


def _structures_equal(wanted: Any, live: Any) -> bool:
    """Inside lists: every wanted key equal; keys the server defaulted are not ours to judge."""
    if isinstance(wanted, dict) and isinstance(live, dict):
        return all(_structures_equal(value, live.get(key)) for key, value in wanted.items())
    return values_equal(wanted, live)


def differing_fields(wanted: dict[str, Any], live: dict[str, Any] | None, manager: str = FIELD_MANAGER) -> list[str]:
    """Dotted paths that make ``live`` differ from ``wanted``; empty when nothing needs applying."""
    wanted_paths = set(leaves(wanted))
    if live is None:
        return sorted(".".join(path) for path in wanted_paths)
    owned = manager_leaves(live, manager)
    differing = {path for path in wanted_paths if not values_equal(value_at(wanted, path), value_at(live, path))}
    differing |= {path for path in wanted_paths if not _covered(path, owned)}
    differing |= {path for path in owned - wanted_paths if not _is_prefix_of_any(path, wanted_paths)}
    return sorted(".".join(path) for path in differing)


def _covered(path: Path, owned: set[Path]) -> bool:
    """Owned directly, or inside an atomic struct or list the manager owns whole."""
    return any(path[: length] in owned for length in range(len(path), 0, -1))


def _is_prefix_of_any(path: Path, paths: set[Path]) -> bool:
    return any(other[: len(path)] == path for other in paths)


def quantity(value: str) -> Decimal:
    return Decimal(parse_quantity(value))
