"""The API's JSON parser: DRF's, with the nesting depth of a body bounded.

Python's JSON decoder recurses once per level: about a thousand levels raise ``RecursionError``
(a 500), and fewer still reach code that recurses again (validation, error flattening, audit
details). No request of this API nests more than a few levels, so a body nested deeper than
``GPUPORTAL_API_JSON_MAX_DEPTH`` levels (default 64) is refused as a 400 naming the body. A body
longer than ``DATA_UPLOAD_MAX_MEMORY_SIZE`` is a 413 naming the body, before it is parsed.
"""

from __future__ import annotations

import io
from collections.abc import Mapping
from typing import IO, Any

from django.conf import settings
from rest_framework import parsers
from rest_framework.exceptions import ParseError

from kernel.conf import setting_int
from kernel.errors import ApplicationError


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


class BodyTooLarge(ApplicationError):
    """The body is longer than ``DATA_UPLOAD_MAX_MEMORY_SIZE`` (Django's own limit, which a JSON body
    read by DRF would otherwise escape)."""

    status = 413
    code = "payload_too_large"


def read_bounded(stream: IO[bytes], declared: str | None) -> bytes:
    """The body, refused as a 413 as soon as it is known to exceed the limit: by its declared
    ``Content-Length``, or after reading one byte more than the limit."""
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    if limit is None:
        return stream.read()
    try:
        length = int(declared or 0)
    except ValueError:
        length = 0
    if length > limit:
        raise BodyTooLarge(f"The request body may be at most {limit} bytes.", fields={"body": [f"{length} bytes > {limit}"]})
    body = stream.read(limit + 1)
    if len(body) > limit:
        raise BodyTooLarge(f"The request body may be at most {limit} bytes.", fields={"body": [f"more than {limit} bytes"]})
    return body


class JSONParser(parsers.JSONParser):
    def parse(
        self, stream: IO[Any], media_type: str | None = None, parser_context: Mapping[str, Any] | None = None
    ) -> dict[str, Any]:
        request = (parser_context or {}).get("request")
        declared = request.META.get("CONTENT_LENGTH") if request is not None else None
        body = io.BytesIO(read_bounded(stream, declared))
        limit = json_max_depth()
        too_deep = JsonTooDeep(f"The request body nests arrays and objects more than {limit} levels deep.")
        try:
            data: dict[str, Any] = super().parse(body, media_type, parser_context)
        except RecursionError:
            raise too_deep from None
        if deeper_than(data, limit):
            raise too_deep
        return data
