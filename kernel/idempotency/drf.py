"""``Idempotency-Key`` on every POST of the REST API, in the one base every API view derives from
(``kernel.api.views.ApiView``), so no view does anything for it (docs/api.md, "Retrying a POST").

``IdempotentApiView.idempotency_begin`` runs at the end of ``initial``, after authentication, the
permission classes and the checks of the query and body, and claims the key
(``kernel.idempotency.store``); a request already answered is answered again from the store, with
``Idempotent-Replayed: true``, and its view does not run. ``finalize_response`` keeps a 2xx answer
for the key's retries and releases the claim of any other; ``handle_exception`` releases it when
the view raised an error nothing answers (a 500).

The header is honoured on POST only (PUT, PATCH and DELETE are ignored: they name what they change),
for a signed-in user (keys are per user), and refused (400) by a view that answers a secret only
once (``idempotency_replay = False``: an API token, a node token, a webhook's signing key), as
keeping that answer to replay it would keep the secret.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from collections.abc import Mapping
from typing import Any, ClassVar

from django.http import QueryDict
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from kernel.errors import FieldError
from kernel.idempotency.models import KEY_MAX_LENGTH
from kernel.idempotency.store import (
    HEADER,
    RETRY_IN_PROGRESS_SECONDS,
    Claimed,
    KeyInProgress,
    Stored,
    idempotency_claim,
    idempotency_finish,
    idempotency_release,
)

log = logging.getLogger(__name__)

REPLAYED_HEADER = "Idempotent-Replayed"
_KEY = re.compile(r"^[\x21-\x7e]+$")  # visible ASCII: letters, digits, punctuation; no space or control


class Replayed(Exception):  # noqa: N818 - not an error: the request was answered before
    def __init__(self, stored: Stored) -> None:
        super().__init__("answered from the Idempotency-Key store")
        self.stored = stored


def idempotency_key(request: Request) -> str | None:
    """The header's key, or None without one; a malformed key is a 400 naming the header."""
    raw = request.META.get("HTTP_IDEMPOTENCY_KEY")
    if raw is None:
        return None
    key = str(raw).strip()
    if not key:
        raise FieldError(HEADER, f"{HEADER} must not be empty.")
    if len(key) > KEY_MAX_LENGTH:
        raise FieldError(HEADER, f"{HEADER} must be at most {KEY_MAX_LENGTH} characters.")
    if not _KEY.match(key):
        raise FieldError(HEADER, f"{HEADER} may hold only visible ASCII characters (no spaces), such as a UUID.")
    return key


def _plain(data: Any) -> Any:
    if isinstance(data, QueryDict):
        return {name: data.getlist(name) for name in sorted(data)}
    if isinstance(data, Mapping):
        return {str(name): _plain(value) for name, value in data.items()}
    if isinstance(data, (list, tuple)):
        return [_plain(item) for item in data]
    return data


def request_fingerprint(request: Request) -> str:
    """SHA-256 of what makes two requests the same: method, path with its query, and the body as
    parsed (so the order of an object's fields or the spacing does not matter)."""
    text = json.dumps(
        {"method": request.method, "path": request.get_full_path(), "body": _plain(request.data)},
        sort_keys=True, separators=(",", ":"), default=str, ensure_ascii=True,
    )
    return hashlib.sha256(text.encode()).hexdigest()


def replay_response(stored: Stored) -> Response:
    """The first answer again, as it went out (already rendered: its bytes are sent as they are)."""
    data: Any = None
    if stored.content_type.startswith("application/json") and stored.body:
        data = json.loads(stored.body)
    response = Response(data, status=stored.status_code, content_type=stored.content_type or None)
    response.content = stored.body  # marks it rendered
    if stored.content_type:
        response["Content-Type"] = stored.content_type
    if stored.location:
        response["Location"] = stored.location
    response[REPLAYED_HEADER] = "true"
    return response


class IdempotentApiView(APIView):
    idempotency_replay: ClassVar[bool] = True
    """False on a view whose answer holds a secret shown once: it refuses the header."""

    _idempotency_claim: Claimed | None = None

    def idempotency_begin(self, request: Request) -> None:
        """Claim the request's key, or raise ``Replayed`` with the first answer (module docstring)."""
        if request.method != "POST":
            return
        key = idempotency_key(request)
        if key is None:
            return
        if not self.idempotency_replay:
            raise FieldError(HEADER, f"This operation answers a secret that is shown only once; it is never replayed, "
                                     f"so it takes no {HEADER}.")
        user = request.user
        user_id = getattr(user, "pk", None) if getattr(user, "is_authenticated", False) else None
        if not isinstance(user_id, int):
            raise FieldError(HEADER, f"{HEADER} is kept per signed-in user; this operation has none.")
        outcome = idempotency_claim(user_id=user_id, key=key, fingerprint=request_fingerprint(request),
                                    method=str(request.method), path=request.get_full_path())
        if isinstance(outcome, Stored):
            raise Replayed(outcome)
        self._idempotency_claim = outcome

    def handle_exception(self, exc: Exception) -> Response:
        if isinstance(exc, Replayed):
            return replay_response(exc.stored)
        try:
            response = super().handle_exception(exc)
        except Exception:  # nothing answers it: a 500 (or a 503), never kept
            self._idempotency_abandon()
            raise
        if isinstance(exc, KeyInProgress):
            response["Retry-After"] = str(RETRY_IN_PROGRESS_SECONDS)
        return response

    def finalize_response(self, request: Request, response: Response, *args: Any, **kwargs: Any) -> Response:
        response = super().finalize_response(request, response, *args, **kwargs)
        claim, self._idempotency_claim = self._idempotency_claim, None
        if claim is None:
            return response
        if not 200 <= response.status_code < 300 or response.streaming:
            self._idempotency_abandon(claim)
            return response
        render = getattr(response, "render", None)  # (a view may answer a plain HttpResponse)
        if callable(render):
            render()  # the bytes that go out are the bytes kept (rendering twice does nothing)
        idempotency_finish(claim=claim, status_code=response.status_code, content_type=response.get("Content-Type", ""),
                           location=response.get("Location", ""), body=response.content)
        return response

    def _idempotency_abandon(self, claim: Claimed | None = None) -> None:
        claim = claim or self._idempotency_claim
        self._idempotency_claim = None
        if claim is None:
            return
        try:
            idempotency_release(claim=claim)
        except Exception:  # the database went away: the claim lapses after its lease
            log.warning("could not release the Idempotency-Key claim %s", claim.key_id, exc_info=True)
