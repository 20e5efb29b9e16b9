"""REST endpoints: a department's webhooks, the caller's notification preferences, and the
deliveries that failed (platform admins). Webhook URLs are answered redacted (scheme and host)."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from django.http import Http404
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response

from kernel.api.base import actor, filters, paginated, validated
from kernel.api.openapi import errors
from kernel.api.pagination import Pagination
from kernel.api.views import ApiView
from kernel.errors import NotAllowed
from kernel.sealing import Unreadable
from notifications import crypto, services
from notifications.events import EVENTS
from notifications.models import Delivery, DeliveryState, Mode, Webhook, WebhookFormat
from notifications.webhooks import url_blocked
from tenants.access import access_for, require_platform_admin
from tenants.selectors import department_get


class WebhookOut(serializers.ModelSerializer):  # type: ignore[type-arg]
    url = serializers.SerializerMethodField(help_text="Redacted: the scheme (https, or http) and host only.")
    host = serializers.CharField(source="url_host")
    refused = serializers.SerializerMethodField(
        help_text="Why its calls are refused as the settings stand (scheme, host or port off the allow-list, an address "
                  "not allowed), or null. A refused webhook stays stored; its deliveries fail with the reason.")  # fmt: skip

    class Meta:
        model = Webhook
        fields = ["id", "department_id", "name", "url", "host", "format", "events", "is_active", "refused", "created_at",
                  "updated_at"]  # fmt: skip

    def _url(self, hook: Webhook) -> str | None:
        try:
            return crypto.open_text(bytes(hook.url_encrypted))
        except Unreadable:  # no configured key opens it (its sends fail too)
            return None

    def get_url(self, hook: Webhook) -> str:
        # the scheme is stored only inside the encrypted URL (http where the allow-list says http://host)
        url = self._url(hook)
        scheme = (urlsplit(url).scheme if url else "") or "https"
        return f"{scheme}://{hook.url_host}/…"

    def get_refused(self, hook: Webhook) -> str | None:
        url = self._url(hook)
        return url_blocked(url) if url is not None else "Its URL cannot be decrypted with the configured keys."


class WebhookCreatedOut(WebhookOut):
    secret = serializers.SerializerMethodField(help_text="The HMAC-SHA256 key of the json format; shown this once.")

    class Meta(WebhookOut.Meta):
        fields = [*WebhookOut.Meta.fields, "secret"]

    def get_secret(self, hook: Webhook) -> str:
        return str(self.context["secret"])


EVENT_CHOICES = sorted(EVENTS)


class WebhookIn(serializers.Serializer):  # type: ignore[type-arg]
    name = serializers.CharField(max_length=100)
    url = serializers.URLField(max_length=2000, help_text="https:// (or http:// where the allow-list names the host so) on a host and port of GPUPORTAL_WEBHOOK_ALLOWED_HOSTS, at global addresses only unless GPUPORTAL_WEBHOOK_ALLOWED_NETWORKS names them.")
    format = serializers.ChoiceField(choices=WebhookFormat.choices, default=WebhookFormat.JSON)
    events = serializers.ListField(child=serializers.ChoiceField(choices=EVENT_CHOICES), required=False, default=list,
                                   help_text="The events it receives; empty: all of them.")  # fmt: skip


class WebhookPatchIn(WebhookIn):
    is_active = serializers.BooleanField(required=False)


def _readable(user: Any, department_id: int) -> None:
    """404 outside the caller's reach, 403 for a role that neither administers nor audits it."""
    department_get(user=user, department_id=department_id)
    access = access_for(user)
    if not (access.can_administer_department(department_id) or access.can_audit_department(department_id)):
        raise NotAllowed("Only the department's admins, its auditors and platform admins see its webhooks.")


class DepartmentWebhookListApi(ApiView):
    idempotency_replay = False  # the answer holds the signing secret: never kept, so no Idempotency-Key
    pagination_class = Pagination
    ordering_fields = {"id": "id", "name": "name", "created_at": "created_at"}

    @extend_schema(responses={200: WebhookOut(many=True), **errors(401, 403, 404)})
    def get(self, request: Request, department_id: int) -> Response:
        _readable(request.user, department_id)
        return paginated(view=self, request=request, queryset=Webhook.objects.filter(department_id=department_id),
                         serializer=WebhookOut)  # fmt: skip

    @extend_schema(request=WebhookIn, responses={201: WebhookCreatedOut, **errors(400, 401, 403, 404)},
                   description="Add a webhook; the answer holds its signing secret, shown this once.")
    def post(self, request: Request, department_id: int) -> Response:
        user = actor(request)
        department_get(user=user, department_id=department_id)
        if not access_for(user).can_administer_department(department_id):
            raise NotAllowed("Only the department's admins and platform admins may add webhooks.")
        hook, secret = services.webhook_create(actor=user, department_id=department_id, **validated(WebhookIn, request))
        return Response(WebhookCreatedOut(hook, context={"secret": secret}).data, status=status.HTTP_201_CREATED)


class WebhookDetailApi(ApiView):
    def _get(self, request: Request, webhook_id: int) -> Webhook:
        hook = Webhook.objects.filter(pk=webhook_id).first()
        if hook is None or not access_for(request.user).can_read_department(hook.department_id):
            raise Http404("No such webhook.")
        _readable(request.user, hook.department_id)
        return hook

    @extend_schema(responses={200: WebhookOut, **errors(401, 403, 404)})
    def get(self, request: Request, webhook_id: int) -> Response:
        return Response(WebhookOut(self._get(request, webhook_id)).data)

    @extend_schema(request=WebhookPatchIn, responses={200: WebhookOut, **errors(400, 401, 403, 404)})
    def patch(self, request: Request, webhook_id: int) -> Response:
        hook = self._get(request, webhook_id)
        user = actor(request)
        if not access_for(user).can_administer_department(hook.department_id):
            raise NotAllowed("Only the department's admins and platform admins may change its webhooks.")
        changes = validated(WebhookPatchIn, request, partial=True)
        return Response(WebhookOut(services.webhook_update(actor=user, webhook_id=hook.pk, **changes)).data)

    @extend_schema(responses={204: None, **errors(401, 403, 404)})
    def delete(self, request: Request, webhook_id: int) -> Response:
        hook = self._get(request, webhook_id)
        user = actor(request)
        if not access_for(user).can_administer_department(hook.department_id):
            raise NotAllowed("Only the department's admins and platform admins may remove its webhooks.")
        services.webhook_delete(actor=user, webhook_id=hook.pk)
        return Response(status=status.HTTP_204_NO_CONTENT)


PreferencesIn: type[serializers.Serializer[Any]] = type(
    "NotificationPreferences", (serializers.Serializer,), {
        code: serializers.ChoiceField(
            choices=Mode.choices, required=False,
            help_text=f"{event.label} (to {event.audience}).{' Cannot be off.' if event.mandatory else ''}",
        ) for code, event in EVENTS.items()
    },
)  # fmt: skip


def _flat(data: dict[str, Any], prefix: str = "") -> dict[str, str]:
    """DRF reads a dotted field name as a path: join the nested answer back into event codes."""
    flat: dict[str, str] = {}
    for key, value in data.items():
        if isinstance(value, dict):
            flat |= _flat(value, f"{prefix}{key}.")
        else:
            flat[f"{prefix}{key}"] = str(value)
    return flat


class PreferencesApi(ApiView):
    @extend_schema(responses={200: PreferencesIn, **errors(401)},
                   description="Each event's mode for the caller: immediate, digest or off.")
    def get(self, request: Request) -> Response:
        return Response(services.preferences_of(user=actor(request)))

    @extend_schema(request=PreferencesIn, responses={200: PreferencesIn, **errors(400, 401)},
                   description="Replace the caller's preferences: events left out come at once. "
                   "Approval events (allocation.submitted, allocation.decided) cannot be off.")
    def put(self, request: Request) -> Response:
        modes = _flat(validated(PreferencesIn, request))
        return Response(services.preferences_set(actor=actor(request), modes=modes))


class DeliveryOut(serializers.ModelSerializer):  # type: ignore[type-arg]
    event = serializers.CharField(source="notification.event")
    subject = serializers.CharField(source="notification.subject")

    class Meta:
        model = Delivery
        fields = ["id", "notification_id", "event", "subject", "channel", "mode", "state", "attempts", "last_error",
                  "available_at", "sent_at", "created_at"]  # fmt: skip


class DeliveryListApi(ApiView):
    pagination_class = Pagination
    ordering_fields = {"id": "id", "created_at": "created_at"}

    class Filter(serializers.Serializer):  # type: ignore[type-arg]
        state = serializers.ChoiceField(choices=DeliveryState.choices, required=False)

    @extend_schema(parameters=[Filter], responses={200: DeliveryOut(many=True), **errors(400, 401, 403)},
                   description="Deliveries of notifications (platform admins): ?state=failed lists what was given up.")
    def get(self, request: Request) -> Response:
        require_platform_admin(actor(request), to="read notification deliveries")
        params = filters(self.Filter, request)
        queryset = Delivery.objects.select_related("notification").order_by("-id")
        if "state" in params:
            queryset = queryset.filter(state=params["state"])
        return paginated(view=self, request=request, queryset=queryset, serializer=DeliveryOut)
