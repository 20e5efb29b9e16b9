"""``POST /api/v1/auth/token/``: username and password in, an API token out. Throttled and audited."""

from __future__ import annotations

from django.contrib.auth import authenticate
from django.db import transaction
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.authtoken.models import Token
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.throttling import AnonRateThrottle
from rest_framework.views import APIView

from audit import actions
from audit.models import Outcome
from audit.services import audit_record
from kernel.errors import ApplicationError


class LoginThrottle(AnonRateThrottle):
    scope = "login"
    rate = "20/min"


class InvalidCredentials(ApplicationError):
    status = 401
    code = "invalid_credentials"


class TokenIn(serializers.Serializer):  # type: ignore[type-arg]
    username = serializers.CharField(max_length=150)
    password = serializers.CharField(max_length=4096, trim_whitespace=False)


class TokenOut(serializers.Serializer):  # type: ignore[type-arg]
    token = serializers.CharField()


class TokenObtainApi(APIView):
    authentication_classes: list[type] = []
    permission_classes = [AllowAny]
    throttle_classes = [LoginThrottle]

    @extend_schema(request=TokenIn, responses=TokenOut, auth=[])
    def post(self, request: Request) -> Response:
        data = TokenIn(data=request.data)
        data.is_valid(raise_exception=True)
        username = data.validated_data["username"]
        user = authenticate(request._request, username=username, password=data.validated_data["password"])
        if user is None or not user.is_active:
            with transaction.atomic():
                audit_record(
                    actor=None,
                    action=actions.AUTH_LOGIN_FAILED,
                    details={"username": username, "via": "api_token"},
                    outcome=Outcome.DENIED,
                )
            raise InvalidCredentials("Unable to log in with the given username and password.")
        with transaction.atomic():
            token, _ = Token.objects.get_or_create(user=user)
            audit_record(actor=user, action=actions.AUTH_TOKEN_ISSUED, target=user, details={"via": "api_token"})
        return Response({"token": token.key})
