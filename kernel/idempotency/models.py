"""One row per ``Idempotency-Key`` a user sent with a POST: the request it stands for, and once it
succeeded, the answer it is replayed with (``kernel.idempotency.store``)."""

from __future__ import annotations

from django.conf import settings
from django.db import models

KEY_MAX_LENGTH = 255


class KeyState(models.TextChoices):
    IN_PROGRESS = "in_progress", "in progress"
    DONE = "done", "done"


class IdempotencyKey(models.Model):
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    key = models.CharField(max_length=KEY_MAX_LENGTH)
    fingerprint = models.CharField(max_length=64, help_text="SHA-256 of the method, the path with its query and the body.")
    method = models.CharField(max_length=8)
    path = models.CharField(max_length=2000)
    state = models.CharField(max_length=16, choices=KeyState.choices, default=KeyState.IN_PROGRESS)
    claimed_at = models.DateTimeField(help_text="When the request that runs under the key began.")
    expires_at = models.DateTimeField(db_index=True, help_text="From then on the key is forgotten (and deleted).")
    status_code = models.PositiveSmallIntegerField(null=True, blank=True)
    content_type = models.CharField(max_length=200, blank=True)
    location = models.CharField(max_length=2000, blank=True)
    body = models.BinaryField(blank=True, default=b"")

    class Meta:
        constraints = [models.UniqueConstraint(fields=["user", "key"], name="idempotency_key_one_per_user")]

    def __str__(self) -> str:
        return f"{self.method} {self.path} ({self.state})"
