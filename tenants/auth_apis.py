"""``POST /api/v1/auth/token/``: username and password in, an API token out. Throttled and audited."""

from __future__ import annotations

from django.contrib.auth import authenticate
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.exceptions import Throttled
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from kernel.errors import ApplicationError
from tenants.auth import auth_login_failed, auth_token_issue
from tenants.login_throttle import WINDOW_SECONDS, LoginThrottle


class InvalidCredentials(ApplicationError):
    status = 401
    code = "invalid_credentials"


class TokenIn(serializers.Serializer):  # type: ignore[type-arg]
    username = serializers.CharField(max_length=150)
    password = serializers.CharField(max_length=4096, trim_whitespace=False)


class TokenOut(serializers.Serializer):  # type: ignore[type-arg]
    token = serializers.CharField()


class TokenObtainApi(APIView):
    """Throttled like the portal's login form, by the same counts (``tenants.login_throttle``)."""

    authentication_classes: list[type] = []
    permission_classes = [AllowAny]

    @extend_schema(request=TokenIn, responses=TokenOut, auth=[])
    def post(self, request: Request) -> Response:
        data = TokenIn(data=request.data)
        data.is_valid(raise_exception=True)
        username = data.validated_data["username"]
        throttle = LoginThrottle.for_attempt(username=username, address=request.META.get("REMOTE_ADDR"))
        if throttle.blocked():
            auth_login_failed(username=username, via="api_token", reason="throttled")
            raise Throttled(wait=WINDOW_SECONDS)
        user = authenticate(request._request, username=username, password=data.validated_data["password"])
        if user is None or not user.is_active:
            throttle.failed()
            auth_login_failed(username=username, via="api_token")
            raise InvalidCredentials("Unable to log in with the given username and password.")
        throttle.succeeded()
        return Response({"token": auth_token_issue(user=user).key})
