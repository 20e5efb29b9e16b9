"""The base of every view under ``/api/v1/``: DRF's ``APIView`` that refuses what it does not know.

After authentication (so an anonymous caller still gets its 401 first), a query parameter the
schema does not document for the operation is a 400 naming it (``fields: {"name": ["Unknown
parameter."]}``): the accepted set is the documented one (``kernel.api.schema``), so the two cannot
drift. Unknown body fields are refused where the body is read (``kernel.api.base.validated``).
``tests/foundation/test_api_conventions.py`` checks that every API route's view is an ``ApiView``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from rest_framework.exceptions import ValidationError
from rest_framework.request import Request
from rest_framework.views import APIView

from kernel.api.base import refuse_hostile_text
from kernel.api.schema import documented_query_params

UNKNOWN_PARAMETER = "Unknown parameter."


class ApiView(APIView):
    ordering_fields: ClassVar[Mapping[str, str]] = {}
    """For a list: the names ``?ordering=`` takes, each mapped to its database lookup
    (``kernel.api.ordering``); documented in the schema as an enum."""

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        super().initial(request, *args, **kwargs)
        method = str(request.method).lower()
        if method != "options" and method in self.http_method_names and hasattr(self, method):
            refuse_unknown_query_params(self, request)  # (a method the view lacks is DRF's 405, after this)


def refuse_unknown_query_params(view: APIView, request: Request) -> None:
    refuse_hostile_text(request.query_params)  # before a name is written into the answer
    accepted = documented_query_params(view, request)
    unknown = sorted(name for name in request.query_params if name not in accepted)
    if unknown:
        raise ValidationError({name: [UNKNOWN_PARAMETER] for name in unknown})
