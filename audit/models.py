"""The audit log tables. Append-only: triggers refuse UPDATE, DELETE and TRUNCATE, and on
PostgreSQL the application's role may only INSERT and SELECT (see ``audit.schema``, ``audit.grants``).

The tables are created by hand-written DDL in the migrations (``managed = False``), so Django's
``flush`` (and with it the test runner's) never touches them: nothing in the application can empty
the log.

``AuditEvent.record`` holds the canonical serialisation that is hashed, exported and verified; the
other columns are copies of its fields for filtering (``audit_verify`` checks that they agree).
``AuditQuarantine`` and ``AuditQuarantinedEvent`` keep what a recovery moved out of the chain.
"""

from __future__ import annotations

import json
from typing import Any, cast

from django.db import models
from django.db.models.query_utils import DeferredAttribute


class Outcome(models.TextChoices):
    SUCCESS = "success", "Success"
    DENIED = "denied", "Denied"
    FAILURE = "failure", "Failure"


class AuditEvent(models.Model):
    seq = models.BigIntegerField(primary_key=True)
    occurred_at = models.DateTimeField()
    actor_id = models.BigIntegerField(null=True, blank=True)
    actor_username = models.CharField(max_length=150, blank=True)
    action = models.CharField(max_length=64)
    target_type = models.CharField(max_length=64, blank=True)
    target_id = models.CharField(max_length=64, blank=True)
    department_id = models.BigIntegerField(null=True, blank=True)
    department_seq = models.BigIntegerField(null=True, blank=True)
    outcome = models.CharField(max_length=16, choices=Outcome.choices, default=Outcome.SUCCESS)
    request_id = models.CharField(max_length=64, blank=True)
    hash = models.CharField(max_length=64)
    record = models.TextField()

    class Meta:
        managed = False
        db_table = "audit_event"
        ordering = ["seq"]

    def __str__(self) -> str:
        return f"{self.seq} {self.action} by {self.actor_username or '-'}"

    def __getstate__(self) -> dict[str, Any]:
        link = self.__dict__.get("_link")
        if link is not None:  # copied or pickled: its chain step is sent first (audit.linking)
            link()
        return super().__getstate__()

    @property
    def payload(self) -> dict[str, Any]:
        cached: dict[str, Any] | None = getattr(self, "_payload", None)
        if cached is None:
            cached = json.loads(self.record)
            self._payload = cached
        return cached

    @property
    def before(self) -> dict[str, Any]:
        value: dict[str, Any] = self.payload["before"]
        return value

    @property
    def after(self) -> dict[str, Any]:
        value: dict[str, Any] = self.payload["after"]
        return value

    @property
    def details(self) -> dict[str, Any]:
        value: dict[str, Any] = self.payload["details"]
        return value

    @property
    def source_ip(self) -> str | None:
        value: str | None = self.payload["source_ip"]
        return value

    @property
    def user_agent(self) -> str:
        return str(self.payload["user_agent"])

    @property
    def prev_hash(self) -> str:
        return str(self.payload["prev_hash"])


# The fields the chain step assigns (``audit.linking``): until it has run, they are missing from a
# new event's ``__dict__``, and reading one sends the step first.
CHAIN_FIELDS = ("seq", "occurred_at", "department_seq", "hash", "record")


class _ChainField(DeferredAttribute):
    def __get__(self, instance: Any, cls: Any = None) -> Any:
        if instance is not None and self.field.attname not in instance.__dict__:
            link = instance.__dict__.get("_link")
            if link is not None:
                link()
        return super().__get__(instance, cls)


for _name in CHAIN_FIELDS:
    setattr(AuditEvent, _name, _ChainField(cast("models.Field[Any, Any]", AuditEvent._meta.get_field(_name))))


class AuditCheckpoint(models.Model):
    """A signed checkpoint, also written to the external checkpoint folder. ``frontier`` (the
    compact range) and ``departments`` (the department heads, stored when they changed) let the
    next checkpoint resume without replaying the log; both are checked against the signed roots."""

    number = models.BigIntegerField(primary_key=True)
    size = models.BigIntegerField()
    root = models.CharField(max_length=64)
    created_at = models.DateTimeField()
    note = models.TextField()
    frontier = models.TextField()
    departments = models.TextField(blank=True)  # empty: unchanged since the previous checkpoint

    class Meta:
        managed = False
        db_table = "audit_checkpoint"
        ordering = ["number"]

    def __str__(self) -> str:
        return f"checkpoint #{self.number} (size {self.size})"


class AuditMerkleNode(models.Model):
    """Roots of the aligned perfect subtrees at levels 8, 16, 24, ... (256, 65536, ... events),
    saved while checkpoints are computed, so that export proofs never rehash the whole log."""

    pk = models.CompositePrimaryKey("level", "position")
    level = models.SmallIntegerField()
    position = models.BigIntegerField()
    hash = models.CharField(max_length=64)

    class Meta:
        managed = False
        db_table = "audit_merkle_node"

    def __str__(self) -> str:
        return f"level {self.level} subtree {self.position}"


class AuditQuarantine(models.Model):
    """One recovery (``manage.py audit_recover``): rows ``from_seq..to_seq`` that no checkpoint
    covered were moved out of the chain, because the first of them did not verify. Written by the
    owner only; the application's role has no privilege on this table."""

    id = models.BigIntegerField(primary_key=True)
    created_at = models.DateTimeField()
    from_seq = models.BigIntegerField()
    to_seq = models.BigIntegerField()
    event_count = models.BigIntegerField()
    digest = models.CharField(max_length=64)  # audit.integrity.quarantine.quarantine_digest of the rows
    checkpoint_number = models.BigIntegerField()  # the latest checkpoint then (0: none), which covers none of them
    checkpoint_size = models.BigIntegerField()
    anchor_hash = models.CharField(max_length=64)  # hash of seq from_seq - 1, on which the chain resumed
    failure_kind = models.CharField(max_length=32)
    failure_seq = models.BigIntegerField(null=True, blank=True)
    failure_message = models.TextField()
    reason = models.TextField()
    operator = models.CharField(max_length=150)

    class Meta:
        managed = False
        db_table = "audit_quarantine"
        ordering = ["id"]

    def __str__(self) -> str:
        return f"quarantine #{self.id} (seqs {self.from_seq}..{self.to_seq})"


class AuditQuarantinedEvent(models.Model):
    """A row moved out of ``audit_event`` by a quarantine, every column as it was."""

    pk = models.CompositePrimaryKey("quarantine_id", "seq")
    quarantine_id = models.BigIntegerField()
    seq = models.BigIntegerField()
    occurred_at = models.DateTimeField()
    actor_id = models.BigIntegerField(null=True, blank=True)
    actor_username = models.CharField(max_length=150, blank=True)
    action = models.CharField(max_length=64)
    target_type = models.CharField(max_length=64, blank=True)
    target_id = models.CharField(max_length=64, blank=True)
    department_id = models.BigIntegerField(null=True, blank=True)
    department_seq = models.BigIntegerField(null=True, blank=True)
    outcome = models.CharField(max_length=16)
    request_id = models.CharField(max_length=64, blank=True)
    hash = models.CharField(max_length=64)
    record = models.TextField()

    class Meta:
        managed = False
        db_table = "audit_quarantined_event"
        ordering = ["quarantine_id", "seq"]

    def __str__(self) -> str:
        return f"quarantine #{self.quarantine_id} seq {self.seq}"
