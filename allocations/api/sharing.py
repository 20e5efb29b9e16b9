"""``GET /api/v1/sharing-modes/``: what each sharing mode is for and its caveats
(``allocations.catalogue.sharing_guide``), and the flavor fields that carry driver/CUDA minimums."""

from __future__ import annotations

from typing import Any

from django.core.validators import RegexValidator
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from allocations.catalogue.sharing_guide import guide_for, guides
from allocations.models.versions import (
    CUDA_VERSION_HELP,
    CUDA_VERSION_PATTERN,
    DRIVER_VERSION_HELP,
    DRIVER_VERSION_PATTERN,
)
from kernel.api.openapi import errors
from kernel.api.pagination import Pagination
from kernel.api.views import ApiView


class SharingModeOut(serializers.Serializer):  # type: ignore[type-arg]
    mode = serializers.CharField(help_text="A flavor's sharing_mode, or nvidia-vgpu (no flavor can have it).")
    name = serializers.CharField()
    managed = serializers.BooleanField(help_text="false: the portal cannot configure this mode (see unmanaged_reason).")
    purpose = serializers.CharField(help_text="What the mode is for.")
    memory_isolation = serializers.CharField()
    compute_isolation = serializers.CharField()
    failure_domain = serializers.CharField(help_text="What one workload's fault can take down.")
    requirements = serializers.ListField(child=serializers.CharField())
    caveats = serializers.ListField(child=serializers.CharField())
    unmanaged_reason = serializers.CharField(help_text="Why the portal cannot drive the mode (empty when it can).")


def guidance_of(mode: str) -> dict[str, Any] | None:
    guide = guide_for(mode)
    return guide.as_dict() if guide is not None else None


def min_driver_version_field() -> serializers.CharField:
    return serializers.CharField(
        max_length=32, required=False, allow_blank=True, default="",
        validators=[RegexValidator(DRIVER_VERSION_PATTERN, f"A driver version is {DRIVER_VERSION_HELP}.")],
        help_text="Lowest NVIDIA driver version a node must report to be offered this flavor (empty: none), "
        "e.g. 535.104.05.",
    )


def min_cuda_version_field() -> serializers.CharField:
    return serializers.CharField(
        max_length=16, required=False, allow_blank=True, default="",
        validators=[RegexValidator(CUDA_VERSION_PATTERN, f"A CUDA version is {CUDA_VERSION_HELP}.")],
        help_text="Lowest CUDA driver API version a node must report to be offered this flavor (empty: none), "
        "e.g. 12.2.",
    )


class SharingModeListApi(ApiView):
    pagination_class = Pagination  # the list shape of every list (seven entries: one page)

    @extend_schema(
        responses={200: SharingModeOut(many=True), **errors(401, 404)},
        description="Every sharing mode with what it is for, what it isolates and its caveats, including NVIDIA "
        "vGPU, which the portal lists but cannot configure (`managed: false`).",
    )
    def get(self, request: Request) -> Response:
        paginator = Pagination()
        rows = [guide.as_dict() for guide in guides()]
        page: list[dict[str, Any]] | None = paginator.paginate_queryset(rows, request, view=self)  # type: ignore[arg-type]
        return paginator.get_paginated_response(SharingModeOut(page or [], many=True).data)
