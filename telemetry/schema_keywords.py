"""What the report validator's two compilations share (``schema_check.Validator`` names every
violation, ``schema_predicates.Predicates`` only says valid or not): the keywords implemented, the
JSON types, JSON equality and ECMA-262 patterns."""

from __future__ import annotations

import re
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
