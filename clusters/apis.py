"""REST endpoints for the inventory. Cluster credentials are never part of any response."""

from __future__ import annotations

import re
from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response

from clusters import credentials, inventory, selectors
from clusters.models import Cluster, ClusterDrift, ClusterDriverKind, ClusterPush, Gpu, Node
from kernel.api.base import IdField, actor, filters, paginated, validated
from kernel.api.openapi import errors
from kernel.api.pagination import Pagination
from kernel.api.views import ApiView
from tenants.access import require_platform_admin
from tenants.models import NAMESPACE_SLUG_VALIDATOR


class ClusterOut(serializers.ModelSerializer):  # type: ignore[type-arg]
    node_count = serializers.IntegerField(read_only=True)
    has_kubeconfig = serializers.BooleanField(read_only=True)
    missing_prerequisite = serializers.SerializerMethodField(
        help_text="What the cluster lacks that the portal does not create (the GPU operator's namespace), and what is "
        "withheld until it exists; empty when nothing is missing."
    )

    class Meta:
        model = Cluster
        fields = [
            "id", "name", "display_name", "driver", "is_active", "node_count", "has_kubeconfig", "use_hami", "use_volcano", "pin_bookings",
            "sharing_reserve_percent", "sharing_reserve_per_unit_mib", "gpu_operator_namespace", "prometheus_url", "prometheus_rule_namespace", "prometheus_rule_labels",
            "user_api_server_url", "user_ca_certificate", "user_oidc_issuer_url", "user_oidc_client",
            "last_sync_at", "last_sync_error", "missing_prerequisite", "last_drift_at", "created_at",
        ]

    def get_missing_prerequisite(self, obj: Cluster) -> str:
        return selectors.cluster_missing_prerequisite(obj)


class ClusterIn(serializers.Serializer):  # type: ignore[type-arg]
    name = serializers.CharField(max_length=63, validators=[NAMESPACE_SLUG_VALIDATOR])
    display_name = serializers.CharField(max_length=200, required=False, allow_blank=True, default="")
    driver = serializers.ChoiceField(choices=ClusterDriverKind.choices, default=ClusterDriverKind.MANIFESTS)


class ClusterListApi(ApiView):
    pagination_class = Pagination  # the schema's list shape (paginated() pages with it)
    ordering_fields = {"id": "id", "name": "name", "created_at": "created_at", "last_sync_at": "last_sync_at"}

    @extend_schema(responses={200: ClusterOut(many=True), **errors(401, 404)})
    def get(self, request: Request) -> Response:
        return paginated(view=self, request=request, queryset=selectors.cluster_list(user=request.user), serializer=ClusterOut)

    @extend_schema(request=ClusterIn, responses={201: ClusterOut, **errors(400, 401, 403)})
    def post(self, request: Request) -> Response:
        require_platform_admin(actor(request), to="register clusters")  # before the body is read
        cluster = inventory.cluster_create(actor=actor(request), **validated(ClusterIn, request))
        return Response(ClusterOut(selectors.cluster_get(user=request.user, cluster_id=cluster.pk)).data, status=status.HTTP_201_CREATED)


_LABEL_NAME = re.compile(r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
_LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")


class SettingsIn(serializers.Serializer):  # type: ignore[type-arg]
    """A PATCH of settings: a field that is not a setting of this object is refused, named, as every
    unknown body field is (``kernel.api.base.validated``)."""


class ClusterSettingsIn(SettingsIn):
    display_name = serializers.CharField(max_length=200, required=False, allow_blank=True)
    prometheus_url = serializers.URLField(
        max_length=500, required=False, allow_blank=True,
        help_text="The cluster's Prometheus HTTP API (http or https); empty: utilisation from the node agents only.",
    )
    prometheus_rule_namespace = serializers.CharField(
        max_length=63, required=False, allow_blank=True, validators=[NAMESPACE_SLUG_VALIDATOR],
        help_text="Namespace the portal's PrometheusRule is pushed to; empty: none is pushed.",
    )
    prometheus_rule_labels = serializers.DictField(
        child=serializers.CharField(max_length=63, allow_blank=True), required=False,
        help_text="Labels of the PrometheusRule (matched by the Prometheus's ruleSelector), at most 16.",
    )
    use_hami = serializers.BooleanField(
        required=False, help_text="HAMi schedules nvidia.com/gpu here: project quotas also carry gpumem and gpucores. "
        "Refused (409) off while HAMi vGPU units are booked on the cluster.",
    )
    use_volcano = serializers.BooleanField(
        required=False, help_text="Render a Volcano Queue per department. Refused (409) off while Volcano vGPU units are booked.",
    )
    pin_bookings = serializers.BooleanField(
        required=False, help_text="Pods of a project run only on the nodes (and, under HAMi, GPUs) its allocations booked "
        "(docs/sharing.md); needs Kubernetes 1.36 or later.",
    )
    sharing_reserve_percent = serializers.IntegerField(
        required=False, min_value=0, max_value=90, help_text="Percent of a shared GPU's memory that no unit may book.",
    )
    sharing_reserve_per_unit_mib = serializers.IntegerField(
        required=False, min_value=0, max_value=65536, help_text="MiB of a shared GPU's memory kept free per unit sharing it.",
    )

    user_api_server_url = serializers.URLField(
        max_length=500, required=False, allow_blank=True,
        help_text="The API server's URL as users reach it with kubectl (https); shown in the allocations' usage guide.",
    )
    user_ca_certificate = serializers.CharField(
        max_length=20000, required=False, allow_blank=True, trim_whitespace=True,
        help_text="PEM CA certificate of that API server; empty: the users' trust store.",
    )
    user_oidc_issuer_url = serializers.URLField(
        max_length=500, required=False, allow_blank=True, help_text="The OIDC issuer the API server trusts (https).",
    )
    user_oidc_client = serializers.CharField(
        max_length=200, required=False, allow_blank=True,
        help_text="The OIDC client id users sign in with (kubelogin's --oidc-client-id).",
    )

    def validate_user_api_server_url(self, value: str) -> str:
        return _https(value)

    def validate_user_oidc_issuer_url(self, value: str) -> str:
        return _https(value)

    def validate_user_oidc_client(self, value: str) -> str:
        if value and not _CLIENT_ID.match(value):
            raise serializers.ValidationError("Letters, digits and . _ : / @ - only.")
        return value

    def validate_user_ca_certificate(self, value: str) -> str:
        if value and not (value.startswith("-----BEGIN CERTIFICATE-----") and value.endswith("-----END CERTIFICATE-----")):
            raise serializers.ValidationError("A PEM certificate (-----BEGIN CERTIFICATE----- ... -----END CERTIFICATE-----).")
        return value

    def validate_prometheus_url(self, value: str) -> str:
        if value and not value.lower().startswith(("http://", "https://")):
            raise serializers.ValidationError("Only http:// and https:// URLs.")
        return value

    def validate_prometheus_rule_labels(self, value: dict[str, str]) -> dict[str, str]:
        if len(value) > 16:
            raise serializers.ValidationError("At most 16 labels.")
        for key, text in value.items():
            if len(key) > 253 + 1 + 63 or not _LABEL_NAME.match(key):
                raise serializers.ValidationError(f"{key!r} is not a Kubernetes label name.")
            if key.startswith(MANAGED_PREFIXES):
                raise serializers.ValidationError(f"{key!r} is the portal's own label.")
            if not _LABEL_VALUE.match(text):
                raise serializers.ValidationError(f"The value of {key!r} is not a Kubernetes label value.")
        return value


_CLIENT_ID = re.compile(r"^[A-Za-z0-9._:/@-]+$")


def _https(value: str) -> str:
    if value and not value.lower().startswith("https://"):
        raise serializers.ValidationError("Only https:// URLs.")
    return value


MANAGED_PREFIXES = ("app.kubernetes.io/managed-by", "gpuportal.io/")


class ClusterDetailApi(ApiView):
    """GET here; PATCH (the settings) in :mod:`delivery.apis`, which the route points at."""

    @extend_schema(responses={200: ClusterOut, **errors(401, 404)})
    def get(self, request: Request, cluster_id: int) -> Response:
        return Response(ClusterOut(selectors.cluster_get(user=request.user, cluster_id=cluster_id)).data)


class GpuOut(serializers.ModelSerializer):  # type: ignore[type-arg]
    class Meta:
        model = Gpu
        fields = ["index", "model", "memory_mib", "mig_capable", "uuid"]


class NodeOut(serializers.ModelSerializer):  # type: ignore[type-arg]
    cluster = serializers.SlugRelatedField[Any](slug_field="name", read_only=True)
    gpus = GpuOut(many=True, read_only=True)

    class Meta:
        model = Node
        fields = [
            "id", "name", "cluster", "cluster_id", "cpu_millicores", "memory_mib", "is_schedulable", "sharing", "sharing_replicas",
            "mig_layout", "driver_version", "cuda_version", "labels", "gpus", "updated_at",
        ]


class NodeListApi(ApiView):
    pagination_class = Pagination  # the schema's list shape (paginated() pages with it)
    ordering_fields = {"id": "id", "name": "name", "cluster": "cluster__name", "created_at": "created_at"}

    class Filter(serializers.Serializer):  # type: ignore[type-arg]
        cluster = IdField(required=False)

    @extend_schema(parameters=[Filter], responses={200: NodeOut(many=True), **errors(400, 401, 404)})
    def get(self, request: Request) -> Response:
        params = filters(self.Filter, request)
        queryset = selectors.node_list(user=request.user, cluster_id=params.get("cluster"))
        return paginated(view=self, request=request, queryset=queryset, serializer=NodeOut)


class NodeDetailApi(ApiView):
    """GET here; PATCH (the sharing settings) in :mod:`delivery.apis`, which the route points at."""

    @extend_schema(responses={200: NodeOut, **errors(401, 404)})
    def get(self, request: Request, node_id: int) -> Response:
        return Response(NodeOut(selectors.node_get(user=request.user, node_id=node_id)).data)


class ClusterKubeconfigApi(ApiView):
    """Write-only: the kubeconfig is stored encrypted and never returned."""

    class Input(serializers.Serializer):  # type: ignore[type-arg]
        kubeconfig = serializers.CharField(max_length=256 * 1024, trim_whitespace=False)

    @extend_schema(request=Input, responses={204: None, **errors(400, 401, 403, 404)})
    def put(self, request: Request, cluster_id: int) -> Response:
        selectors.cluster_get(user=request.user, cluster_id=cluster_id)
        require_platform_admin(actor(request), to="change a cluster's credentials")  # before the body is read
        credentials.cluster_kubeconfig_set(actor=actor(request), cluster_id=cluster_id, **validated(self.Input, request))
        return Response(status=status.HTTP_204_NO_CONTENT)


class ClusterDriftOut(serializers.ModelSerializer):  # type: ignore[type-arg]
    class Meta:
        model = ClusterDrift
        fields = ["id", "kind", "namespace", "name", "change", "fields", "detected_at"]


class ClusterDriftListApi(ApiView):
    pagination_class = Pagination  # the schema's list shape (paginated() pages with it)
    ordering_fields = {"id": "id", "detected_at": "detected_at", "kind": "kind", "name": "name"}

    @extend_schema(responses={200: ClusterDriftOut(many=True), **errors(401, 403, 404)})
    def get(self, request: Request, cluster_id: int) -> Response:
        queryset = selectors.cluster_drift_list(user=request.user, cluster_id=cluster_id)
        return paginated(view=self, request=request, queryset=queryset, serializer=ClusterDriftOut)


class ClusterPushOut(serializers.ModelSerializer):  # type: ignore[type-arg]
    project = serializers.SlugRelatedField[Any](slug_field="slug", read_only=True, allow_null=True)  # none: cluster-wide

    class Meta:
        model = ClusterPush
        fields = ["id", "project", "allocation_id", "state", "attempts", "available_at", "last_error", "created_at", "completed_at"]


class ClusterPushListApi(ApiView):
    pagination_class = Pagination  # the schema's list shape (paginated() pages with it)
    ordering_fields = {"id": "id", "created_at": "created_at", "completed_at": "completed_at", "state": "state"}

    @extend_schema(responses={200: ClusterPushOut(many=True), **errors(401, 403, 404)})
    def get(self, request: Request, cluster_id: int) -> Response:
        queryset = selectors.cluster_push_list(user=request.user, cluster_id=cluster_id)
        return paginated(view=self, request=request, queryset=queryset, serializer=ClusterPushOut)
