"""What the report validator's two compilations share (``schema_check.Validator`` names every
violation, ``schema_predicates.Predicates`` only says valid or not): the keywords implemented, the
JSON types, JSON equality and ECMA-262 patterns."""

from __future__ import annotations

import re
from collections.abc import Mapping
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


class UnsupportedSchema(ValueError):
    """The schema uses a keyword, type, format or reference this validator does not implement."""


# json.loads builds exactly these types (a bool is not an int here: ``type(True) is bool``).
TYPE_CLASSES: dict[str, tuple[type, ...]] = {
    "object": (dict,),
    "array": (list,),
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "null": (type(None),),
}
TYPE_WORDS = {
    "object": "an object", "array": "an array", "string": "a string", "integer": "an integer",
    "number": "a number", "boolean": "a boolean", "null": "null",
}  # fmt: skip


def pointer_token(name: str) -> str:
    """One reference token of a JSON pointer: ``~`` and ``/`` escaped as RFC 6901 says."""
    return name.replace("~", "~0").replace("/", "~1")


def ecma_pattern(pattern: str) -> re.Pattern[str]:
    """JSON Schema patterns are ECMA-262 and unanchored; an unescaped ``$`` is the end of the input
    there, where Python's would also match before a final newline."""
    translated = re.sub(r"(?<!\\)\$", r"\\Z", pattern)
    return re.compile(translated)


def is_number(value: Any) -> bool:
    return type(value) is int or type(value) is float


def same(a: Any, b: Any) -> bool:
    """JSON equality for const/enum: ``true`` is not ``1``."""
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if is_number(a) and is_number(b):
        return bool(a == b)
    return type(a) is type(b) and a == b


def string_keywords(schema: Mapping[str, Any]) -> tuple[int | None, int | None, re.Pattern[str] | None, str | None]:
    """A string schema's minLength, maxLength, compiled pattern and format (only date-time is
    implemented: any other is refused)."""
    pattern = ecma_pattern(schema["pattern"]) if "pattern" in schema else None
    text_format = schema.get("format")
    if text_format not in (None, "date-time"):
        raise UnsupportedSchema(f"unsupported format {text_format!r}")
    return schema.get("minLength"), schema.get("maxLength"), pattern, text_format


def resolve_reference(root: Mapping[str, Any], reference: str) -> Mapping[str, Any]:
    """The schema a local ``$ref`` (``#/…``, RFC 6901 tokens) points at in ``root``."""
    if not reference.startswith("#/"):
        raise UnsupportedSchema(f"only local references are supported: {reference}")
    node: Any = root
    for part in reference[2:].split("/"):
        node = node[part.replace("~1", "/").replace("~0", "~")]
    if not isinstance(node, Mapping):
        raise UnsupportedSchema(f"{reference} is not a schema")
    return node
