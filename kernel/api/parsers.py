"""The API's JSON parser: DRF's, with the nesting depth of a body bounded.

Python's JSON decoder recurses once per level: about a thousand levels raise ``RecursionError``
(a 500), and fewer still reach code that recurses again (validation, error flattening, audit
details). No request of this API nests more than a few levels, so a body nested deeper than
``GPUPORTAL_API_JSON_MAX_DEPTH`` levels (default 64) is refused as a 400 naming the body.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import IO, Any

from rest_framework import parsers
from rest_framework.exceptions import ParseError

from kernel.conf import setting_int


class JsonTooDeep(ParseError):
    """The body nests arrays and objects deeper than the limit."""

    default_code = "too_deep"


def json_max_depth() -> int:
    return setting_int("GPUPORTAL_API_JSON_MAX_DEPTH")


def deeper_than(data: Any, limit: int) -> bool:
    """Whether ``data`` nests arrays and objects more than ``limit`` levels deep (``[]`` is one
    level, ``[[]]`` two). Iterative, so the check itself cannot run out of stack."""
    stack: list[tuple[Any, int]] = [(data, 0)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, Mapping):
            children: Any = value.values()
        elif isinstance(value, list):
            children = value
        else:
            continue
        if depth + 1 > limit:
            return True
        stack.extend((child, depth + 1) for child in children)
    return False


class JSONParser(parsers.JSONParser):
    def parse(
        self, stream: IO[Any], media_type: str | None = None, parser_context: Mapping[str, Any] | None = None
    ) -> dict[str, Any]:
        limit = json_max_depth()
        too_deep = JsonTooDeep(f"The request body nests arrays and objects more than {limit} levels deep.")
        try:
            data: dict[str, Any] = super().parse(stream, media_type, parser_context)
        except RecursionError:
            raise too_deep from None
        if deeper_than(data, limit):
            raise too_deep
        return data
