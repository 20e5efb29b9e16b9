"""``POST /api/v1/auth/token/``: username and password in, an expiring API token out (a personal
access token of scope write, ``tenants.access_tokens``), under the sign-in lockout and audited. ``POST /api/v1/auth/unlock/``: a platform admin lifts a sign-in lock."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import User
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.exceptions import Throttled
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response

from kernel.api.base import actor, iso_datetime, validated
from kernel.api.openapi import errors
from kernel.api.views import ApiView
from kernel.errors import ApplicationError, NotAllowed
from tenants.access import require_platform_admin
from tenants.auth import auth_token_issue
from tenants.signin import signin_authenticate
from tenants.signin_lockout import USERNAME_MAX_LENGTH, signin_lock_lift


class InvalidCredentials(ApplicationError):
    status = 401
    code = "invalid_credentials"


class TokenIn(serializers.Serializer):  # type: ignore[type-arg]
    username = serializers.CharField(max_length=USERNAME_MAX_LENGTH)
    password = serializers.CharField(max_length=4096, trim_whitespace=False)


class TokenOut(serializers.Serializer):  # type: ignore[type-arg]
    token = serializers.CharField(help_text="gpp_...: send as 'Authorization: Bearer <token>' or 'Token <token>'.")
    expires_at = serializers.DateTimeField(help_text="When the token stops working (GPUPORTAL_TOKEN_DEFAULT_DAYS).")
    scope = serializers.CharField(help_text="Always write: whatever the user's roles allow.")


class TokenObtainApi(ApiView):
    """A locked username or address gets 429 ``throttled`` with ``Retry-After``, the right password too.
    Each call issues a new token of scope write that expires after ``GPUPORTAL_TOKEN_DEFAULT_DAYS``."""

    authentication_classes: list[type] = []
    permission_classes = [AllowAny]
    idempotency_replay = False  # the answer holds the token: never kept, so no Idempotency-Key

    @extend_schema(request=TokenIn, responses={200: TokenOut, **errors(400, 401, 403, 429)}, auth=[])
    def post(self, request: Request) -> Response:
        data = validated(TokenIn, request)
        outcome = signin_authenticate(request._request, username=data["username"], password=data["password"],
                                      via="api_token")
        if outcome.disabled:
            raise NotAllowed("Sign-in with a password is turned off: use single sign-on.")
        if outcome.lock is not None:
            raise Throttled(wait=outcome.lock.retry_after)
        if outcome.user is None:
            raise InvalidCredentials("Unable to log in with the given username and password.")
        if not isinstance(outcome.user, User):
            raise InvalidCredentials("Unable to log in with the given username and password.")
        issued = auth_token_issue(user=outcome.user)
        body = {"token": issued.key, "expires_at": iso_datetime(issued.token.expires_at), "scope": issued.token.scope}
        return Response(body, headers={"Cache-Control": "no-store"})


class UnlockIn(serializers.Serializer):  # type: ignore[type-arg]
    username = serializers.CharField(max_length=USERNAME_MAX_LENGTH, required=False)
    address = serializers.IPAddressField(required=False)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if ("username" in attrs) == ("address" in attrs):
            raise serializers.ValidationError("Give either a username or an address.")
        return attrs


class UnlockOut(serializers.Serializer):  # type: ignore[type-arg]
    username = serializers.CharField(required=False)
    address = serializers.CharField(required=False)
    was_locked = serializers.BooleanField()


class SigninUnlockApi(ApiView):
    """Platform admins only (403 for everyone else): lift the lock on a username or an address, audited
    ``auth.unlocked``. Answers whether a lock was in force."""

    @extend_schema(request=UnlockIn, responses={200: UnlockOut, **errors(400, 401, 403)})
    def post(self, request: Request) -> Response:
        require_platform_admin(request.user, to="lift sign-in locks")
        data = validated(UnlockIn, request)
        was_locked = signin_lock_lift(actor=actor(request), via="api", **data)
        return Response({**data, "was_locked": was_locked})
