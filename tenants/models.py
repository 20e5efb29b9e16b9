"""Departments (a tree), memberships with roles, and projects (one namespace per cluster)."""

from __future__ import annotations

from django.conf import settings
from django.core.validators import RegexValidator
from django.db import models

from kernel.limits import TEXT_LIMIT
from tenants.roles import Role

# RFC 1123 label, as Kubernetes requires for namespace names.
NAMESPACE_SLUG_VALIDATOR = RegexValidator(
    regex=r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$",
    message="Must be a valid Kubernetes namespace name: at most 63 lowercase letters, digits or '-', "
    "starting and ending with a letter or digit.",
)
RESERVED_NAMESPACES = frozenset({"default", "kube-system", "kube-public", "kube-node-lease", "gpu-operator"})




class Isolation(models.TextChoices):
    """How a department's (or project's) units keep apart from everyone else's (docs/sharing.md)."""

    SHARED = "shared", "Shares GPUs and nodes with others"
    DEDICATED_GPUS = "dedicated-gpus", "Dedicated GPUs: never shares a GPU with another tenant"
    DEDICATED_NODES = "dedicated-nodes", "Dedicated nodes: never shares a node with another tenant"


class Department(models.Model):
    """A node of the organisation tree (organisation → department → team)."""

    slug = models.SlugField(max_length=63, unique=True, validators=[NAMESPACE_SLUG_VALIDATOR])
    name = models.CharField(max_length=200)
    parent = models.ForeignKey("self", null=True, blank=True, on_delete=models.PROTECT, related_name="children")
    isolation = models.CharField(
        max_length=16, choices=Isolation.choices, default=Isolation.SHARED,
        help_text="A dedicated department's units (its subtree's) never share a GPU, or a node, with another tenant's.",
    )
    created_at = models.DateTimeField(auto_now_add=True)
    # Moved forward by a database trigger whenever the parent changes (tenants.tree_stamp).
    tree_stamp = models.BigIntegerField(default=0, editable=False)

    class Meta:
        ordering = ["slug"]

    def __str__(self) -> str:
        return self.slug


class MembershipSource(models.TextChoices):
    MANUAL = "manual", "Granted in the portal"
    OIDC = "oidc", "From the OpenID Connect provider's groups"
    LDAP = "ldap", "From the LDAP directory's groups"


class Membership(models.Model):
    """A user's role in a department; the role applies to the department's whole subtree.

    ``source`` says who keeps it: a sign-in through a provider recomputes only that provider's
    memberships and never touches manual ones (tenants/identity_models.py).
    """

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships")
    department = models.ForeignKey(Department, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=32, choices=Role.choices)
    source = models.CharField(max_length=8, choices=MembershipSource.choices, default=MembershipSource.MANUAL)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["department__slug", "user__username"]
        constraints = [
            models.UniqueConstraint(fields=["user", "department", "role"], name="membership_unique_role"),
        ]

    def __str__(self) -> str:
        return f"{self.user} {self.role} @ {self.department}"


class Project(models.Model):
    """A research project of a department; it becomes one Kubernetes namespace per cluster."""

    slug = models.CharField(max_length=63, unique=True, validators=[NAMESPACE_SLUG_VALIDATOR])
    name = models.CharField(max_length=200)
    department = models.ForeignKey(Department, on_delete=models.PROTECT, related_name="projects")
    members = models.ManyToManyField(settings.AUTH_USER_MODEL, blank=True, related_name="projects")
    description = models.TextField(blank=True, max_length=TEXT_LIMIT)
    isolation = models.CharField(
        max_length=16, choices=Isolation.choices, default=Isolation.SHARED,
        help_text="A dedicated project's units never share a GPU, or a node, with any other project's.",
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["slug"]

    def __str__(self) -> str:
        return self.slug


from tenants.identity_models import (  # noqa: E402 - registered with this app; they refer to the models above
    ExternalGroupMapping,
    ExternalIdentity,
    IdentitySource,
    PersonalAccessToken,
    TokenScope,
)

__all__ = [
    "Department", "ExternalGroupMapping", "ExternalIdentity", "IdentitySource", "Isolation", "Membership",
    "MembershipSource", "PersonalAccessToken", "Project", "Role", "TokenScope",
]
