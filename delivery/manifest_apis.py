"""What the portal renders for a cluster, read over the API: the cluster-wide objects (priority
classes, admission policies, node labels, device-plugin configurations...) or one project's
namespace (quota, LimitRange, the booked nodes it is pinned to). The desired state, as the next
push would apply it; nothing is written."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from clusters import selectors as cluster_selectors
from delivery import services
from delivery.drivers import DriverError
from delivery.drivers.base import Scope
from kernel.api.base import IdField, filters
from kernel.api.openapi import errors
from kernel.api.views import ApiView
from kernel.errors import Conflict, NotAllowed
from tenants import selectors as tenant_selectors
from tenants.access import access_for


class ManifestsOut(serializers.Serializer):  # type: ignore[type-arg]
    cluster = serializers.CharField()
    namespace = serializers.CharField(allow_null=True, help_text="null: the cluster-wide objects.")
    objects = serializers.ListField(child=serializers.DictField(), help_text="Kubernetes objects, in apply order.")


class ClusterManifestsApi(ApiView):
    class Filter(serializers.Serializer):  # type: ignore[type-arg]
        project = IdField(required=False, help_text="A project's namespace instead of the cluster-wide objects.")

    @extend_schema(
        parameters=[Filter], responses={200: ManifestsOut, **errors(400, 401, 403, 404, 409)},
        description="The objects the next push would apply: the cluster-wide ones (platform admins and auditors) "
        "or one project's namespace (whoever may read the project).",
    )
    def get(self, request: Request, cluster_id: int) -> Response:
        cluster = cluster_selectors.cluster_get(user=request.user, cluster_id=cluster_id)
        project_id = filters(self.Filter, request).get("project")
        scope: Scope | None
        try:
            if project_id is None:
                access = access_for(request.user)
                if not (access.is_platform_admin or access.audited):
                    raise NotAllowed("Only platform admins and auditors may read a cluster's cluster-wide objects.")
                scope = services.cluster_scope(cluster=cluster)
                namespace = None
            else:
                project = tenant_selectors.project_get(user=request.user, project_id=project_id)
                found = services.project_scopes(cluster=cluster, project_ids=[project.pk])
                scope = found[0] if found else None
                namespace = project.slug
        except DriverError as error:
            raise Conflict(str(error)) from None
        objects: list[dict[str, Any]] = scope.objects if scope is not None else []
        return Response(ManifestsOut({"cluster": cluster.name, "namespace": namespace, "objects": objects}).data)
