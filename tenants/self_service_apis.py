"""REST endpoints of department self-service (docs/departments.md): the members of departments and
projects. Whoever reads the department lists them; its admins (and platform admins) change them."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import User
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response

from kernel.api.base import actor, paginated, validated
from kernel.api.openapi import errors
from kernel.api.pagination import Pagination
from kernel.api.views import ApiView
from kernel.errors import NotAllowed
from tenants import selectors, self_service
from tenants.access import access_for
from tenants.models import Membership, Role

USER_HELP = "The account's username, or its e-mail address (an account must exist: see docs/departments.md)."


def _require_admin(request: Request, department_id: int, *, to: str) -> User:
    user = actor(request)
    if not access_for(user).can_administer_department(department_id):
        raise NotAllowed(f"Only an admin of this department may {to}.")
    return user


class DepartmentMemberOut(serializers.ModelSerializer):  # type: ignore[type-arg]
    username = serializers.CharField(source="user.username", read_only=True)
    name = serializers.CharField(source="user.get_full_name", read_only=True)
    removable = serializers.SerializerMethodField(help_text="False for a role from an identity provider.")

    class Meta:
        model = Membership
        fields = ["id", "user_id", "username", "name", "department_id", "role", "source", "removable", "created_at"]

    def get_removable(self, membership: Membership) -> bool:
        return membership.source == "manual"


class DepartmentMemberIn(serializers.Serializer):  # type: ignore[type-arg]
    user = serializers.CharField(max_length=254, help_text=USER_HELP)
    role = serializers.ChoiceField(choices=Role.choices, help_text="researcher or department_admin; platform admins "
                                   "also grant platform_admin and auditor.")


class DepartmentMemberListApi(ApiView):
    pagination_class = Pagination
    ordering_fields = {"id": "id", "username": "user__username", "role": "role", "created_at": "created_at"}

    @extend_schema(responses={200: DepartmentMemberOut(many=True), **errors(401, 404)},
                   description="The roles held on the department itself, with where each came from.")
    def get(self, request: Request, department_id: int) -> Response:
        queryset = selectors.department_memberships(user=request.user, department_id=department_id)
        return paginated(view=self, request=request, queryset=queryset, serializer=DepartmentMemberOut)

    @extend_schema(request=DepartmentMemberIn, responses={201: DepartmentMemberOut, **errors(400, 401, 403, 404, 409)},
                   description="Grant a role in the department to an existing account; department admins.")
    def post(self, request: Request, department_id: int) -> Response:
        department = selectors.department_get(user=request.user, department_id=department_id)
        user = _require_admin(request, department.pk, to="add members")
        data = validated(DepartmentMemberIn, request)
        member = self_service.user_find(query=data["user"])
        membership = self_service.department_member_add(actor=user, department=department, user=member, role=data["role"])
        return Response(DepartmentMemberOut(membership).data, status=status.HTTP_201_CREATED)


class DepartmentMemberDetailApi(ApiView):
    @extend_schema(responses={204: None, **errors(401, 403, 404, 409)},
                   description="Remove a role granted in the portal (one from an identity provider is a 409); "
                   "someone left without a role there is also taken off the department's projects.")
    def delete(self, request: Request, department_id: int, membership_id: int) -> Response:
        membership = selectors.membership_get(user=request.user, department_id=department_id, membership_id=membership_id)
        user = _require_admin(request, membership.department_id, to="remove members")
        self_service.department_member_remove(actor=user, membership=membership)
        return Response(status=status.HTTP_204_NO_CONTENT)


class ProjectMemberOut(serializers.Serializer):  # type: ignore[type-arg]
    id = serializers.IntegerField(help_text="The user's id.")
    username = serializers.CharField()
    name = serializers.CharField(source="get_full_name")


class ProjectMemberAddedOut(ProjectMemberOut):
    department_role_granted = serializers.BooleanField(
        help_text="True when the user was also made a researcher of the project's department."
    )


class ProjectMemberIn(serializers.Serializer):  # type: ignore[type-arg]
    user = serializers.CharField(max_length=254, help_text=USER_HELP)


class ProjectMemberListApi(ApiView):
    pagination_class = Pagination
    ordering_fields = {"id": "id", "username": "username"}

    @extend_schema(responses={200: ProjectMemberOut(many=True), **errors(401, 404)})
    def get(self, request: Request, project_id: int) -> Response:
        project = selectors.project_get(user=request.user, project_id=project_id)
        return paginated(view=self, request=request, queryset=project.members.order_by("username", "pk"), serializer=ProjectMemberOut)

    @extend_schema(request=ProjectMemberIn, responses={201: ProjectMemberAddedOut, **errors(400, 401, 403, 404, 409)},
                   description="Add an existing account to the project; department admins.")
    def post(self, request: Request, project_id: int) -> Response:
        project = selectors.project_get(user=request.user, project_id=project_id)
        user = _require_admin(request, project.department_id, to="add project members")
        member = self_service.user_find(query=validated(ProjectMemberIn, request)["user"])
        granted = self_service.project_member_add(actor=user, project=project, user=member)
        body: dict[str, Any] = {**ProjectMemberOut(member).data, "department_role_granted": granted}
        return Response(body, status=status.HTTP_201_CREATED)


class ProjectMemberDetailApi(ApiView):
    @extend_schema(responses={204: None, **errors(401, 403, 404)})
    def delete(self, request: Request, project_id: int, user_id: int) -> Response:
        project = selectors.project_get(user=request.user, project_id=project_id)
        member = selectors.project_member_get(project=project, user_id=user_id)
        user = _require_admin(request, project.department_id, to="remove project members")
        assert isinstance(member, User)
        self_service.project_member_remove(actor=user, project=project, user=member)
        return Response(status=status.HTTP_204_NO_CONTENT)
