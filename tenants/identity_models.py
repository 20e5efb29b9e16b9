"""Who a user is outside the portal, and which of their roles came from there (docs/identity.md).

- ``ExternalIdentity``: a user as an identity provider names them, keyed by (issuer, subject) and
  never by e-mail (an address can be reassigned; a subject cannot).
- ``ExternalGroupMapping``: a group of an identity provider (OIDC groups claim, LDAP group DN) that
  grants a role in a department. Platform admins edit the table.
- ``PersonalAccessToken``: an API token a user creates and revokes; only its SHA-256 is stored.

``Membership.source`` says where a role came from: a sign-in recomputes only the memberships of its
own source and leaves manually granted ones alone.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models

from tenants.roles import Role


class IdentitySource(models.TextChoices):
    OIDC = "oidc", "OpenID Connect"
    LDAP = "ldap", "LDAP directory"


class ExternalIdentity(models.Model):
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="external_identities")
    source = models.CharField(max_length=8, choices=IdentitySource.choices)
    issuer = models.CharField(max_length=500, help_text="The OIDC issuer URL, or the LDAP server URI.")
    subject = models.CharField(max_length=500, help_text="The OIDC `sub`, or the LDAP entry's DN.")
    created_at = models.DateTimeField(auto_now_add=True)
    last_login_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["issuer", "subject"], name="external_identity_unique_subject"),
        ]

    def __str__(self) -> str:
        return f"{self.user} ← {self.issuer}#{self.subject}"


class ExternalGroupMapping(models.Model):
    source = models.CharField(max_length=8, choices=IdentitySource.choices)
    external_group = models.CharField(
        max_length=500, help_text="The group as the provider names it: an OIDC groups-claim value or an LDAP group DN."
    )
    department = models.ForeignKey("tenants.Department", on_delete=models.CASCADE, related_name="group_mappings")
    role = models.CharField(max_length=32, choices=Role.choices)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["source", "external_group", "department__slug", "role"]
        constraints = [
            models.UniqueConstraint(
                fields=["source", "external_group", "department", "role"], name="group_mapping_unique"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.source}:{self.external_group} → {self.role} @ {self.department}"


class TokenScope(models.TextChoices):
    READ = "read", "Read only"
    WRITE = "write", "Read and write"


class PersonalAccessToken(models.Model):
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="access_tokens")
    name = models.CharField(max_length=100)
    prefix = models.CharField(max_length=16, unique=True, help_text="The token's first characters, shown to find it.")
    key_hash = models.CharField(max_length=64, unique=True, help_text="SHA-256 of the whole token, hex.")
    scope = models.CharField(max_length=8, choices=TokenScope.choices, default=TokenScope.READ)
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField()
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    issued_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="+",
        help_text="The platform admin who issued it for its owner; empty when the owner created it.",
    )
    claimed_at = models.DateTimeField(
        null=True, blank=True,
        help_text="When the owner took an issued token's text (until then it has none and works nowhere).",
    )
    issue_reason = models.CharField(max_length=500, blank=True, help_text="Why a platform admin issued it.")

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["user", "revoked_at"], name="pat_user_revoked")]

    def __str__(self) -> str:
        return f"{self.user} {self.prefix}… ({self.scope})"

    @property
    def pending(self) -> bool:
        """Issued by a platform admin and not yet claimed by its owner: no text exists yet."""
        return self.issued_by_id is not None and self.claimed_at is None
