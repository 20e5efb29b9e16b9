"""The base of every view under ``/api/v1/``: DRF's ``APIView`` that refuses what it does not know.

After authentication (so an anonymous caller still gets its 401 first), a query parameter the
schema does not document for the operation is a 400 naming it (``fields: {"name": ["Unknown
parameter."]}``): the accepted set is the documented one (``kernel.api.schema``), so the two cannot
drift. Unknown body fields are refused where the body is read (``kernel.api.base.validated``), and
here any body sent to an operation whose schema documents none. Then a POST's ``Idempotency-Key``
is claimed, or the request answered from it (``kernel.idempotency.drf``, docs/api.md).
``tests/foundation/test_api_conventions.py`` checks that every API route's view is an ``ApiView``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from rest_framework.exceptions import ValidationError
from rest_framework.request import Request
from rest_framework.views import APIView

from kernel.api.base import UNKNOWN_FIELD, refuse_hostile_text
from kernel.api.schema import documented, documented_query_params
from kernel.idempotency.drf import IdempotentApiView

UNKNOWN_PARAMETER = "Unknown parameter."
NO_BODY = "This operation takes no body."


class ApiView(IdempotentApiView):
    ordering_fields: ClassVar[Mapping[str, str]] = {}
    """For a list: the names ``?ordering=`` takes, each mapped to its database lookup
    (``kernel.api.ordering``); documented in the schema as an enum."""

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        super().initial(request, *args, **kwargs)
        method = str(request.method).lower()
        if method != "options" and method in self.http_method_names and hasattr(self, method):
            refuse_unknown_query_params(self, request)  # (a method the view lacks is DRF's 405, after this)
            if method in ("post", "put", "patch", "delete") and not documented(self, request).body:
                refuse_a_body(request)
            self.idempotency_begin(request)


def refuse_a_body(request: Request) -> None:
    """An operation that takes no body refuses one with content (an empty object is no content):
    each field is unknown, or, for a body that is not an object, the body."""
    try:
        declared = int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        declared = 1
    if declared <= 0:
        return
    data = request.data
    if not data:
        return
    refuse_hostile_text(data)  # before a name is written into the answer
    if isinstance(data, Mapping):
        raise ValidationError({str(name): [UNKNOWN_FIELD] for name in data})
    raise ValidationError({"body": [NO_BODY]})


def refuse_unknown_query_params(view: APIView, request: Request) -> None:
    refuse_hostile_text(request.query_params)  # before a name is written into the answer
    accepted = documented_query_params(view, request)
    unknown = sorted(name for name in request.query_params if name not in accepted)
    if unknown:
        raise ValidationError({name: [UNKNOWN_PARAMETER] for name in unknown})
