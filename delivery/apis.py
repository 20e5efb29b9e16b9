"""The API's cluster actions that talk to the cluster: sync now, and discovery."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from clusters import selectors
from clusters.apis import NodeOut
from clusters.models import Cluster, ClusterDriverKind
from delivery import services
from delivery.discovery import cluster_discover
from delivery.drivers import DriverError
from kernel.api.base import actor
from kernel.api.openapi import errors
from kernel.errors import ApplicationError, Conflict


class ClusterUnreachable(ApplicationError):
    """A real cluster did not answer, or refused: the gateway's upstream failed."""

    status = 502
    code = "cluster_unreachable"


class ClusterNotDiscoverable(Conflict):
    """The cluster's configuration rules discovery out: no request can succeed until it changes."""

    code = "cluster_not_discoverable"


def _not_discoverable(cluster: Cluster) -> str | None:
    """Why discovery cannot work on ``cluster`` as it is configured, or None when it could."""
    if cluster.driver == ClusterDriverKind.MANIFESTS:
        return (
            f"Cluster {cluster.name} is delivered to a manifests folder, which has no live nodes to discover; "
            "discovery needs the Kubernetes driver and its kubeconfig."
        )
    if cluster.driver == ClusterDriverKind.KUBERNETES and not cluster.kubeconfig_encrypted:
        return f"Cluster {cluster.name} has no kubeconfig: upload one before discovering its nodes."
    if cluster.driver not in ClusterDriverKind.values:
        return f"Cluster {cluster.name} uses driver {cluster.driver!r}, which this installation does not have."
    return None


class ClusterSyncApi(APIView):
    class Output(serializers.Serializer):  # type: ignore[type-arg]
        queued = serializers.IntegerField()

    @extend_schema(request=None, responses={202: Output, **errors(401, 403, 404)})
    def post(self, request: Request, cluster_id: int) -> Response:
        selectors.cluster_get(user=request.user, cluster_id=cluster_id)
        queued = services.cluster_sync_request(actor=actor(request), cluster_id=cluster_id)
        return Response({"queued": queued}, status=status.HTTP_202_ACCEPTED)


class ClusterDiscoverApi(APIView):
    @extend_schema(request=None, responses={200: NodeOut(many=True), **errors(401, 403, 404, 409, 502)})
    def post(self, request: Request, cluster_id: int) -> Response:
        cluster = selectors.cluster_get(user=request.user, cluster_id=cluster_id)
        try:
            nodes = cluster_discover(actor=actor(request), cluster_id=cluster_id)
        except DriverError as error:
            reason = _not_discoverable(cluster)
            if reason is not None:
                raise ClusterNotDiscoverable(reason) from None
            raise ClusterUnreachable(str(error)) from None
        queryset = selectors.node_list(user=request.user, cluster_id=cluster_id).filter(pk__in=[node.pk for node in nodes])
        return Response(NodeOut(queryset, many=True).data)
