"""The GPU inventory: clusters, their nodes and each node's GPUs."""

from __future__ import annotations

from django.db import models

from tenants.models import NAMESPACE_SLUG_VALIDATOR


class ClusterDriverKind(models.TextChoices):
    MANIFESTS = "manifests", "Manifests folder (GitOps / embedded default)"
    KUBERNETES = "kubernetes", "Kubernetes API (server-side apply)"


class Cluster(models.Model):
    name = models.CharField(max_length=63, unique=True, validators=[NAMESPACE_SLUG_VALIDATOR])
    display_name = models.CharField(max_length=200, blank=True)
    driver = models.CharField(max_length=16, choices=ClusterDriverKind.choices, default=ClusterDriverKind.MANIFESTS)
    is_active = models.BooleanField(default=True)
    last_sync_at = models.DateTimeField(null=True, blank=True)
    last_sync_error = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class Node(models.Model):
    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="nodes")
    name = models.CharField(max_length=253)
    cpu_millicores = models.PositiveIntegerField(default=0)
    memory_mib = models.PositiveBigIntegerField(default=0)
    labels = models.JSONField(default=dict, blank=True)
    is_schedulable = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["cluster__name", "name"]
        constraints = [models.UniqueConstraint(fields=["cluster", "name"], name="node_unique_name_per_cluster")]

    def __str__(self) -> str:
        return f"{self.cluster}/{self.name}"


class Gpu(models.Model):
    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="gpus")
    index = models.PositiveSmallIntegerField()
    model = models.CharField(max_length=100)
    memory_mib = models.PositiveIntegerField()
    mig_capable = models.BooleanField(default=False)
    uuid = models.CharField(max_length=64, blank=True)

    class Meta:
        ordering = ["node__cluster__name", "node__name", "index"]
        constraints = [models.UniqueConstraint(fields=["node", "index"], name="gpu_unique_index_per_node")]

    def __str__(self) -> str:
        return f"{self.node}/gpu{self.index} {self.model}"
