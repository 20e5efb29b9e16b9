"""Rate cards and statements under ``/api/v1/`` (docs/accounting.md)."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from django.http import HttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema, extend_schema_serializer
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response

from accounting import rate_cards, statement_reads, statements
from accounting.charges import month_bounds
from accounting.models import Basis, LineKind, RateCard, Statement, StatementLine
from accounting.statement_csv import statement_csv
from kernel.api.base import IdField, actor, filters, paginated, validated
from kernel.api.openapi import errors
from kernel.api.pagination import Pagination
from kernel.api.views import ApiView
from kernel.clock import clock_now
from tenants.access import require_platform_admin


def _period(value: str) -> None:
    try:
        month_bounds(value)
    except ValueError as error:
        raise serializers.ValidationError(str(error)) from None


@extend_schema_serializer(component_name="RateCard")
class RateCardOut(serializers.ModelSerializer[RateCard]):
    flavor_name = serializers.CharField(source="flavor.name", read_only=True)

    class Meta:
        model = RateCard
        fields = ["id", "flavor", "flavor_name", "price_per_gpu_hour", "currency", "basis", "valid_from", "valid_to",
                  "description", "created_at"]  # fmt: skip


class RateCardIn(serializers.Serializer[Any]):
    flavor = IdField()
    price_per_gpu_hour = serializers.DecimalField(max_digits=12, decimal_places=4, min_value=0)
    currency = serializers.RegexField(r"^[A-Z]{3}$", help_text="ISO 4217, e.g. EUR.")
    basis = serializers.ChoiceField(choices=Basis.choices, default=Basis.GRANTED)
    valid_from = serializers.DateTimeField()
    valid_to = serializers.DateTimeField(required=False, allow_null=True)
    description = serializers.CharField(required=False, allow_blank=True, max_length=200, default="")


class RateCardEndIn(serializers.Serializer[Any]):
    valid_to = serializers.DateTimeField()


class RateCardListApi(ApiView):
    pagination_class = Pagination
    ordering_fields = {"id": "id", "valid_from": "valid_from", "created_at": "created_at"}

    @extend_schema(responses={200: RateCardOut(many=True), **errors(401, 404)})
    def get(self, request: Request) -> Response:
        return paginated(view=self, request=request, queryset=statement_reads.rate_card_list(user=request.user),
                         serializer=RateCardOut)  # fmt: skip

    @extend_schema(request=RateCardIn, responses={201: RateCardOut, **errors(400, 401, 403, 404, 409)})
    def post(self, request: Request) -> Response:
        statement_reads.rate_card_list(user=request.user)  # 404 without a role
        require_platform_admin(request.user, to="set prices")
        data = validated(RateCardIn, request)
        card = rate_cards.rate_card_create(actor=actor(request), flavor_id=data.pop("flavor"), **data)
        return Response(RateCardOut(card).data, status=status.HTTP_201_CREATED)


class RateCardDetailApi(ApiView):
    @extend_schema(responses={200: RateCardOut, **errors(401, 404)})
    def get(self, request: Request, rate_card_id: int) -> Response:
        return Response(RateCardOut(statement_reads.rate_card_get(user=request.user, rate_card_id=rate_card_id)).data)


class RateCardEndApi(ApiView):
    @extend_schema(request=RateCardEndIn, responses={200: RateCardOut, **errors(400, 401, 403, 404)})
    def post(self, request: Request, rate_card_id: int) -> Response:
        statement_reads.rate_card_get(user=request.user, rate_card_id=rate_card_id)
        require_platform_admin(request.user, to="end rate cards")
        data = validated(RateCardEndIn, request)
        card = rate_cards.rate_card_end(actor=actor(request), rate_card_id=rate_card_id, valid_to=data["valid_to"])
        return Response(RateCardOut(card).data)


@extend_schema_serializer(component_name="StatementLine")
class LineOut(serializers.ModelSerializer[StatementLine]):
    project_slug = serializers.CharField(source="project.slug", read_only=True)
    flavor_name = serializers.CharField(source="flavor.name", read_only=True)

    class Meta:
        model = StatementLine
        fields = ["number", "kind", "project", "project_slug", "flavor", "flavor_name", "rate_card", "basis", "gpu_hours",
                  "rate", "amount", "reason", "created_at"]  # fmt: skip


@extend_schema_serializer(component_name="Statement")
class StatementOut(serializers.ModelSerializer[Statement]):
    department_slug = serializers.CharField(source="department.slug", read_only=True)
    period = serializers.SerializerMethodField(help_text="YYYY-MM")

    class Meta:
        model = Statement
        fields = ["id", "department", "department_slug", "period", "period_start", "period_end", "currency", "total",
                  "sha256", "closed_at"]  # fmt: skip

    def get_period(self, statement: Statement) -> str:
        return statements.month_of(statement.period_start)


@extend_schema_serializer(component_name="StatementDetail")
class StatementDetailOut(StatementOut):
    lines = LineOut(many=True, read_only=True)
    corrections_total = serializers.SerializerMethodField()
    balance = serializers.SerializerMethodField(help_text="total + corrections_total")

    class Meta(StatementOut.Meta):
        fields = [*StatementOut.Meta.fields, "corrections_total", "balance", "lines"]

    def get_corrections_total(self, statement: Statement) -> str:
        return str(_corrections(statement))

    def get_balance(self, statement: Statement) -> str:
        return str(statement.total + _corrections(statement))


def _corrections(statement: Statement) -> Decimal:
    """The correction lines' sum (the lines are prefetched with the statement)."""
    return sum((line.amount for line in statement.lines.all() if line.kind == LineKind.CORRECTION), Decimal(0))


class StatementListApi(ApiView):
    pagination_class = Pagination
    ordering_fields = {"id": "id", "period_start": "period_start", "closed_at": "closed_at", "total": "total"}

    class Filter(serializers.Serializer[Any]):
        department = IdField(required=False)
        period = serializers.CharField(required=False, validators=[_period], help_text="YYYY-MM")

    @extend_schema(parameters=[Filter], responses={200: StatementOut(many=True), **errors(400, 401, 404)})
    def get(self, request: Request) -> Response:
        params = filters(self.Filter, request)
        start = month_bounds(params["period"])[0] if "period" in params else None
        rows = statement_reads.statement_list(
            user=request.user, department_id=params.get("department"), period_start=start
        )
        return paginated(view=self, request=request, queryset=rows, serializer=StatementOut)


class StatementDetailApi(ApiView):
    @extend_schema(responses={200: StatementDetailOut, **errors(401, 403, 404)})
    def get(self, request: Request, statement_id: int) -> Response:
        statement = statement_reads.statement_get(user=request.user, statement_id=statement_id)
        return Response(StatementDetailOut(statement).data)


class StatementLinesCsvApi(ApiView):
    @extend_schema(responses={(200, "text/csv"): OpenApiResponse(OpenApiTypes.STR), **errors(401, 403, 404)})
    def get(self, request: Request, statement_id: int) -> HttpResponse:
        statement = statement_reads.statement_get(user=request.user, statement_id=statement_id)
        name = f"statement-{statement.department.slug}-{statements.month_of(statement.period_start)}-{statement.currency}.csv"
        response = HttpResponse(statement_csv(statement), content_type="text/csv; charset=utf-8")
        response["Content-Disposition"] = f'attachment; filename="{name}"'
        response["X-Statement-SHA256"] = statement.sha256
        return response


class CorrectionIn(serializers.Serializer[Any]):
    project = IdField()
    flavor = IdField()
    gpu_hours = serializers.DecimalField(max_digits=20, decimal_places=6, default=Decimal(0))
    amount = serializers.DecimalField(max_digits=20, decimal_places=2)
    reason = serializers.CharField(max_length=500)


class StatementCorrectApi(ApiView):
    @extend_schema(request=CorrectionIn, responses={201: LineOut, **errors(400, 401, 403, 404)})
    def post(self, request: Request, statement_id: int) -> Response:
        statement_reads.statement_get(user=request.user, statement_id=statement_id)
        require_platform_admin(request.user, to="correct statements")
        data = validated(CorrectionIn, request)
        line = statements.statement_correct(
            actor=actor(request), statement_id=statement_id, project_id=data["project"], flavor_id=data["flavor"],
            gpu_hours=data["gpu_hours"], amount=data["amount"], reason=data["reason"],
        )  # fmt: skip
        return Response(LineOut(line).data, status=status.HTTP_201_CREATED)


@extend_schema_serializer(component_name="DraftLine")
class DraftLineOut(serializers.Serializer[Any]):
    number = serializers.IntegerField()
    kind = serializers.ChoiceField(choices=[LineKind.CHARGE, LineKind.UNPRICED])
    project = serializers.CharField(help_text="The project's slug.")
    flavor = serializers.CharField(help_text="The flavor's name.")
    rate_card = serializers.IntegerField(allow_null=True)
    basis = serializers.ChoiceField(choices=Basis.choices)
    gpu_hours = serializers.DecimalField(max_digits=20, decimal_places=6)
    rate = serializers.DecimalField(max_digits=12, decimal_places=4)
    amount = serializers.DecimalField(max_digits=20, decimal_places=2)


@extend_schema_serializer(component_name="StatementDraftCurrency")
class DraftCurrencyOut(serializers.Serializer[Any]):
    currency = serializers.CharField()
    total = serializers.DecimalField(max_digits=20, decimal_places=2)
    lines = DraftLineOut(many=True)


@extend_schema_serializer(component_name="StatementDraft")
class DraftOut(serializers.Serializer[Any]):
    department = serializers.IntegerField()
    period = serializers.CharField(help_text="YYYY-MM")
    statements = DraftCurrencyOut(many=True, help_text="One per currency the month's hours are priced in.")


class StatementPreviewApi(ApiView):
    class Filter(serializers.Serializer[Any]):
        department = IdField()
        period = serializers.CharField(required=False, validators=[_period], help_text="YYYY-MM; default: this month")

    @extend_schema(parameters=[Filter], responses={200: DraftOut, **errors(400, 401, 403, 404)})
    def get(self, request: Request) -> Response:
        params = filters(self.Filter, request)
        statement_reads.department_charges_allowed(user=request.user, department_id=params["department"])
        period = params.get("period") or statements.month_of(clock_now())
        start, end = month_bounds(period)
        found = statements.department_charges(department_id=params["department"], start=start, end=end)
        drafts = [
            {"currency": currency, "total": str(charges.total), "lines": [line.canonical() for line in charges.lines]}
            for currency, charges in sorted(found.items())
        ]
        return Response({"department": params["department"], "period": period, "statements": drafts})
