"""The API's cluster actions that reach above the inventory: sync now, discovery, and the changes of
a cluster's and a node's settings (their checks read reservations, their pushes the projects)."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response

from clusters import apis as cluster_apis
from clusters import selectors
from clusters.apis import ClusterOut, ClusterSettingsIn, NodeOut, SettingsIn
from clusters.models import Cluster, ClusterDriverKind, NodeSharing
from delivery import services
from delivery.cluster_settings import cluster_settings_change
from delivery.discovery import cluster_discover
from delivery.drivers import DriverError
from delivery.node_settings import node_settings_update
from kernel.api.base import actor, validated
from kernel.api.openapi import errors
from kernel.api.views import ApiView
from kernel.errors import ApplicationError, Conflict
from tenants.access import require_platform_admin


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


class ClusterSyncApi(ApiView):
    class Output(serializers.Serializer):  # type: ignore[type-arg]
        queued = serializers.IntegerField()

    @extend_schema(request=None, responses={202: Output, **errors(401, 403, 404)})
    def post(self, request: Request, cluster_id: int) -> Response:
        selectors.cluster_get(user=request.user, cluster_id=cluster_id)
        queued = services.cluster_sync_request(actor=actor(request), cluster_id=cluster_id)
        return Response({"queued": queued}, status=status.HTTP_202_ACCEPTED)


class ClusterDiscoverApi(ApiView):
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


class ClusterDetailApi(cluster_apis.ClusterDetailApi):
    @extend_schema(
        request=ClusterSettingsIn, responses={200: ClusterOut, **errors(400, 401, 403, 404, 409)},
        description="Change a cluster's display name, monitoring, GPU sharing settings and how users reach it with "
        "kubectl (user_*: shown in the allocations' usage guide) (platform admins). Setting or "
        "changing prometheus_rule_namespace, prometheus_rule_labels, use_hami, use_volcano or pin_bookings queues a push "
        "of the cluster-wide objects; use_hami and pin_bookings also of every project namespace on the cluster. Turning "
        "use_hami (use_volcano) off while HAMi (Volcano) vGPU units are booked on the cluster is refused with 409.",
    )
    def patch(self, request: Request, cluster_id: int) -> Response:
        selectors.cluster_get(user=request.user, cluster_id=cluster_id)
        require_platform_admin(actor(request), to="change a cluster's settings")
        data = validated(ClusterSettingsIn, request, partial=True)
        cluster_settings_change(actor=actor(request), cluster_id=cluster_id, **data)
        return Response(ClusterOut(selectors.cluster_get(user=request.user, cluster_id=cluster_id)).data)


class NodeSettingsIn(SettingsIn):
    sharing = serializers.ChoiceField(choices=NodeSharing.choices, required=False)
    sharing_replicas = serializers.IntegerField(
        required=False, allow_null=True, min_value=0, max_value=32767,
        help_text="Replicas per GPU (mps: 2..48, 2..16 before compute capability 7.5; timeslice: 2 or more); null otherwise.",
    )
    is_schedulable = serializers.BooleanField(required=False, help_text="False: the placement engine books nothing new here.")
    mig_layout = serializers.JSONField(
        required=False,
        help_text='The pinned MIG layout as mig-parted groups, [{"devices": "all" or [indexes], "mig-devices": '
        '{"1g.10gb": 7}}]; [] for the layout the placement engine books.',
    )


class NodeDetailApi(cluster_apis.NodeDetailApi):
    @extend_schema(
        request=NodeSettingsIn, responses={200: NodeOut, **errors(400, 401, 403, 404, 409)},
        description="Change how a node offers its GPUs and whether it may be booked (platform admins). A change of "
        "sharing, sharing_replicas or mig_layout is refused with 409 while the node holds live reservations, and "
        "queues a push of the cluster's node configurations.",
    )
    def patch(self, request: Request, node_id: int) -> Response:
        selectors.node_get(user=request.user, node_id=node_id)
        require_platform_admin(actor(request), to="change a node's sharing settings")
        data = validated(NodeSettingsIn, request, partial=True)
        node_settings_update(actor=actor(request), node_id=node_id, **data)
        return Response(NodeOut(selectors.node_get(user=request.user, node_id=node_id)).data)
