"""REST endpoints: the node agent's report, node tokens, and the observed state of nodes and GPUs.

The report endpoint authenticates with a node token only (``Authorization: Bearer gpn_…``): no
session, no user token. 401 without a token or with an unknown one, 403 for a revoked token or one
of another node, 413 for a body over the limit, 400 naming the JSON pointer of each bad field.
"""

from __future__ import annotations

import datetime
import functools
import json
import re
from typing import Any

from django.contrib.auth.models import AnonymousUser
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.utils import extend_schema, extend_schema_serializer
from rest_framework import exceptions, serializers, status
from rest_framework.authentication import BaseAuthentication
from rest_framework.permissions import BasePermission
from rest_framework.request import Request
from rest_framework.response import Response

from agent.report import AgentReport, load_schema
from clusters.models import Node
from kernel.api.base import IdField, actor, filters, iso_datetime, paginated, refuse_hostile_text, validated
from kernel.api.openapi import errors
from kernel.api.pagination import Pagination
from kernel.api.views import ApiView
from kernel.clock import clock_now
from kernel.errors import ApplicationError, NotAllowed
from telemetry import conf, node_tokens, selectors
from telemetry.ingest.report import node_report_ingest, report_check
from telemetry.models import (
    GpuSample,
    NodeReportState,
    NodeToken,
    ObservedGpu,
    ObservedMigInstance,
    SampleTier,
)
from telemetry.report_openapi import report_request_schema
from telemetry.schema_check import Validator
from tenants.access import require_platform_admin

SUPPORTED_SCHEMA_VERSIONS = (1,)
MAX_REPORTED_ERRORS = 20


# ------------------------------------------------------------------------------- node reports


class NodeTokenAuthentication(BaseAuthentication):
    """``Authorization: Bearer <node token>``; ``request.auth`` is the NodeToken."""

    def authenticate(self, request: Request) -> tuple[AnonymousUser, NodeToken] | None:
        header = request.META.get("HTTP_AUTHORIZATION", "")
        if not header:
            return None
        scheme, _, credentials = header.partition(" ")
        if scheme.lower() != "bearer" or not credentials.strip():
            raise exceptions.AuthenticationFailed("Send the node token as 'Authorization: Bearer <token>'.")
        token = selectors.node_token_find(text=credentials.strip())
        if token is None:
            raise exceptions.AuthenticationFailed("Unknown node token.")
        if token.revoked_at is not None:
            raise exceptions.PermissionDenied("This node token has been revoked.")
        return AnonymousUser(), token

    def authenticate_header(self, request: Request) -> str:
        return 'Bearer realm="gpuportal-node-agent"'


class NodeTokenScheme(OpenApiAuthenticationExtension):  # type: ignore[no-untyped-call]
    target_class = NodeTokenAuthentication
    name = "nodeToken"

    def get_security_definition(self, auto_schema: Any) -> dict[str, str]:
        return {"type": "http", "scheme": "bearer", "description": "A node agent token (gpn_...)."}


class HasNodeToken(BasePermission):
    def has_permission(self, request: Request, view: Any) -> bool:
        return isinstance(request.auth, NodeToken)


class PayloadTooLarge(ApplicationError):
    status = 413
    code = "payload_too_large"


@functools.cache
def report_validator() -> Validator:
    return Validator(load_schema(), max_errors=MAX_REPORTED_ERRORS)


def _read_body(request: Request) -> bytes:
    media_type = (request.content_type or "").split(";")[0].strip().lower()
    if media_type != "application/json":
        raise exceptions.UnsupportedMediaType(media_type or "(none)")
    limit = conf.report_max_bytes()
    try:
        length = int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        raise ApplicationError("Content-Length is not a number.", fields={"body": ["bad Content-Length"]}) from None
    if length > limit:
        raise PayloadTooLarge(f"A report may be at most {limit} bytes.", fields={"body": [f"{length} bytes > {limit}"]})
    body: bytes = request._request.read(limit + 1)
    if len(body) > limit:
        raise PayloadTooLarge(f"A report may be at most {limit} bytes.", fields={"body": [f"more than {limit} bytes"]})
    return body


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _parse(body: bytes) -> Any:
    try:
        return json.loads(body, parse_constant=_reject_constant)
    except RecursionError:
        raise ApplicationError("The report is nested too deeply.", fields={"body": ["nested too deeply"]}) from None
    except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        error = ApplicationError("The request body is not valid JSON.", fields={"body": [str(exc)]})
        error.code = "parse_error"
        raise error from None


def _check_schema(data: Any) -> AgentReport:
    if isinstance(data, dict) and "schema_version" in data and data["schema_version"] not in SUPPORTED_SCHEMA_VERSIONS:
        supported = ", ".join(str(version) for version in SUPPORTED_SCHEMA_VERSIONS)
        message = f"Unsupported schema_version {json.dumps(data['schema_version'])[:20]}; this portal accepts {supported}."
        raise ApplicationError(message, fields={"/schema_version": [message]})
    errors = report_validator().errors(data)
    if errors:
        fields: dict[str, list[str]] = {}
        for error in errors:
            fields.setdefault(error.pointer or "body", []).append(error.message)
        listed = ", ".join(list(fields)[:5])
        raise ApplicationError(f"The report does not match the report schema at {listed}.", fields=fields)
    report: AgentReport = data
    return report


# A NUL or a lone surrogate reaches a parsed report only from a \u escape or from bytes outside
# ASCII (control characters are refused raw by the parser), or from a body in UTF-16 or UTF-32
# (which ``json.loads`` also reads; their ASCII characters come with NUL bytes): a body with none
# of these holds no such string, and the walk over every string of the report is skipped.
_HOSTILE_ESCAPE = re.compile(rb"\\u(?:0000|[dD][89a-fA-F])")


def _may_hold_hostile_text(body: bytes) -> bool:
    return not body.isascii() or b"\x00" in body or _HOSTILE_ESCAPE.search(body) is not None


class NodeReportApi(ApiView):
    authentication_classes = [NodeTokenAuthentication]
    permission_classes = [HasNodeToken]

    @extend_schema_serializer(component_name="NodeReportOutcome")
    class Output(serializers.Serializer):  # type: ignore[type-arg]
        accepted = serializers.BooleanField()
        reason = serializers.CharField()
        stale_at = serializers.DateTimeField(allow_null=True)

    @extend_schema(
        request={"application/json": report_request_schema()},
        responses={200: Output, **errors(400, 401, 403, 404, 413, 415)},
    )
    def post(self, request: Request, node_name: str) -> Response:
        received_at = clock_now()
        token = request.auth
        assert isinstance(token, NodeToken)
        if token.node_name != node_name:
            raise NotAllowed(f"This token is for node {token.node_name}, not {node_name}.")
        body = _read_body(request)
        report = _check_schema(_parse(body))
        # The report parses its own body, so the API-wide refusal of NUL bytes runs here: PostgreSQL
        # cannot store them in text or jsonb.
        if _may_hold_hostile_text(body):
            refuse_hostile_text(report)
        if report["node_name"] != node_name:
            raise NotAllowed(f"The report is for node {report['node_name']}, but was sent for {node_name}.")
        report_check(report=report)
        outcome = node_report_ingest(token=token, node_name=node_name, report=report, received_at=received_at)
        # ``Output``'s fields, written without the serializer (it describes the answer in the schema).
        stale_at = iso_datetime(outcome.stale_at) if outcome.stale_at is not None else None
        answer = {"accepted": outcome.accepted, "reason": outcome.reason, "stale_at": stale_at}
        return Response(answer, status=status.HTTP_200_OK)


# -------------------------------------------------------------------------------- node tokens


class NodeTokenOut(serializers.ModelSerializer):  # type: ignore[type-arg]
    cluster = serializers.SlugRelatedField[Any](slug_field="name", read_only=True)
    created_by = serializers.SlugRelatedField[Any](slug_field="username", read_only=True)
    revoked_by = serializers.SlugRelatedField[Any](slug_field="username", read_only=True, allow_null=True)
    active = serializers.BooleanField(source="is_active", read_only=True)

    class Meta:
        model = NodeToken
        fields = [
            "id", "cluster", "cluster_id", "node_name", "key_id", "description", "active", "created_at", "created_by",
            "revoked_at", "revoked_by", "last_used_at",
        ]  # fmt: skip


class NodeTokenIssuedOut(NodeTokenOut):
    token = serializers.SerializerMethodField(help_text="The token itself: shown this once, never again.")

    class Meta(NodeTokenOut.Meta):
        fields = [
            "id", "cluster", "cluster_id", "node_name", "key_id", "description", "active", "created_at", "created_by",
            "revoked_at", "revoked_by", "last_used_at", "token",
        ]  # fmt: skip

    def get_token(self, obj: NodeToken) -> str:
        return str(self.context["token"])


class NodeTokenListApi(ApiView):
    idempotency_replay = False  # the answer holds the token: never kept, so no Idempotency-Key
    pagination_class = Pagination  # the schema's list shape (paginated() pages with it)
    ordering_fields = {"id": "id", "created_at": "created_at", "last_used_at": "last_used_at", "node_name": "node_name"}

    class Filter(serializers.Serializer):  # type: ignore[type-arg]
        cluster = IdField(required=False)
        node_name = serializers.CharField(required=False, max_length=253)
        active = serializers.BooleanField(required=False, allow_null=True, default=None)

    @extend_schema_serializer(component_name="NodeTokenIssue")
    class Input(serializers.Serializer):  # type: ignore[type-arg]
        cluster = IdField()
        node_name = serializers.CharField(max_length=253)
        description = serializers.CharField(max_length=200, required=False, allow_blank=True, default="")

    @extend_schema(parameters=[Filter], responses={200: NodeTokenOut(many=True), **errors(400, 401, 403, 404)})
    def get(self, request: Request) -> Response:
        params = filters(self.Filter, request)
        queryset = selectors.node_token_list(
            user=request.user, cluster_id=params.get("cluster"), node_name=params.get("node_name"),
            active=params.get("active"),
        )  # fmt: skip
        return paginated(view=self, request=request, queryset=queryset, serializer=NodeTokenOut)

    @extend_schema(request=Input, responses={201: NodeTokenIssuedOut, **errors(400, 401, 403)})
    def post(self, request: Request) -> Response:
        require_platform_admin(actor(request), to="issue node tokens")  # before the body is read
        data = validated(self.Input, request)
        token, text = node_tokens.node_token_issue(
            actor=actor(request), cluster_id=data["cluster"], node_name=data["node_name"], description=data["description"]
        )
        body = NodeTokenIssuedOut(token, context={"token": text}).data
        return Response(body, status=status.HTTP_201_CREATED, headers={"Cache-Control": "no-store"})


class NodeTokenDetailApi(ApiView):
    @extend_schema(responses={200: NodeTokenOut, **errors(401, 403, 404)})
    def get(self, request: Request, token_id: int) -> Response:
        return Response(NodeTokenOut(selectors.node_token_get(user=request.user, token_id=token_id)).data)


class NodeTokenRevokeApi(ApiView):
    @extend_schema(request=None, responses={200: NodeTokenOut, **errors(401, 403, 404)})
    def post(self, request: Request, token_id: int) -> Response:
        token = node_tokens.node_token_revoke(actor=actor(request), token_id=token_id)
        return Response(NodeTokenOut(selectors.node_token_get(user=request.user, token_id=token.pk)).data)


# ---------------------------------------------------------------------------- observed state


class MigInstanceOut(serializers.ModelSerializer):  # type: ignore[type-arg]
    class Meta:
        model = ObservedMigInstance
        fields = [
            "slot", "uuid", "profile", "gpu_instance_id", "compute_instance_id", "gpu_instance_slices",
            "compute_instance_slices", "multiprocessor_count", "memory_total_bytes", "memory_used_bytes",
        ]  # fmt: skip


class ObservedGpuOut(serializers.ModelSerializer):  # type: ignore[type-arg]
    inventory_gpu_id = serializers.IntegerField(source="gpu_id", allow_null=True, read_only=True)
    present = serializers.BooleanField(source="is_present", read_only=True)
    mig_mode = serializers.SerializerMethodField()
    utilization = serializers.SerializerMethodField()

    class Meta:
        model = ObservedGpu
        fields = [
            "id", "uuid", "index", "inventory_gpu_id", "name", "present", "first_seen_at", "last_seen_at",
            "absent_since", "memory_total_bytes", "memory_used_bytes", "mig_mode", "utilization",
            "temperature_celsius", "power_usage_milliwatts", "power_limit_milliwatts",
        ]  # fmt: skip

    def get_mig_mode(self, obj: ObservedGpu) -> dict[str, str] | None:
        if not obj.mig_mode_current:
            return None
        return {"current": obj.mig_mode_current, "pending": obj.mig_mode_pending}

    def get_utilization(self, obj: ObservedGpu) -> dict[str, int] | None:
        if obj.gpu_percent is None or obj.memory_percent is None:
            return None
        return {"gpu_percent": obj.gpu_percent, "memory_percent": obj.memory_percent}


class ObservedGpuDetailOut(ObservedGpuOut):
    mig_instances = MigInstanceOut(many=True, read_only=True)

    class Meta(ObservedGpuOut.Meta):
        fields = [
            "id", "uuid", "index", "inventory_gpu_id", "name", "present", "first_seen_at", "last_seen_at",
            "absent_since", "memory_total_bytes", "memory_used_bytes", "mig_mode", "utilization",
            "temperature_celsius", "power_usage_milliwatts", "power_limit_milliwatts",
            "ecc_errors", "processes", "unsupported", "errors", "mig_instances",
        ]  # fmt: skip
        extra_kwargs = {
            "processes": {
                "help_text": "The processes on the GPU (pids, pod UIDs, containers); null when the agent reported none, "
                "or when the GPU is held by a department outside your reach (or by none, unless you read every "
                "department)."
            },
        }


class ReportStateOut(serializers.ModelSerializer):  # type: ignore[type-arg]
    last_report_at = serializers.DateTimeField(source="received_at", read_only=True)

    class Meta:
        model = NodeReportState
        fields = [
            "last_report_at", "collected_at", "stale_at", "interval_seconds", "agent_version", "agent_started_at",
            "sequence", "undelivered_reports", "reports_accepted", "reports_discarded", "driver_version",
            "cuda_driver_version", "mig_mismatch", "mig_reset_pending", "mig_detail", "unidentified_gpus", "errors",
        ]  # fmt: skip


class TelemetryNodeOut(serializers.Serializer):  # type: ignore[type-arg]
    id = serializers.IntegerField()
    name = serializers.CharField()
    cluster = serializers.CharField(source="cluster.name")
    cluster_id = serializers.IntegerField()
    reporting = serializers.SerializerMethodField(help_text="never | fresh | stale")
    report = serializers.SerializerMethodField()
    gpus = serializers.SerializerMethodField()

    gpu_serializer: type[ObservedGpuOut] = ObservedGpuOut

    def _state(self, node: Node) -> NodeReportState | None:
        state: NodeReportState | None = getattr(node, "telemetry", None)
        return state if state is not None and state.received_at is not None else None

    def get_reporting(self, node: Node) -> str:
        state = self._state(node)
        if state is None:
            return "never"
        return "stale" if state.is_stale_at(self.context["now"]) else "fresh"

    def get_report(self, node: Node) -> dict[str, Any] | None:
        state = self._state(node)
        return dict(ReportStateOut(state).data) if state is not None else None

    def get_gpus(self, node: Node) -> list[dict[str, Any]]:
        rows = getattr(node, "observed_gpus", [])
        return [dict(item) for item in self.gpu_serializer(rows, many=True).data]


class TelemetryNodeDetailOut(TelemetryNodeOut):
    gpu_serializer = ObservedGpuDetailOut


class TelemetryNodeListApi(ApiView):
    pagination_class = Pagination  # the schema's list shape (paginated() pages with it)
    ordering_fields = {"id": "id", "name": "name"}

    class Filter(serializers.Serializer):  # type: ignore[type-arg]
        cluster = IdField(required=False)
        stale = serializers.BooleanField(required=False, allow_null=True, default=None)
        mig_mismatch = serializers.BooleanField(required=False, allow_null=True, default=None)

    @extend_schema(parameters=[Filter], responses={200: TelemetryNodeOut(many=True), **errors(400, 401, 404)})
    def get(self, request: Request) -> Response:
        params = filters(self.Filter, request)
        now = clock_now()
        queryset = selectors.telemetry_node_list(
            user=request.user, now=now, cluster_id=params.get("cluster"), stale=params.get("stale"),
            mig_mismatch=params.get("mig_mismatch"),
        ).prefetch_related(selectors.present_gpus_prefetch())  # fmt: skip
        return paginated(
            view=self, request=request, queryset=queryset, serializer=TelemetryNodeOut,
            context={"request": request, "now": now},
        )  # fmt: skip


class TelemetryNodeDetailApi(ApiView):
    @extend_schema(responses={200: TelemetryNodeDetailOut, **errors(401, 404)})
    def get(self, request: Request, node_id: int) -> Response:
        node = selectors.telemetry_node_get(user=request.user, node_id=node_id)
        return Response(TelemetryNodeDetailOut(node, context={"request": request, "now": clock_now()}).data)


class GpuSampleOut(serializers.ModelSerializer):  # type: ignore[type-arg]
    class Meta:
        model = GpuSample
        fields = ["at", "samples", "gpu_percent", "memory_percent", "memory_used_bytes", "temperature_celsius", "power_milliwatts"]


_TIERS = {"raw": SampleTier.RAW, "5m": SampleTier.FIVE_MINUTES, "1h": SampleTier.HOUR}


class GpuSampleListApi(ApiView):
    pagination_class = Pagination  # the schema's list shape (paginated() pages with it)
    ordering_fields = {"id": "id", "at": "at"}

    class Filter(serializers.Serializer):  # type: ignore[type-arg]
        tier = serializers.ChoiceField(choices=list(_TIERS), required=False, default="5m")
        since = serializers.DateTimeField(required=False)
        until = serializers.DateTimeField(required=False)

    @extend_schema(parameters=[Filter], responses={200: GpuSampleOut(many=True), **errors(400, 401, 404)})
    def get(self, request: Request, gpu_id: int) -> Response:
        params = filters(self.Filter, request)
        gpu = selectors.observed_gpu_get(user=request.user, gpu_id=gpu_id)
        until = params.get("until") or clock_now()
        since = params.get("since") or until - datetime.timedelta(days=1)
        if since >= until:
            raise ApplicationError("'since' must be before 'until'.", fields={"since": ["must be before until"]})
        queryset = selectors.gpu_sample_list(gpu=gpu, tier=_TIERS[params["tier"]], since=since, until=until)
        return paginated(view=self, request=request, queryset=queryset, serializer=GpuSampleOut)
