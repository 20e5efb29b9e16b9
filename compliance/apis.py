"""The audit API (mounted at ``/api/v1/audit/``): list, export, checkpoints and verifier keys.

Auditors and platform admins see everything, department admins their subtree, everybody else
gets 404 from every endpoint.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar, cast

from django.core.exceptions import ImproperlyConfigured
from django.http import Http404, StreamingHttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema, extend_schema_serializer
from rest_framework import serializers
from rest_framework.negotiation import BaseContentNegotiation
from rest_framework.renderers import BaseRenderer, JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response

from audit.actions import get_action
from audit.checkpoints import AuditIntegrityError
from audit.conf import audit_trusted_keys
from audit.export import OUTPUTS
from audit.models import AuditCheckpoint, AuditEvent
from audit.proofs import gap_nodes
from audit.selectors import AuditFilters, audit_event_list
from compliance.access import AuditVisibility, audit_filters_for, audit_visibility_for
from compliance.exports import audit_export_response
from compliance.services import audit_checkpoint_publish
from kernel.api.base import DB_INT_MAX, IdField
from kernel.api.openapi import errors
from kernel.api.pagination import Pagination
from kernel.api.views import ApiView
from kernel.errors import ApplicationError, NotAllowed

_T = TypeVar("_T")


class AuditUnavailable(ApplicationError):
    """No checkpoint can be signed: the log failed its own check (page someone), or no key is set."""

    status = 503
    code = "audit_unavailable"


def _checkpoint_or_503(signing: Callable[[], _T]) -> _T:
    """``signing()``, which needs a checkpoint signed; 503 when none can be."""
    try:
        return signing()
    except AuditIntegrityError as error:
        raise AuditUnavailable(f"The audit log failed verification; no checkpoint was signed: {error}") from None
    except ImproperlyConfigured as error:
        raise AuditUnavailable(f"Audit checkpoints cannot be signed: {error}") from None


class FilterSerializer(serializers.Serializer[Any]):
    start = serializers.DateTimeField(required=False, help_text="events at or after this time")
    end = serializers.DateTimeField(required=False, help_text="events before this time")
    department = IdField(required=False, help_text="a department and its subtree")
    actor = serializers.CharField(required=False, max_length=150, help_text="username of the actor")
    action = serializers.CharField(required=False, max_length=64, help_text="action code, e.g. allocation.approved")

    def validate_action(self, value: str) -> str:
        try:
            get_action(value)
        except ValueError as error:
            raise serializers.ValidationError(str(error)) from None
        return value

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if "start" in attrs and "end" in attrs and attrs["start"] >= attrs["end"]:
            raise serializers.ValidationError({"end": ["end must be after start."]})
        return attrs


def _visible(request: Request) -> AuditVisibility:
    visibility = audit_visibility_for(user=request.user)
    if not visibility.any:
        raise Http404("No audit events are visible to you.")
    return visibility


def _filters(request: Request, serializer_class: type[FilterSerializer] = FilterSerializer) -> tuple[AuditFilters, dict[str, Any]]:
    visibility = _visible(request)
    serializer = serializer_class(data=request.query_params)
    serializer.is_valid(raise_exception=True)
    data = dict(serializer.validated_data)
    filters = audit_filters_for(
        visibility=visibility, department_id=data.get("department"), time_from=data.get("start"),
        time_to=data.get("end"), actor=data.get("actor"), action=data.get("action"),
    )
    return filters, data


class AuditEventListApi(ApiView):
    pagination_class = Pagination  # the schema's list shape (paginated() pages with it)

    @extend_schema_serializer(component_name="AuditEvent")
    class OutputSerializer(serializers.Serializer[AuditEvent]):
        seq = serializers.IntegerField()
        occurred_at = serializers.DateTimeField()
        actor_id = serializers.IntegerField(allow_null=True)
        actor_username = serializers.CharField()
        action = serializers.CharField()
        target_type = serializers.CharField()
        target_id = serializers.CharField()
        department_id = serializers.IntegerField(allow_null=True)
        department_seq = serializers.IntegerField(allow_null=True)
        outcome = serializers.CharField()
        before = serializers.DictField()
        after = serializers.DictField()
        details = serializers.DictField()
        request_id = serializers.CharField()
        source_ip = serializers.CharField(allow_null=True)
        user_agent = serializers.CharField()
        prev_hash = serializers.CharField()
        hash = serializers.CharField()

    @extend_schema(parameters=[FilterSerializer], responses={200: OutputSerializer(many=True), **errors(400, 401, 404)})
    def get(self, request: Request) -> Response:
        filters, _ = _filters(request)
        paginator = Pagination()
        page = paginator.paginate_queryset(audit_event_list(filters=filters), request, view=self)
        return paginator.get_paginated_response(self.OutputSerializer(cast(Any, page), many=True).data)


class _JsonErrors(BaseContentNegotiation):
    """Whatever the client accepts: the stream sets its own type, and errors are JSON."""

    def select_renderer(self, request: Any, renderers: Any, format_suffix: Any = None) -> tuple[BaseRenderer, str]:
        return JSONRenderer(), JSONRenderer.media_type

    def select_parser(self, request: Any, parsers: Any) -> Any:
        return parsers[0] if parsers else None


class AuditExportApi(ApiView):
    content_negotiation_class = _JsonErrors
    renderer_classes = [JSONRenderer]

    class FilterSerializer(FilterSerializer):
        output = serializers.ChoiceField(choices=OUTPUTS, default="jsonl")

    @extend_schema(
        parameters=[FilterSerializer],
        responses={(200, "application/x-ndjson"): OpenApiResponse(OpenApiTypes.STR, description="JSON Lines or bundle"),
                   (200, "text/csv"): OpenApiResponse(OpenApiTypes.STR, description="CSV"),
                   **errors(400, 401, 404, 503)},
    )
    def get(self, request: Request) -> StreamingHttpResponse:
        filters, data = _filters(request, self.FilterSerializer)
        return _checkpoint_or_503(lambda: audit_export_response(
            actor=request.user, filters=filters, output=data["output"], department_id=data.get("department"),
        ))


@extend_schema_serializer(component_name="AuditCheckpoint")
class _CheckpointOutput(serializers.Serializer[AuditCheckpoint]):
    number = serializers.IntegerField()
    size = serializers.IntegerField()
    root_hash = serializers.CharField(source="root")
    created_at = serializers.DateTimeField()
    note = serializers.CharField()


class AuditCheckpointLatestApi(ApiView):
    OutputSerializer = _CheckpointOutput

    @extend_schema(responses={200: _CheckpointOutput, **errors(401, 404)})
    def get(self, request: Request) -> Response:
        _visible(request)
        latest = AuditCheckpoint.objects.order_by("-number").first()
        if latest is None:
            raise Http404("No checkpoint has been published yet.")
        return Response(self.OutputSerializer(latest).data)


class AuditCheckpointPublishApi(ApiView):
    OutputSerializer = _CheckpointOutput

    @extend_schema(request=None, responses={201: _CheckpointOutput, **errors(401, 403, 404, 503)})
    def post(self, request: Request) -> Response:
        if not _visible(request).everything:
            raise NotAllowed("Only auditors and platform admins may publish checkpoints.")
        checkpoint = _checkpoint_or_503(lambda: audit_checkpoint_publish(actor=request.user))
        return Response(self.OutputSerializer(checkpoint).data, status=201)


class AuditCheckpointConsistencyApi(ApiView):
    """A consistency proof between two tree sizes, in compact-range form: the subtrees covering
    events ``first + 1 .. second``, left to right. Appended to the tree of a checkpoint of
    ``first`` events they fold to the root of one of ``second`` events exactly when the newer
    tree extends the older. Not signed, and need not be: a verifier believes it only when it
    reproduces the signed root (``gpuportal audit verify`` uses it)."""

    @extend_schema_serializer(component_name="AuditConsistencyQuery")
    class InputSerializer(serializers.Serializer[Any]):
        first = serializers.IntegerField(required=False, min_value=0, max_value=DB_INT_MAX,
                                         help_text="the older tree size (default 0)")
        second = serializers.IntegerField(
            required=False, min_value=0, max_value=DB_INT_MAX, help_text="the newer tree size (default: the latest checkpoint's)"
        )

    @extend_schema_serializer(component_name="AuditConsistencyProof")
    class OutputSerializer(serializers.Serializer[Any]):
        first = serializers.IntegerField()
        second = serializers.IntegerField()
        nodes = serializers.ListField(child=serializers.ListField(), help_text="[start leaf, level, hex hash]")

    @extend_schema(parameters=[InputSerializer], responses={200: OutputSerializer, **errors(400, 401, 404)})
    def get(self, request: Request) -> Response:
        _visible(request)
        serializer = self.InputSerializer(data=request.query_params)
        serializer.is_valid(raise_exception=True)
        latest = AuditCheckpoint.objects.order_by("-number").first()
        if latest is None:
            raise Http404("No checkpoint has been published yet.")
        first, second = serializer.validated_data.get("first", 0), serializer.validated_data.get("second", latest.size)
        if second > latest.size:
            raise serializers.ValidationError({"second": [f"Beyond the latest checkpoint's {latest.size} events."]})
        if first > second:
            raise serializers.ValidationError({"first": ["Must not be larger than second."]})
        nodes, start = [], first
        for level, hash_ in gap_nodes(first, second):
            nodes.append([start, level, hash_.hex()])
            start += 1 << level
        return Response({"first": first, "second": second, "nodes": nodes})


class AuditKeysApi(ApiView):
    """The verifier keys for checkpoints. Check them against a copy obtained out of band: a
    compromised server could serve its own."""

    @extend_schema_serializer(component_name="AuditVerifierKeys")
    class OutputSerializer(serializers.Serializer[Any]):
        keys = serializers.ListField(child=serializers.CharField())

    @extend_schema(responses={200: OutputSerializer, **errors(401, 404)})
    def get(self, request: Request) -> Response:
        _visible(request)
        return Response({"keys": [key.vkey() for key in audit_trusted_keys()]})
