"""A validator for the part of JSON Schema (draft 2020-12) that ``report_schema.json`` uses.

No JSON Schema package is installed, and the point is to check the report strictly, so this
implements exactly the keywords in ``SUPPORTED_KEYWORDS`` and a test makes sure the schema uses
no others (an unknown keyword would otherwise be silently ignored).
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

SUPPORTED_KEYWORDS = frozenset(
    {
        "$schema", "$id", "$defs", "$ref", "title", "description",
        "type", "const", "enum", "anyOf",
        "properties", "required", "additionalProperties",
        "items", "maxItems", "uniqueItems",
        "minimum", "maximum", "minLength", "maxLength", "pattern", "format",
    }
)  # fmt: skip

_TYPES = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
}


def validate(instance: Any, schema: dict[str, Any]) -> list[str]:
    """Every violation, as '<JSON pointer>: <what is wrong>'; empty when the instance is valid."""
    errors: list[str] = []
    _check(instance, schema, schema, "", errors)
    return errors


def ecma_pattern(pattern: str) -> str:
    """JSON Schema patterns are ECMA-262: ``$`` is the end of input, not "before a final newline"."""
    return pattern.replace("$", r"\Z")


def _check(value: Any, schema: dict[str, Any], root: dict[str, Any], path: str, errors: list[str]) -> None:
    if "$ref" in schema:
        _check(value, _resolve(schema["$ref"], root), root, path, errors)
    if "type" in schema:
        types = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
        if not any(_TYPES[name](value) for name in types):
            errors.append(f"{path or '/'}: {value!r:.60} is not of type {types}")
            return
    if "const" in schema and not _same(value, schema["const"]):
        errors.append(f"{path or '/'}: must be {schema['const']!r}")
    if "enum" in schema and not any(_same(value, option) for option in schema["enum"]):
        errors.append(f"{path or '/'}: {value!r} is not one of {schema['enum']}")
    if "anyOf" in schema and not any(not validate_against(value, option, root, path) for option in schema["anyOf"]):
        errors.append(
            f"{path or '/'}: matches none of anyOf: {validate_against(value, schema['anyOf'][0], root, path)}"
        )
    if isinstance(value, dict):
        _check_object(value, schema, root, path, errors)
    if isinstance(value, list):
        _check_array(value, schema, root, path, errors)
    if isinstance(value, str):
        _check_string(value, schema, path, errors)
    if _TYPES["number"](value):
        if "minimum" in schema and value < schema["minimum"]:
            errors.append(f"{path}: {value} < minimum {schema['minimum']}")
        if "maximum" in schema and value > schema["maximum"]:
            errors.append(f"{path}: {value} > maximum {schema['maximum']}")


def validate_against(value: Any, schema: dict[str, Any], root: dict[str, Any], path: str) -> list[str]:
    errors: list[str] = []
    _check(value, schema, root, path, errors)
    return errors


def _check_object(
    value: dict[str, Any], schema: dict[str, Any], root: dict[str, Any], path: str, errors: list[str]
) -> None:
    properties = schema.get("properties", {})
    for name in schema.get("required", []):
        if name not in value:
            errors.append(f"{path}/{name}: required")
    for name, item in value.items():
        if name in properties:
            _check(item, properties[name], root, f"{path}/{name}", errors)
        elif schema.get("additionalProperties") is False:
            errors.append(f"{path}/{name}: not allowed (additionalProperties is false)")


def _check_array(value: list[Any], schema: dict[str, Any], root: dict[str, Any], path: str, errors: list[str]) -> None:
    if "maxItems" in schema and len(value) > schema["maxItems"]:
        errors.append(f"{path}: {len(value)} items > maxItems {schema['maxItems']}")
    if schema.get("uniqueItems") and len({repr(item) for item in value}) != len(value):
        errors.append(f"{path}: items are not unique")
    if "items" in schema:
        for index, item in enumerate(value):
            _check(item, schema["items"], root, f"{path}/{index}", errors)


def _check_string(value: str, schema: dict[str, Any], path: str, errors: list[str]) -> None:
    if "minLength" in schema and len(value) < schema["minLength"]:
        errors.append(f"{path}: shorter than {schema['minLength']}")
    if "maxLength" in schema and len(value) > schema["maxLength"]:
        errors.append(f"{path}: longer than {schema['maxLength']}")
    if "pattern" in schema and not re.search(ecma_pattern(schema["pattern"]), value):
        errors.append(f"{path}: {value!r} does not match {schema['pattern']}")
    if schema.get("format") == "date-time":
        try:
            datetime.fromisoformat(value)
        except ValueError:
            errors.append(f"{path}: {value!r} is not a date-time")


def _resolve(reference: str, root: dict[str, Any]) -> dict[str, Any]:
    assert reference.startswith("#/"), f"only local references are supported: {reference}"
    node: Any = root
    for part in reference[2:].split("/"):
        node = node[part]
    assert isinstance(node, dict)
    return node


def _same(a: Any, b: Any) -> bool:
    return type(a) is type(b) and a == b
