"""``/api/v1/auth/tokens/``: the caller's own personal access tokens (docs/identity.md "API tokens").

``GET`` lists them (never their text), ``POST`` creates one and answers its text once, ``DELETE
…/{id}/`` revokes one, ``POST …/{id}/claim/`` takes the text of one a platform admin issued for
the caller (once; the issuer never sees it). Another user's token reads as missing (404), for platform admins too: they
revoke others' tokens in the admin site, or all of an account's by deactivating it.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response

from kernel.api.base import actor, filters, paginated, validated
from kernel.api.openapi import errors
from kernel.api.pagination import Pagination
from kernel.api.views import ApiView
from tenants.access_tokens import (
    NAME_MAX_LENGTH,
    access_token_claim,
    access_token_create,
    access_token_get,
    access_token_list,
    access_token_revoke,
    token_state,
)
from tenants.models import PersonalAccessToken, TokenScope
from tenants.token_auth import credential_expiry


class AccessTokenOut(serializers.ModelSerializer):  # type: ignore[type-arg]
    state = serializers.SerializerMethodField(
        help_text="pending (issued for you by a platform admin: claim it to get its text), active, expired or revoked."
    )
    issued_by = serializers.SerializerMethodField(
        help_text="The platform admin who issued it for you; null when you created it yourself."
    )

    class Meta:
        model = PersonalAccessToken
        fields = ["id", "name", "prefix", "scope", "state", "created_at", "expires_at", "last_used_at", "revoked_at",
                  "issued_by", "issue_reason", "claimed_at"]

    def get_state(self, token: PersonalAccessToken) -> str:
        return token_state(token)

    def get_issued_by(self, token: PersonalAccessToken) -> str | None:
        return token.issued_by.get_username() if token.issued_by is not None else None


class AccessTokenCreatedOut(AccessTokenOut):
    token = serializers.SerializerMethodField(
        help_text="The whole token (gpp_...). Shown only in this answer: store it now; it cannot be read again."
    )

    class Meta(AccessTokenOut.Meta):
        fields = [*AccessTokenOut.Meta.fields, "token"]

    def get_token(self, token: PersonalAccessToken) -> str:
        return str(self.context["key"])


class AccessTokenIn(serializers.Serializer):  # type: ignore[type-arg]
    name = serializers.CharField(max_length=NAME_MAX_LENGTH, help_text="What the token is for.")
    scope = serializers.ChoiceField(choices=TokenScope.choices, default=TokenScope.READ,
                                    help_text="read: GET only; write: whatever your roles allow.")
    expires_at = serializers.DateTimeField(
        required=False, default=None, allow_null=True,
        help_text="When it stops working; default in GPUPORTAL_TOKEN_DEFAULT_DAYS (90) days, "
                  "at most GPUPORTAL_TOKEN_MAX_DAYS (365) ahead.",
    )


class AccessTokenListApi(ApiView):
    idempotency_replay = False  # the answer holds the token: never kept, so no Idempotency-Key
    pagination_class = Pagination  # the schema's list shape (paginated() pages with it)
    ordering_fields = {"id": "id", "name": "name", "created_at": "created_at", "expires_at": "expires_at",
                       "last_used_at": "last_used_at"}

    class Filter(serializers.Serializer):  # type: ignore[type-arg]
        state = serializers.ChoiceField(choices=["pending", "active", "expired", "revoked"], required=False)

    @extend_schema(parameters=[Filter], responses={200: AccessTokenOut(many=True), **errors(400, 401, 404)},
                   description="Your own tokens, newest first (never their text).")
    def get(self, request: Request) -> Response:
        params = filters(self.Filter, request)
        queryset = access_token_list(user=actor(request), state=params.get("state"))
        return paginated(view=self, request=request, queryset=queryset, serializer=AccessTokenOut)

    @extend_schema(request=AccessTokenIn, responses={201: AccessTokenCreatedOut, **errors(400, 401, 403)},
                   description="A new token for yourself; its text is in this answer only. Asked for with a "
                               "token, it may not outlive that token (400 naming expires_at).")
    def post(self, request: Request) -> Response:
        data: dict[str, Any] = validated(AccessTokenIn, request)
        issued = access_token_create(actor=actor(request), **data, not_after=credential_expiry(request.auth))
        body = AccessTokenCreatedOut(issued.token, context={"key": issued.key}).data
        return Response(body, status=status.HTTP_201_CREATED, headers={"Cache-Control": "no-store"})


class AccessTokenDetailApi(ApiView):
    @extend_schema(responses={200: AccessTokenOut, **errors(401, 404)})
    def get(self, request: Request, token_id: int) -> Response:
        return Response(AccessTokenOut(access_token_get(user=actor(request), token_id=token_id)).data)

    @extend_schema(responses={204: None, **errors(401, 403, 404)},
                   description="Revoke one of your tokens: it stops working at once. Revoking a revoked token is a no-op.")
    def delete(self, request: Request, token_id: int) -> Response:
        user = actor(request)
        token = access_token_get(user=user, token_id=token_id)
        access_token_revoke(actor=user, token_id=token.pk)
        return Response(status=status.HTTP_204_NO_CONTENT)


class AccessTokenClaimApi(ApiView):
    idempotency_replay = False  # the answer holds the token: never kept, so no Idempotency-Key

    @extend_schema(request=None, responses={201: AccessTokenCreatedOut, **errors(401, 403, 404, 409)},
                   description="Take the text of a token a platform admin issued for you (state pending): it is "
                               "in this answer only, and the issuer never sees it. A token already claimed, "
                               "revoked or expired is a 409; anyone else's is a 404.")
    def post(self, request: Request, token_id: int) -> Response:
        issued = access_token_claim(actor=actor(request), token_id=token_id)
        body = AccessTokenCreatedOut(issued.token, context={"key": issued.key}).data
        return Response(body, status=status.HTTP_201_CREATED, headers={"Cache-Control": "no-store"})
