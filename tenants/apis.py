"""REST endpoints for departments, projects and the caller's own identity."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.contrib.auth import get_user_model
from django.db import transaction
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response

from kernel.api.base import IdField, ScopedRelatedField, actor, filters, paginated, target, validated
from kernel.api.openapi import errors
from kernel.api.pagination import Pagination
from kernel.api.views import ApiView
from kernel.errors import NotAllowed
from kernel.limits import TEXT_LIMIT
from tenants import selectors, services
from tenants.access import access_for, require_platform_admin
from tenants.models import NAMESPACE_SLUG_VALIDATOR, Department, Isolation, Membership, Project


class DepartmentOut(serializers.ModelSerializer):  # type: ignore[type-arg]
    parent = serializers.SlugRelatedField[Department](  # type: ignore[assignment]  # shadows Field.parent
        slug_field="slug", read_only=True, allow_null=True
    )

    class Meta:
        model = Department
        fields = ["id", "slug", "name", "parent", "parent_id", "isolation", "created_at"]


class DepartmentIn(serializers.Serializer):  # type: ignore[type-arg]
    slug = serializers.CharField(max_length=63, validators=[NAMESPACE_SLUG_VALIDATOR])
    name = serializers.CharField(max_length=200)
    parent = ScopedRelatedField(  # type: ignore[assignment]  # shadows Field.parent
        scope=lambda user: selectors.department_list(user=user), allow_null=True, required=False, default=None
    )


class DepartmentListApi(ApiView):
    pagination_class = Pagination  # the schema's list shape (paginated() pages with it)
    ordering_fields = {"id": "id", "slug": "slug", "name": "name", "created_at": "created_at"}

    @extend_schema(responses={200: DepartmentOut(many=True), **errors(401, 404)})
    def get(self, request: Request) -> Response:
        queryset = selectors.department_list(user=request.user).select_related("parent")
        return paginated(view=self, request=request, queryset=queryset, serializer=DepartmentOut)

    @extend_schema(request=DepartmentIn, responses={201: DepartmentOut, **errors(400, 401, 403)})
    def post(self, request: Request) -> Response:
        user = actor(request)
        require_platform_admin(user, to="create departments")  # before the body is read (and again in the service)
        department = services.department_create(actor=user, **validated(DepartmentIn, request))
        return Response(DepartmentOut(department).data, status=status.HTTP_201_CREATED)


class IsolationIn(serializers.Serializer):  # type: ignore[type-arg]
    isolation = serializers.ChoiceField(
        choices=Isolation.choices,
        help_text="shared; dedicated-gpus: its units never share a GPU with outsiders; dedicated-nodes: nor a node.",
    )


class DepartmentDetailApi(ApiView):
    @extend_schema(responses={200: DepartmentOut, **errors(401, 404)})
    def get(self, request: Request, department_id: int) -> Response:
        return Response(DepartmentOut(selectors.department_get(user=request.user, department_id=department_id)).data)

    @extend_schema(request=IsolationIn, responses={200: DepartmentOut, **errors(400, 401, 403, 404)},
                   description="Mark the department (its subtree) dedicated or shared (docs/sharing.md); platform admins.")
    def patch(self, request: Request, department_id: int) -> Response:
        department = selectors.department_get(user=request.user, department_id=department_id)
        require_platform_admin(actor(request), to="change a department's isolation")
        changed = services.department_isolation_set(
            actor=actor(request), department_id=department.pk, **validated(IsolationIn, request)
        )
        return Response(DepartmentOut(changed).data)


class ProjectOut(serializers.ModelSerializer):  # type: ignore[type-arg]
    department = serializers.SlugRelatedField[Any](slug_field="slug", read_only=True)
    members = serializers.SlugRelatedField[Any](slug_field="username", many=True, read_only=True)

    class Meta:
        model = Project
        fields = ["id", "slug", "name", "department", "department_id", "members", "description", "isolation", "created_at"]


class ProjectIn(serializers.Serializer):  # type: ignore[type-arg]
    slug = serializers.CharField(max_length=63, validators=[NAMESPACE_SLUG_VALIDATOR])
    name = serializers.CharField(max_length=200)
    department = ScopedRelatedField(scope=lambda user: selectors.department_list(user=user))
    description = serializers.CharField(max_length=TEXT_LIMIT, required=False, allow_blank=True, default="")
    members = serializers.SlugRelatedField[Any](
        slug_field="username", many=True, required=False, default=list, queryset=get_user_model().objects.all()
    )


class ProjectPatchIn(serializers.Serializer):  # type: ignore[type-arg]
    name = serializers.CharField(max_length=200, required=False)
    description = serializers.CharField(max_length=TEXT_LIMIT, required=False, allow_blank=True)
    isolation = serializers.ChoiceField(choices=Isolation.choices, required=False,
                                       help_text="Platform admins only (docs/sharing.md).")


class ProjectListApi(ApiView):
    pagination_class = Pagination  # the schema's list shape (paginated() pages with it)
    ordering_fields = {"id": "id", "slug": "slug", "name": "name", "created_at": "created_at"}

    class Filter(serializers.Serializer):  # type: ignore[type-arg]
        department = IdField(required=False)

    @extend_schema(parameters=[Filter], responses={200: ProjectOut(many=True), **errors(400, 401, 404)})
    def get(self, request: Request) -> Response:
        params = filters(self.Filter, request)
        queryset = selectors.project_list(user=request.user, department_id=params.get("department")).prefetch_related("members")
        return paginated(view=self, request=request, queryset=queryset, serializer=ProjectOut)

    @extend_schema(request=ProjectIn, responses={201: ProjectOut, **errors(400, 401, 403)})
    def post(self, request: Request) -> Response:
        user = actor(request)
        # The department first (an invisible one reads as unknown), then the permission (and again in the
        # service), and only then the rest of the body: members are looked up for department admins only.
        department = target(ProjectIn, request, "department")
        if not access_for(user).can_administer_department(department.pk):
            raise NotAllowed("You may create projects only in departments you administer.")
        project = services.project_create(actor=user, **validated(ProjectIn, request))
        return Response(ProjectOut(project).data, status=status.HTTP_201_CREATED)


class ProjectDetailApi(ApiView):
    @extend_schema(responses={200: ProjectOut, **errors(401, 404)})
    def get(self, request: Request, project_id: int) -> Response:
        return Response(ProjectOut(selectors.project_get(user=request.user, project_id=project_id)).data)

    @extend_schema(request=ProjectPatchIn, responses={200: ProjectOut, **errors(400, 401, 403, 404)},
                   description="Change the project's name or description (its department's admins; the slug is its "
                   "namespace and never changes), or mark it dedicated or shared (docs/sharing.md; platform admins).")
    def patch(self, request: Request, project_id: int) -> Response:
        project = selectors.project_get(user=request.user, project_id=project_id)
        user = actor(request)
        if isinstance(request.data, Mapping) and "isolation" in request.data:
            require_platform_admin(user, to="change a project's isolation")
        elif not access_for(user).can_administer_department(project.department_id):
            raise NotAllowed("Only an admin of the project's department may change it.")
        data = validated(ProjectPatchIn, request, partial=True)
        with transaction.atomic():
            if "isolation" in data:
                services.project_isolation_set(actor=user, project_id=project.pk, isolation=data["isolation"])
            services.project_update(actor=user, project_id=project.pk, name=data.get("name"),
                                    description=data.get("description"))
        return Response(ProjectOut(selectors.project_get(user=request.user, project_id=project.pk)).data)


class MembershipOut(serializers.ModelSerializer):  # type: ignore[type-arg]
    department = serializers.SlugRelatedField[Any](slug_field="slug", read_only=True)

    class Meta:
        model = Membership
        fields = ["department", "department_id", "role"]


class MeOut(serializers.Serializer):  # type: ignore[type-arg]
    id = serializers.IntegerField()
    username = serializers.CharField()
    memberships = MembershipOut(many=True)


class MeApi(ApiView):
    @extend_schema(responses={200: MeOut, **errors(401)})
    def get(self, request: Request) -> Response:
        user = actor(request)
        memberships = Membership.objects.filter(user=user).select_related("department")
        return Response(MeOut({"id": user.pk, "username": user.get_username(), "memberships": memberships}).data)
