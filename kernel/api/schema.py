"""The API's schema class (``REST_FRAMEWORK["DEFAULT_SCHEMA_CLASS"]``) and what it shares with the
views at run time, so that what the schema documents and what a view accepts cannot drift apart.

- Tags: each operation is tagged with its resource, the first segment of its path after
  ``/api/v1/`` (``allocations``, ``audit``…); ``SPECTACULAR_SETTINGS["TAGS"]`` describes each.
- Ordering: a list view's ``ordering_fields`` become its documented ``ordering`` parameter, an enum
  of each name and its ``-name`` (``kernel.api.ordering``).
- Request bodies: each object says ``additionalProperties: false``, as an unknown field is refused.
- Errors every operation shares, documented where the view's own ``errors(...)`` did not: 400 (an
  unknown query parameter or body field: ``kernel.api.views``), 401, 404 (a path id or a page that
  does not exist), 406 (an ``Accept`` no renderer offers), 413 and 415 (a body over the limit, or
  not JSON).
- ``documented``: the query parameters and whether a request body is documented for one view and
  method, computed by this same class; ``kernel.api.views.ApiView`` refuses every other parameter,
  and any body sent to an operation that takes none.
- ``SCHEMA_LOCK``: drf-spectacular is not safe on two threads at once, and the portal runs it while
  serving (``documented``, the first time for each view and method, and
  ``kernel.api.schema_view.SchemaView``).
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass
from typing import Any

from drf_spectacular import openapi
from drf_spectacular.drainage import GENERATOR_STATS
from drf_spectacular.generators import SchemaGenerator
from drf_spectacular.plumbing import ComponentRegistry
from drf_spectacular.utils import OpenApiParameter
from rest_framework.negotiation import DefaultContentNegotiation
from rest_framework.request import Request
from rest_framework.views import APIView

from kernel.api.openapi import ERROR_DESCRIPTIONS, ErrorOut
from kernel.api.ordering import ORDERING_PARAM, ordering_choices, ordering_description, ordering_fields_of

API_PATH = re.compile(r"^/api/v\d+/(?P<resource>[^/{]+)")
ALWAYS_ACCEPTED = frozenset({"format"})
"""Query parameters every view takes without documenting them: DRF's ``format`` (``?format=api``
is the browsable API, an HTML page the schema does not describe)."""
SCHEMA_LOCK = threading.RLock()
"""Held by every use of drf-spectacular while serving. It keeps process-wide state that it changes
as it works: each extension resolves its target class on first use by writing that class
attribute (a target whose module is not installed becomes None), and ``GENERATOR_STATS.silence``
flips a global. Two threads inside it at once see each other's half-done state: under gunicorn's
threads, a submit's first check of its query parameters answered 500 (``'NoneType' object has no
attribute 'startswith'``) while another thread's check was resolving an extension of a package
that is not installed."""


class AutoSchema(openapi.AutoSchema):
    def get_tags(self) -> list[str]:
        found = API_PATH.match(self.path)
        return [found["resource"]] if found else super().get_tags()

    def get_override_parameters(self) -> list[Any]:
        parameters: list[Any] = list(super().get_override_parameters())
        fields = ordering_fields_of(self.view)
        if fields and self.method == "GET":
            parameters.append(
                OpenApiParameter(ORDERING_PARAM, str, enum=ordering_choices(fields), description=ordering_description(fields))
            )
        return parameters

    def _map_basic_serializer(self, serializer: Any, direction: str) -> dict[str, Any]:
        """A request body's object takes no other field (``kernel.api.base.validated`` refuses it)."""
        schema: dict[str, Any] = super()._map_basic_serializer(serializer, direction)  # type: ignore[no-untyped-call]
        if direction == "request":
            schema["additionalProperties"] = False
        return schema

    def get_operation(self, path: str, path_regex: str, path_prefix: str, method: str, registry: ComponentRegistry) -> Any:
        operation = super().get_operation(path, path_regex, path_prefix, method, registry)
        if not operation:
            return operation
        responses: dict[str, Any] = operation.setdefault("responses", {})
        error = self.resolve_serializer(ErrorOut, "response").ref
        for status in self._shared_errors(operation):
            responses.setdefault(
                str(status), {"content": {"application/json": {"schema": error}}, "description": ERROR_DESCRIPTIONS[status]}
            )
        operation["responses"] = dict(sorted(responses.items()))
        return operation

    def _shared_errors(self, operation: dict[str, Any]) -> list[int]:
        statuses = [400, 401]
        query = {parameter["name"] for parameter in operation.get("parameters", []) if parameter.get("in") == "query"}
        if "{" in self.path or "page" in query:
            statuses.append(404)
        negotiation = getattr(self.view, "content_negotiation_class", DefaultContentNegotiation)
        if isinstance(negotiation, type) and issubclass(negotiation, DefaultContentNegotiation):
            statuses.append(406)
        if "requestBody" in operation:
            statuses += [413, 415]
        return statuses


@dataclass(frozen=True)
class Documented:
    """What the schema says one operation takes."""

    query_params: frozenset[str]
    body: bool


_documented: dict[tuple[type[APIView], str], Documented] = {}


def documented(view: APIView, request: Request) -> Documented:
    """What the schema documents for ``view`` answering ``request.method`` (HEAD as GET): worked
    out once per view class and method by the schema class itself, from the view's
    ``extend_schema`` parameters and request body, its pagination and its ordering."""
    method = "GET" if request.method == "HEAD" else str(request.method)
    key = (type(view), method)
    found = _documented.get(key)
    if found is None:
        with SCHEMA_LOCK:
            found = _documented.get(key)
            if found is None:
                found = _documented[key] = _operation(request, method)
    return found


def documented_query_params(view: APIView, request: Request) -> frozenset[str]:
    """The query parameters the schema documents for the operation, plus ``ALWAYS_ACCEPTED``."""
    return documented(view, request).query_params | ALWAYS_ACCEPTED


def _operation(request: Request, method: str) -> Documented:
    match = request.resolver_match
    assert match is not None, "an API view answers only a resolved URL"
    route = str(match.route)
    generator = SchemaGenerator()  # type: ignore[no-untyped-call]  # holds the schema the view refers to weakly
    schema_view = generator.create_view(match.func, method)  # type: ignore[no-untyped-call]
    schema_view.request = request
    schema_view.kwargs = dict(match.kwargs)
    schema = schema_view.schema
    schema.registry = ComponentRegistry()
    schema.path = "/" + re.sub(r"<(?:[^>:]+:)?([^>]+)>", r"{\1}", route)
    schema.path_regex = route
    schema.path_prefix = ""
    schema.method = method
    with GENERATOR_STATS.silence():
        parameters = schema._get_parameters()
        body = method in ("PUT", "PATCH", "POST") and schema.get_request_serializer() is not None
    del generator
    query = frozenset(str(parameter["name"]) for parameter in parameters if parameter.get("in") == "query")
    return Documented(query_params=query, body=body)
