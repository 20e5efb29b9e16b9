"""Routes of the notifications API; ``gpuportal.api_urls`` mounts them at ``/api/v1/``."""

from __future__ import annotations

from django.urls import URLPattern, URLResolver, path

from notifications import apis

urlpatterns: list[URLPattern | URLResolver] = [
    path("departments/<int:department_id>/webhooks/", apis.DepartmentWebhookListApi.as_view(),
         name="api-department-webhooks"),
    path("webhooks/<int:webhook_id>/", apis.WebhookDetailApi.as_view(), name="api-webhook"),
    path("me/notification-preferences/", apis.PreferencesApi.as_view(), name="api-notification-preferences"),
    path("notification-deliveries/", apis.DeliveryListApi.as_view(), name="api-notification-deliveries"),
]
