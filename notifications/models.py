"""The outbox of notifications and what delivers it (docs/notifications.md).

A :class:`Notification` is written in the transaction of the state change it tells about, with the
people it is for as they were at that moment; one :class:`Delivery` row per channel (an e-mail to
one person, one webhook) is what a worker claims, sends and marks. ``(notification, channel)`` is
unique, so a task that runs twice, or a hundred times, finds the row already sent.

The references from the outbox to users, departments and webhooks are not database constraints
(``db_constraint=False``; Django still applies ``on_delete``): PostgreSQL checks a foreign key at
COMMIT by locking the row it points to, which would come after the audit chain lock that every
service takes last (``kernel.locks``), and a notification must never make a state change wait.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models

from tenants.models import Department


class Mode(models.TextChoices):
    IMMEDIATE = "immediate", "At once"
    DIGEST = "digest", "In the daily digest"
    OFF = "off", "Off"


class DeliveryState(models.TextChoices):
    PENDING = "pending", "Waiting to be sent"
    SENT = "sent", "Sent"
    FAILED = "failed", "Failed after its last attempt"
    SKIPPED = "skipped", "Not sent (no address, turned off, webhook removed)"
    DIGESTED = "digested", "Sent in a digest"


class WebhookFormat(models.TextChoices):
    JSON = "json", "Generic JSON, signed with HMAC-SHA256"
    SLACK = "slack", "Slack incoming webhook"
    MATTERMOST = "mattermost", "Mattermost incoming webhook"


class Notification(models.Model):
    event = models.CharField(max_length=64)
    department = models.ForeignKey(
        Department, null=True, blank=True, on_delete=models.SET_NULL, db_constraint=False, related_name="+"
    )
    recipients = models.JSONField(default=list, help_text="The ids of the users it is for, as at the event.")
    subject = models.CharField(max_length=64, blank=True, help_text="What it is about, e.g. allocation:12.")
    payload = models.JSONField(default=dict, help_text="What the messages say; never a secret.")
    dedupe_key = models.CharField(max_length=200, null=True, blank=True, unique=True,
                                  help_text="Set for events that must never be sent twice (an expiry threshold).")
    created_at = models.DateTimeField(auto_now_add=True)
    fanned_out_at = models.DateTimeField(null=True, blank=True, help_text="When its deliveries were written.")

    class Meta:
        ordering = ["-id"]
        indexes = [models.Index(fields=["fanned_out_at", "created_at"])]

    def __str__(self) -> str:
        return f"#{self.pk} {self.event} {self.subject}"


class Webhook(models.Model):
    """A department's webhook (``department`` set); the platform-wide one is a setting."""

    department = models.ForeignKey(Department, on_delete=models.CASCADE, related_name="webhooks")
    name = models.CharField(max_length=100)
    url_encrypted = models.BinaryField(help_text="The URL, encrypted at rest (it may carry a token).")
    url_host = models.CharField(max_length=255, help_text="The URL's host, the only part ever shown.")
    secret_encrypted = models.BinaryField(help_text="The HMAC key of the json format, encrypted at rest.")
    format = models.CharField(max_length=16, choices=WebhookFormat.choices, default=WebhookFormat.JSON)
    events = models.JSONField(default=list, help_text="The event codes it receives; empty: all of them.")
    is_active = models.BooleanField(default=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                   related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["id"]

    def __str__(self) -> str:
        return f"{self.name} ({self.url_host})"


class Delivery(models.Model):
    notification = models.ForeignKey(Notification, on_delete=models.CASCADE, related_name="deliveries")
    channel = models.CharField(max_length=64, help_text="email:<user id>, webhook:<id> or webhook:platform.")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.CASCADE,
                             db_constraint=False, related_name="+")
    webhook = models.ForeignKey(Webhook, null=True, blank=True, on_delete=models.SET_NULL, db_constraint=False,
                                related_name="+")
    mode = models.CharField(max_length=16, choices=Mode.choices, default=Mode.IMMEDIATE)
    state = models.CharField(max_length=16, choices=DeliveryState.choices, default=DeliveryState.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    available_at = models.DateTimeField()
    claimed_until = models.DateTimeField(null=True, blank=True)
    last_error = models.TextField(blank=True, max_length=1000)
    sent_at = models.DateTimeField(null=True, blank=True)
    digest = models.ForeignKey(Notification, null=True, blank=True, on_delete=models.SET_NULL, related_name="digested")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["id"]
        constraints = [models.UniqueConstraint(fields=["notification", "channel"], name="delivery_once_per_channel")]
        indexes = [models.Index(fields=["state", "available_at"]), models.Index(fields=["state", "mode", "user"])]

    def __str__(self) -> str:
        return f"#{self.pk} {self.channel} {self.state}"


class Preference(models.Model):
    """A person's choice for one event; without a row, the event comes at once."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="notification_preferences")
    event = models.CharField(max_length=64)
    mode = models.CharField(max_length=16, choices=Mode.choices)

    class Meta:
        ordering = ["user", "event"]
        constraints = [models.UniqueConstraint(fields=["user", "event"], name="preference_one_per_event")]

    def __str__(self) -> str:
        return f"{self.user} {self.event}: {self.mode}"
