"""Reads: node tokens, what the agents observed, samples, and the planned MIG layout of a node.

Observed state follows the inventory's visibility (``clusters.selectors.node_list``: everyone
with a role), except what tells whose work runs where: the processes on a GPU (pids, pod UIDs,
containers) are shown only to those who read every department holding the GPU now (its live
reservations), and on a GPU no allocation holds, only to those who read every department (platform
admins, an auditor of the root). Node tokens are for platform admins only.
"""

from __future__ import annotations

import datetime
from collections import defaultdict
from typing import Any

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db import connection
from django.db.models import Prefetch, Q, QuerySet
from django.http import Http404

from allocations.catalogue.selectors import live_reservations_on
from clusters.models import Node
from clusters.selectors import node_list, sees_every_department
from delivery.node_configs import MIG_CONFIG_KEY_PREFIX, RenderError, mig_config_entries, mig_config_key
from delivery.selectors import node_plans
from telemetry import mig, tokens
from telemetry.ingest.sql import Columns
from telemetry.models import GpuSample, NodeToken, ObservedGpu, ObservedMigInstance
from tenants.access import access_for, require_platform_admin

_UNUSED_HASH = tokens.secret_hash("no-such-token")
_TOKEN = Columns(NodeToken, "t")


def node_token_find(*, text: str) -> NodeToken | None:
    """The token whose text this is (revoked or not), else None; the secret is compared in constant
    time, and an unknown key id costs the same hash and comparison as a known one."""
    parts = tokens.token_split(text)
    if parts is None:
        return None
    key_id, secret = parts
    token = _node_token_with_key_id(key_id)
    matches = tokens.secret_matches(secret, token.secret_hash if token is not None else _UNUSED_HASH)
    return token if token is not None and matches else None


def _node_token_with_key_id(key_id: str) -> NodeToken | None:
    """Raw SQL: every report of every node is authenticated with it (``sql.Columns``)."""
    quote = connection.ops.quote_name
    sql = f"SELECT {_TOKEN.select(connection)} FROM {quote(NodeToken._meta.db_table)} t WHERE t.{quote('key_id')} = %s"  # noqa: S608
    with connection.cursor() as cursor:
        cursor.execute(sql, [key_id])
        row = cursor.fetchone()
    return _TOKEN.instance(row, connection) if row is not None else None


def node_token_list(
    *, user: AbstractBaseUser | AnonymousUser, cluster_id: int | None = None, node_name: str | None = None,
    active: bool | None = None,
) -> QuerySet[NodeToken]:  # fmt: skip
    require_platform_admin(user, to="see node tokens")
    queryset = NodeToken.objects.select_related("cluster", "created_by", "revoked_by")
    if cluster_id is not None:
        queryset = queryset.filter(cluster_id=cluster_id)
    if node_name is not None:
        queryset = queryset.filter(node_name=node_name)
    if active is not None:
        queryset = queryset.filter(revoked_at__isnull=active)
    return queryset.order_by("cluster__name", "node_name", "-created_at", "-pk")


def node_token_get(*, user: AbstractBaseUser | AnonymousUser, token_id: int) -> NodeToken:
    try:
        return node_token_list(user=user).get(pk=token_id)
    except NodeToken.DoesNotExist:
        raise Http404("No such node token.") from None


def node_planned_mig(*, node: Node, gpu_model: str, memory_mib: int = 0) -> tuple[list[dict[str, Any]] | None, str]:
    """The node's planned mig-parted entries (None: unknown) and the MIG manager's state label.

    The plan is the config the ``nvidia.com/mig.config`` label names: one of the well-known
    configs (all-disabled, all-enabled, all-<profile>), or one the portal rendered
    (``gpuportal-<hash>``) when it is still the node's desired layout, i.e. what the placement
    engine booked on it; a label naming an older layout is unknown until the new one is pushed.
    """
    labels = node.labels or {}
    config = labels.get(mig.MIG_CONFIG_LABEL)
    state = str(labels.get(mig.MIG_CONFIG_STATE_LABEL, ""))
    if not config:
        return None, state
    if str(config).startswith(MIG_CONFIG_KEY_PREFIX):
        return _rendered_entries(node=node, key=str(config)), state
    return mig.entries_from_label(str(config), gpu_model=gpu_model, memory_mib=memory_mib), state


def _rendered_entries(*, node: Node, key: str) -> list[dict[str, Any]] | None:
    plans = node_plans(cluster=node.cluster, node_ids=[node.pk])
    if not plans or plans[0].sharing != "mig":
        return None
    try:
        entries = mig_config_entries(plans[0])
    except RenderError:
        return None
    return entries if mig_config_key(entries) == key else None


def telemetry_node_list(
    *,
    user: AbstractBaseUser | AnonymousUser,
    now: datetime.datetime,
    cluster_id: int | None = None,
    stale: bool | None = None,
    mig_mismatch: bool | None = None,
) -> QuerySet[Node]:
    """Visible nodes with their report state (``node.telemetry``, absent for a node never heard from)."""
    queryset = node_list(user=user, cluster_id=cluster_id).select_related("telemetry")
    if stale is not None:
        is_stale = Q(telemetry__isnull=True) | Q(telemetry__stale_at__isnull=True) | Q(telemetry__stale_at__lte=now)
        queryset = queryset.filter(is_stale if stale else ~is_stale)
    if mig_mismatch is not None:
        flagged = Q(telemetry__mig_mismatch=True) | Q(telemetry__mig_reset_pending=True)
        queryset = queryset.filter(flagged if mig_mismatch else ~flagged)
    return queryset


def present_gpus_prefetch() -> Prefetch[Any]:
    """Each node's present GPUs, in index order, as ``node.observed_gpus``."""
    queryset = ObservedGpu.objects.filter(is_present=True).order_by("index", "pk")
    return Prefetch("telemetry_gpus", queryset=queryset, to_attr="observed_gpus")


def telemetry_node_get(*, user: AbstractBaseUser | AnonymousUser, node_id: int) -> Node:
    """A visible node with its report state, observed GPUs (present first) and their MIG devices."""
    gpus = ObservedGpu.objects.order_by("-is_present", "index", "pk").prefetch_related(
        Prefetch("mig_instances", queryset=ObservedMigInstance.objects.order_by("slot"))
    )
    queryset = node_list(user=user).select_related("telemetry").prefetch_related(
        Prefetch("telemetry_gpus", queryset=gpus, to_attr="observed_gpus")
    )
    try:
        node = queryset.get(pk=node_id)
    except Node.DoesNotExist:
        raise Http404("No such node.") from None
    _hide_others_processes(user=user, node=node)
    return node


def _hide_others_processes(*, user: AbstractBaseUser | AnonymousUser, node: Node) -> None:
    """Blank (``None``) the processes of the node's observed GPUs that ``user`` may not see: a GPU
    held by a department outside the user's reach, or held by nobody (then only for those who read
    every department). The rows are read-only copies for the response; nothing is saved."""
    if sees_every_department(user=user):
        return
    readable = access_for(user).readable
    index_of = {gpu.pk: gpu.index for gpu in node.gpus.all()}  # the inventory's GPUs, prefetched by node_list
    holders: dict[int, set[int]] = defaultdict(set)
    booked = live_reservations_on(node_ids=[node.pk]).values_list("gpu_indices", "allocation__project__department_id")
    for indices, department_id in booked:
        for index in indices:
            holders[index].add(department_id)
    for observed in getattr(node, "observed_gpus", []):
        index = index_of.get(observed.gpu_id) if observed.gpu_id is not None else None
        held_by = holders.get(index, set()) if index is not None else set()
        if not held_by or not held_by <= readable:
            observed.processes = None


def observed_gpu_get(*, user: AbstractBaseUser | AnonymousUser, gpu_id: int) -> ObservedGpu:
    visible = node_list(user=user).values("pk")
    try:
        return ObservedGpu.objects.select_related("node").get(pk=gpu_id, node__in=visible)
    except ObservedGpu.DoesNotExist:
        raise Http404("No such GPU.") from None


def gpu_sample_list(
    *, gpu: ObservedGpu, tier: int, since: datetime.datetime, until: datetime.datetime
) -> QuerySet[GpuSample]:
    return GpuSample.objects.filter(gpu=gpu, tier=tier, at__gte=since, at__lt=until).order_by("at")


def observed_by_inventory_gpu(*, gpu_ids: list[int]) -> dict[int, ObservedGpu]:
    """The latest observation of each inventory GPU (for the GPU map): present ones only."""
    rows = ObservedGpu.objects.filter(gpu_id__in=gpu_ids, is_present=True).order_by("gpu_id", "-last_seen_at")
    latest: dict[int, ObservedGpu] = {}
    for row in rows:
        if row.gpu_id is not None:
            latest.setdefault(row.gpu_id, row)
    return latest
