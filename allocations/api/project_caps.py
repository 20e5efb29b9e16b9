"""``GET/PUT /api/v1/projects/{id}/quotas/``: a project's caps within its department's quota
(docs/quotas.md, "Project caps"). Whoever reads the project reads them; its department's admins
replace them."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from allocations.admission.project_caps import CapUse, project_caps, project_caps_set
from allocations.catalogue import selectors
from kernel.api.base import ScopedRelatedField, actor, validated
from kernel.api.openapi import errors
from kernel.api.views import ApiView
from kernel.clock import clock_now
from kernel.errors import NotAllowed
from tenants.access import access_for
from tenants.models import Project
from tenants.selectors import project_get


class CapOut(serializers.Serializer):  # type: ignore[type-arg]
    flavor_id = serializers.IntegerField(allow_null=True, help_text="Empty: GPU-equivalents across all flavors.")
    flavor = serializers.CharField(allow_null=True)
    limit = serializers.DecimalField(max_digits=10, decimal_places=4)
    in_use = serializers.DecimalField(max_digits=14, decimal_places=4, help_text="What the project's grants hold now.")


class ProjectCapsOut(serializers.Serializer):  # type: ignore[type-arg]
    project_id = serializers.IntegerField()
    caps = CapOut(many=True)


class CapIn(serializers.Serializer):  # type: ignore[type-arg]
    flavor = ScopedRelatedField(scope=lambda user: selectors.flavor_list(user=user), allow_null=True,
                                help_text="A flavor's id (its units), or null for GPU-equivalents.")
    limit = serializers.DecimalField(max_digits=10, decimal_places=4, min_value=Decimal(0))


class ProjectCapsIn(serializers.Serializer):  # type: ignore[type-arg]
    caps = CapIn(many=True, help_text="Every cap the project keeps: the list replaces its caps ([] removes them).")


def _answer(project: Project) -> Response:
    caps: list[CapUse] = project_caps(project=project, at=clock_now())
    body: dict[str, Any] = {"project_id": project.pk, "caps": [cap.__dict__ for cap in caps]}
    return Response(ProjectCapsOut(body).data)


class ProjectCapsApi(ApiView):
    @extend_schema(responses={200: ProjectCapsOut, **errors(401, 404)})
    def get(self, request: Request, project_id: int) -> Response:
        return _answer(project_get(user=request.user, project_id=project_id))

    @extend_schema(request=ProjectCapsIn, responses={200: ProjectCapsOut, **errors(400, 401, 403, 404)},
                   description="Replace the project's caps; its department's admins. Grants already above a new cap "
                   "keep running: the cap refuses what is admitted from now on (409 quota_exceeded).")
    def put(self, request: Request, project_id: int) -> Response:
        project = project_get(user=request.user, project_id=project_id)
        user = actor(request)
        if not access_for(user).can_administer_department(project.department_id):
            raise NotAllowed("Only an admin of the project's department may set its caps.")
        data = validated(ProjectCapsIn, request)
        project_caps_set(actor=user, project=project, caps=[(row["flavor"], row["limit"]) for row in data["caps"]])
        return _answer(project)
