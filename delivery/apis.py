"""The API's cluster actions that talk to the cluster: sync now, and discovery."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from clusters import selectors
from clusters.apis import NodeOut
from delivery import services
from delivery.discovery import cluster_discover
from delivery.drivers import DriverError
from kernel.api.base import actor
from kernel.errors import ApplicationError


class ClusterUnreachable(ApplicationError):
    status = 502
    code = "cluster_unreachable"


class ClusterSyncApi(APIView):
    class Output(serializers.Serializer):  # type: ignore[type-arg]
        queued = serializers.IntegerField()

    @extend_schema(request=None, responses={202: Output})
    def post(self, request: Request, cluster_id: int) -> Response:
        selectors.cluster_get(user=request.user, cluster_id=cluster_id)
        queued = services.cluster_sync_request(actor=actor(request), cluster_id=cluster_id)
        return Response({"queued": queued}, status=status.HTTP_202_ACCEPTED)


class ClusterDiscoverApi(APIView):
    @extend_schema(request=None, responses=NodeOut(many=True))
    def post(self, request: Request, cluster_id: int) -> Response:
        selectors.cluster_get(user=request.user, cluster_id=cluster_id)
        try:
            nodes = cluster_discover(actor=actor(request), cluster_id=cluster_id)
        except DriverError as error:
            raise ClusterUnreachable(str(error)) from None
        queryset = selectors.node_list(user=request.user, cluster_id=cluster_id).filter(pk__in=[node.pk for node in nodes])
        return Response(NodeOut(queryset, many=True).data)
