"""REST endpoints for quota windows (``allocations.windows.services``) and for a quota's numbers over
time: ``/quota-windows/`` (list, create, read, approve, reject, cancel) and
``/quotas/{id}/effective/`` and ``/quotas/{id}/timeline/``.

As everywhere: the object must be visible first (404 otherwise; an invisible quota in a body is a
400 naming ``quota``), then the caller must hold the role the action needs (403), and only then is
the body read. Times in the query string are ISO 8601 with an offset, within five years of now.
"""

from __future__ import annotations

import datetime
import re
from decimal import Decimal
from typing import Any, cast

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_field
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response

from allocations.api.grants import DecisionIn
from allocations.api.rule_changes import EmergencyIn
from allocations.catalogue import selectors
from allocations.models import PriorityClass, Quota
from allocations.models.windows import EdgeKind, QuotaWindow, ShrinkPolicy, WindowKind, WindowState
from allocations.quotas.windows import PAGE_BUDGET, Effective
from allocations.windows import services as window_services
from allocations.windows.terms import WindowTerms
from kernel.api.base import IdField, ScopedRelatedField, actor, filters, paginated, target, validated
from kernel.api.openapi import errors
from kernel.api.pagination import Pagination
from kernel.api.views import ApiView
from kernel.clock import clock_now
from kernel.errors import FieldError, NotAllowed
from kernel.limits import TEXT_LIMIT
from tenants.access import access_for

DURATION = re.compile(r"^P(?=\d|T\d)(?:(\d{1,3})D)?(?:T(?=\d)(?:(\d{1,4})H)?(?:(\d{1,6})M)?)?$")
LONGEST_TIMELINE = datetime.timedelta(days=92)
DEFAULT_TIMELINE = datetime.timedelta(days=7)


def duration_text(minutes: int) -> str:
    """Minutes as an ISO 8601 duration: 720 → ``PT12H``, 1440 → ``P1D``, 1530 → ``P1DT1H30M``."""
    days, rest = divmod(minutes, 24 * 60)
    hours, mins = divmod(rest, 60)
    clock = (f"{hours}H" if hours else "") + (f"{mins}M" if mins else "")
    return "P" + (f"{days}D" if days else "") + (f"T{clock}" if clock else "")


@extend_schema_field({"type": "string", "pattern": DURATION.pattern, "example": "PT12H"})
class DurationField(serializers.Field):  # type: ignore[type-arg]
    """An ISO 8601 duration in days, hours and minutes (``PT12H``, ``P1D``, ``P1DT30M``), as minutes."""

    def to_internal_value(self, data: Any) -> int:
        found = DURATION.match(data) if isinstance(data, str) else None
        if found is None:
            raise serializers.ValidationError("An ISO 8601 duration such as PT12H or P1D is expected.")
        days, hours, minutes = (int(part or 0) for part in found.groups())
        total = days * 24 * 60 + hours * 60 + minutes
        if not 1 <= total <= window_services.MAX_DURATION_MINUTES:
            raise serializers.ValidationError("From one minute (PT1M) to 366 days (P366D).")
        return total

    def to_representation(self, value: int) -> str:
        return duration_text(value)


def _value(*, minimum: bool = False, help_text: str) -> serializers.DecimalField:
    extra: dict[str, Any] = {"min_value": Decimal(0)} if minimum else {}
    return serializers.DecimalField(
        max_digits=10, decimal_places=4, required=False, allow_null=True, default=None, help_text=help_text, **extra
    )


class WindowIn(EmergencyIn):
    quota = ScopedRelatedField(scope=lambda user: selectors.quota_list(user=user))
    kind = serializers.ChoiceField(choices=WindowKind.choices)
    begins_at = serializers.DateTimeField(
        help_text="Temporary: when it starts. Recurring: the first occurrence's start (DTSTART, whole minutes)."
    )
    ends_at = serializers.DateTimeField(
        required=False, allow_null=True, default=None,
        help_text="Temporary: when it ends (required, in the future). Recurring: no occurrence starts at or after it.",
    )
    rrule = serializers.CharField(
        max_length=500, required=False, allow_blank=True, default="",
        help_text="Recurring: one RFC 5545 RRULE, FREQ DAILY, WEEKLY, MONTHLY or YEARLY, e.g. "
        "FREQ=DAILY;BYHOUR=20;BYMINUTE=0 (UNTIL as a local time without Z). Bounded (docs/quotas.md, 'Bounds on a "
        "rule'; by default at most 200 characters, occurrences at least 60 minutes apart, at most 3000 edges in 366 "
        "days): a 400 naming rrule that states the bound otherwise.",
    )
    timezone = serializers.CharField(
        max_length=64, required=False, allow_blank=True, default="",
        help_text="Recurring: the IANA time zone its occurrences follow, e.g. Asia/Shanghai.",
    )
    duration = DurationField(
        required=False, allow_null=True, default=None,
        help_text="Recurring: how long each occurrence lasts (ISO 8601: PT12H, P1D), from 1 minute to 366 days.",
    )
    guaranteed_delta = _value(help_text="Added to the guarantee while in force (may be negative).")
    limit_delta = _value(help_text="Added to the limit while in force (may be negative).")
    guaranteed = _value(minimum=True, help_text="The guarantee while in force (instead of guaranteed_delta).")
    limit = _value(minimum=True, help_text="The limit while in force (instead of limit_delta).")
    priority_class = ScopedRelatedField(
        scope=lambda user: selectors.priority_class_list(user=user), required=False, allow_null=True, default=None,
        help_text="Change only this priority class's share of the department's quota.",
    )
    shrink_policy = serializers.ChoiceField(choices=ShrinkPolicy.choices, required=False, default=ShrinkPolicy.WAIT)
    justification = serializers.CharField(max_length=TEXT_LIMIT, required=False, allow_blank=True, default="")


class EdgeOut(serializers.Serializer):  # type: ignore[type-arg]
    at = serializers.DateTimeField()
    kind = serializers.ChoiceField(choices=EdgeKind.choices)


class WindowOut(serializers.ModelSerializer):  # type: ignore[type-arg]
    department = serializers.CharField(source="quota.department.slug", read_only=True)
    flavor = serializers.CharField(
        source="quota.flavor.name", read_only=True, allow_null=True, help_text="null: a quota of GPU-equivalents."
    )
    duration = serializers.SerializerMethodField(help_text="Recurring: each occurrence's length (ISO 8601).")
    requested_by = serializers.SlugRelatedField[Any](slug_field="username", read_only=True)
    decided_by = serializers.SlugRelatedField[Any](
        slug_field="username", read_only=True, allow_null=True,
        help_text="Who approved or rejected it (or cancelled it, when cancelled); null while pending.",
    )
    in_force_now = serializers.SerializerMethodField(help_text="Approved and in force at this moment.")
    next_edges = serializers.SerializerMethodField(
        help_text="The next three begins and ends from now (a pending window's: once approved); empty when "
        "rejected or cancelled."
    )

    class Meta:
        model = QuotaWindow
        fields = [
            "id", "quota", "department", "flavor", "priority_class", "kind", "state", "begins_at", "ends_at", "rrule",
            "timezone", "duration", "duration_minutes", "guaranteed_delta", "limit_delta", "guaranteed", "limit",
            "shrink_policy", "justification", "requested_by", "decided_by", "decided_at", "decision_comment",
            "created_at", "in_force_now", "next_edges",
        ]
        extra_kwargs = {
            "quota": {"help_text": "The id of the quota it changes."},
            "priority_class": {"help_text": "The id of the priority class whose share it changes; null: the whole quota."},
        }

    def _now(self) -> datetime.datetime:
        now: datetime.datetime = self.context.setdefault("now", clock_now())
        return now

    @extend_schema_field({"type": "string", "nullable": True, "example": "PT12H"})
    def get_duration(self, window: QuotaWindow) -> str | None:
        return duration_text(window.duration_minutes) if window.duration_minutes else None

    def get_in_force_now(self, window: QuotaWindow) -> bool:
        return window_services.window_in_force(window, self._now(), budget=PAGE_BUDGET)

    @extend_schema_field(EdgeOut(many=True))
    def get_next_edges(self, window: QuotaWindow) -> list[dict[str, Any]]:
        return [{"at": edge.at.isoformat(), "kind": edge.kind}
                for edge in window_services.window_next_edges(window, self._now())]


def _window_out(window: QuotaWindow) -> dict[str, Any]:
    fresh = QuotaWindow.objects.select_related(
        "quota__department", "quota__flavor", "priority_class", "requested_by", "decided_by"
    ).get(pk=window.pk)
    return dict(WindowOut(fresh).data)


class QuotaWindowListApi(ApiView):
    pagination_class = Pagination  # the schema's list shape (paginated() pages with it)
    ordering_fields = {"id": "id", "created_at": "created_at", "begins_at": "begins_at", "ends_at": "ends_at", "state": "state"}

    class Filter(serializers.Serializer):  # type: ignore[type-arg]
        quota = IdField(required=False)
        department = IdField(required=False)
        state = serializers.ChoiceField(choices=WindowState.choices, required=False)

    @extend_schema(
        parameters=[OpenApiParameter("quota", int), OpenApiParameter("department", int),
                    OpenApiParameter("state", str, enum=WindowState.values)],
        responses={200: WindowOut(many=True), **errors(400, 401, 404)},
        description="The windows of the quotas within the caller's reach, newest first.",
    )
    def get(self, request: Request) -> Response:
        params = filters(self.Filter, request)
        queryset = window_services.quota_window_list(
            user=request.user, quota_id=params.get("quota"), department_id=params.get("department"),
            state=params.get("state"),
        )
        return paginated(view=self, request=request, queryset=queryset, serializer=WindowOut,
                         context={"request": request, "now": clock_now()})

    @extend_schema(
        request=WindowIn, responses={201: WindowOut, **errors(400, 401, 403)},
        description="Ask for a window on a quota (an admin of its department or one above, or a platform admin: "
        "pending until a platform admin other than the requester approves it). With four-eyes off "
        "(`GPUPORTAL_FOUR_EYES=false`) a platform admin's window is in force at once (approved); with it on, only an "
        "emergency is: `emergency` with a `reason` (400 naming `reason` without one), audited and told to the other "
        "platform admins. Temporary: begins_at and "
        "ends_at. Recurring: rrule, timezone and duration. At least one of guaranteed_delta, limit_delta, guaranteed, "
        "limit; a field's delta or its absolute value, not both; whole units for a flavor's quota. Bad terms are a "
        "400 naming the field.",
    )
    def post(self, request: Request) -> Response:
        quota: Quota = target(WindowIn, request, "quota")
        if not access_for(request.user).can_administer_department(quota.department_id):
            raise NotAllowed("Only the department's admins and platform admins may ask for a quota window.")
        data = validated(WindowIn, request)
        priority_class: PriorityClass | None = data.pop("priority_class")
        quota_id = data.pop("quota").pk
        justification, emergency, reason = data.pop("justification"), data.pop("emergency"), data.pop("reason")
        terms = WindowTerms(duration_minutes=data.pop("duration"),
                            priority_class_id=priority_class.pk if priority_class else None, **data)
        window = window_services.quota_window_create(
            actor=actor(request), quota_id=quota_id, terms=terms, justification=justification, emergency=emergency,
            reason=reason,
        )
        return Response(_window_out(window), status=status.HTTP_201_CREATED)


class QuotaWindowDetailApi(ApiView):
    @extend_schema(responses={200: WindowOut, **errors(401, 404)})
    def get(self, request: Request, window_id: int) -> Response:
        window = window_services.quota_window_get(user=request.user, window_id=window_id)
        return Response(WindowOut(window).data)


DECIDE_RESPONSES = {200: WindowOut, **errors(400, 401, 403, 404, 409)}
FOUR_EYES = " Platform admins only, and never the window's requester (four-eyes: 403 `four_eyes`)."


def _decider(request: Request, window_id: int) -> None:
    window_services.quota_window_get(user=request.user, window_id=window_id)
    if not access_for(request.user).is_platform_admin:
        raise NotAllowed("Only platform admins decide on quota windows.")


class QuotaWindowApproveApi(ApiView):
    @extend_schema(
        request=DecisionIn, responses=DECIDE_RESPONSES,
        description="Approve a pending window (409 when it is not pending, or has ended)." + FOUR_EYES,
    )
    def post(self, request: Request, window_id: int) -> Response:
        _decider(request, window_id)
        data = validated(DecisionIn, request)
        return Response(_window_out(window_services.quota_window_approve(
            actor=actor(request), window_id=window_id, comment=data["comment"])))


class QuotaWindowRejectApi(ApiView):
    @extend_schema(
        request=DecisionIn, responses=DECIDE_RESPONSES,
        description="Reject a pending window; a rejection needs a comment (400 naming `comment`)." + FOUR_EYES,
    )
    def post(self, request: Request, window_id: int) -> Response:
        _decider(request, window_id)
        data = validated(DecisionIn, request)
        return Response(_window_out(window_services.quota_window_reject(
            actor=actor(request), window_id=window_id, comment=data["comment"])))


class QuotaWindowCancelApi(ApiView):
    @extend_schema(
        request=None, responses={200: WindowOut, **errors(401, 403, 404, 409)},
        description="Withdraw a pending window or end an approved one now (its requester or a platform admin).",
    )
    def post(self, request: Request, window_id: int) -> Response:
        window = window_services.quota_window_get(user=request.user, window_id=window_id)
        if window.requested_by_id != request.user.pk and not access_for(request.user).is_platform_admin:
            raise NotAllowed("Only the window's requester or a platform admin may cancel it.")
        return Response(_window_out(window_services.quota_window_cancel(actor=actor(request), window_id=window_id)))


# ---------------------------------------------------------------------- a quota over time


def _amount(**kwargs: Any) -> serializers.DecimalField:
    return serializers.DecimalField(max_digits=14, decimal_places=4, **kwargs)


class NumbersOut(serializers.Serializer):  # type: ignore[type-arg]
    guaranteed = _amount()
    limit = _amount()


class _InForce(serializers.Serializer):  # type: ignore[type-arg]
    guaranteed = _amount()
    limit = _amount()
    guaranteed_by = serializers.IntegerField(allow_null=True, help_text="The window whose guarantee holds; null: the base.")
    limit_by = serializers.IntegerField(allow_null=True, help_text="The window whose limit holds; null: the base.")
    windows = serializers.ListField(child=serializers.IntegerField(), help_text="The windows in force that apply.")


class EffectiveOut(_InForce):
    quota = serializers.IntegerField()
    at = serializers.DateTimeField()
    priority_class = serializers.IntegerField(allow_null=True, help_text="The class whose share was asked for.")
    base = NumbersOut(help_text="The quota's own numbers, without windows.")


class StepOut(_InForce):
    start = serializers.DateTimeField()
    end = serializers.DateTimeField()


class TimelineOut(serializers.Serializer):  # type: ignore[type-arg]
    quota = serializers.IntegerField()
    priority_class = serializers.IntegerField(allow_null=True)
    base = NumbersOut()
    steps = StepOut(many=True, help_text="Consecutive spans [start, end) with their numbers, from `from` to `to`.")


def _in_force(effective: Effective) -> dict[str, Any]:
    return {"guaranteed": effective.guaranteed, "limit": effective.limit, "guaranteed_by": effective.guaranteed_by,
            "limit_by": effective.limit_by, "windows": list(effective.in_force)}


AT_HELP = "ISO 8601 with an offset, within five years of now"
EffectiveFilter = cast(type[serializers.Serializer[Any]], type("EffectiveFilter", (serializers.Serializer,), {
    "at": serializers.DateTimeField(required=False), "priority_class": IdField(required=False),
}))
TimelineFilter = cast(type[serializers.Serializer[Any]], type("TimelineFilter", (serializers.Serializer,), {
    "from": serializers.DateTimeField(required=False), "to": serializers.DateTimeField(required=False),
    "priority_class": IdField(required=False),
}))
CLASS_PARAMETER = OpenApiParameter(
    "priority_class", int, description="The id of a priority class: its share (department-wide windows and its own)."
)


def _instant(params: dict[str, Any], name: str, default: datetime.datetime, now: datetime.datetime) -> datetime.datetime:
    if name not in params:
        return default
    moment: datetime.datetime = params[name]
    if not now - window_services.HORIZON <= moment <= now + window_services.HORIZON:
        raise FieldError(name, f"Must lie within {window_services.HORIZON.days} days of now.")
    return moment


def _priority_class(params: dict[str, Any]) -> int | None:
    found: int | None = params.get("priority_class")
    if found is not None and not PriorityClass.objects.filter(pk=found).exists():
        raise FieldError("priority_class", "No such priority class.")
    return found


def _base(quota: Quota) -> dict[str, Decimal]:
    return {"guaranteed": quota.guaranteed, "limit": quota.limit}


class QuotaEffectiveApi(ApiView):
    @extend_schema(
        parameters=[OpenApiParameter("at", OpenApiTypes.DATETIME, description=f"Default now; {AT_HELP}."),
                    CLASS_PARAMETER],
        responses={200: EffectiveOut, **errors(400, 401, 404)},
        description="The quota's numbers in force at `at` under its approved windows, and the windows that made "
        "them (precedence: temporary over recurring, the class's own over department-wide, the newest first; "
        "the guarantee never above the limit, neither below 0).",
    )
    def get(self, request: Request, quota_id: int) -> Response:
        quota = selectors.quota_get(user=request.user, quota_id=quota_id)
        params = filters(EffectiveFilter, request)
        now = clock_now()
        at = _instant(params, "at", now, now)
        class_id = _priority_class(params)
        effective = window_services.quota_effective(quota=quota, at=at, priority_class_id=class_id)
        body = {"quota": quota.pk, "at": at, "priority_class": class_id, "base": _base(quota), **_in_force(effective)}
        return Response(EffectiveOut(body).data)


class QuotaTimelineApi(ApiView):
    @extend_schema(
        parameters=[
            OpenApiParameter("from", OpenApiTypes.DATETIME, description=f"Default now; {AT_HELP}."),
            OpenApiParameter("to", OpenApiTypes.DATETIME,
                             description=f"Default `from` + 7 days; after `from`, at most 92 days after it; {AT_HELP}."),
            CLASS_PARAMETER,
        ],
        responses={200: TimelineOut, **errors(400, 401, 404)},
        description="The step function of the quota's numbers from `from` to `to` under its approved windows.",
    )
    def get(self, request: Request, quota_id: int) -> Response:
        quota = selectors.quota_get(user=request.user, quota_id=quota_id)
        params = filters(TimelineFilter, request)
        now = clock_now()
        start = _instant(params, "from", now, now)
        end = _instant(params, "to", start + DEFAULT_TIMELINE, now)
        if end <= start:
            raise FieldError("to", "Must be after `from`.")
        if end - start > LONGEST_TIMELINE:
            raise FieldError("to", f"At most {LONGEST_TIMELINE.days} days after `from`.")
        class_id = _priority_class(params)
        steps = window_services.quota_timeline(quota=quota, start=start, end=end, priority_class_id=class_id)
        body = {
            "quota": quota.pk, "priority_class": class_id, "base": _base(quota),
            "steps": [{"start": step.start, "end": step.end, **_in_force(step.effective)} for step in steps],
        }
        return Response(TimelineOut(body).data)
