"""``/api/v1/group-mappings/``: which group of an identity provider grants which role where
(platform admins only: everyone else gets 403)."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response

from kernel.api.base import ScopedRelatedField, actor, filters, paginated, validated
from kernel.api.openapi import errors
from kernel.api.pagination import Pagination
from kernel.api.views import ApiView
from tenants import group_mappings, selectors
from tenants.access import require_platform_admin
from tenants.models import ExternalGroupMapping, IdentitySource, Role


class GroupMappingOut(serializers.ModelSerializer):  # type: ignore[type-arg]
    department = serializers.SlugRelatedField(slug_field="slug", read_only=True)  # type: ignore[var-annotated]

    class Meta:
        model = ExternalGroupMapping
        fields = ["id", "source", "external_group", "department", "department_id", "role", "created_at"]


class GroupMappingIn(serializers.Serializer):  # type: ignore[type-arg]
    source = serializers.ChoiceField(choices=IdentitySource.choices)  # type: ignore[assignment]  # shadows Field.source
    external_group = serializers.CharField(
        max_length=500, help_text="As the provider names it: a value of the OIDC groups claim, or an LDAP group's DN."
    )
    department = ScopedRelatedField(scope=lambda user: selectors.department_list(user=user))
    role = serializers.ChoiceField(choices=Role.choices)


class GroupMappingListApi(ApiView):
    pagination_class = Pagination
    ordering_fields = {"id": "id", "external_group": "external_group", "created_at": "created_at"}

    class Filter(serializers.Serializer):  # type: ignore[type-arg]
        source = serializers.ChoiceField(choices=IdentitySource.choices, required=False)  # type: ignore[assignment]  # shadows Field.source

    @extend_schema(parameters=[Filter], responses={200: GroupMappingOut(many=True), **errors(400, 401, 403, 404)})
    def get(self, request: Request) -> Response:
        require_platform_admin(request.user, to="read the group mappings")
        params = filters(self.Filter, request)
        queryset = group_mappings.group_mapping_list(user=request.user, source=params.get("source"))
        return paginated(view=self, request=request, queryset=queryset, serializer=GroupMappingOut)

    @extend_schema(request=GroupMappingIn, responses={201: GroupMappingOut, **errors(400, 401, 403, 409)})
    def post(self, request: Request) -> Response:
        user = actor(request)
        require_platform_admin(user, to="map groups to roles")  # before the body is read
        mapping = group_mappings.group_mapping_create(actor=user, **validated(GroupMappingIn, request))
        return Response(GroupMappingOut(mapping).data, status=status.HTTP_201_CREATED)


class GroupMappingDetailApi(ApiView):
    @extend_schema(responses={200: GroupMappingOut, **errors(401, 403, 404)})
    def get(self, request: Request, mapping_id: int) -> Response:
        return Response(GroupMappingOut(group_mappings.group_mapping_get(user=request.user, mapping_id=mapping_id)).data)

    @extend_schema(request=None, responses={204: None, **errors(401, 403, 404)})
    def delete(self, request: Request, mapping_id: int) -> Response:
        group_mappings.group_mapping_delete(actor=actor(request), mapping_id=mapping_id)
        return Response(status=status.HTTP_204_NO_CONTENT)
