"""What approving a request would book now: the placement engine's dry run on each cluster
approval would try, in its order, with the policy approval uses.

Read without locks and nothing is stored: it describes the moment, and approval decides again
under its locks. Approval first books the allocations granted before GPU placement existed
(``reservations_adopt``); the dry run cannot, so on a cluster that still has such allocations it
may count their GPUs as free (``ClusterFit.pending_adoption`` says how many there are).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from django.db.models import Count, Exists, OuterRef, QuerySet

from allocations.booking.attempts import AttemptAsk, placement_attempt
from allocations.booking.kept_views import kept_exclusion
from allocations.booking.policy import placement_policy_for
from allocations.booking.reservations import placement_workload
from allocations.booking.state import ClusterState, cluster_state
from allocations.booking.tenancy import Exclusion, Tenant, tenant_of
from allocations.catalogue.selectors import holding_with_live_units
from allocations.catalogue.states import HOLDING_STATES
from allocations.models import Allocation, Flavor
from clusters.models import Cluster, Gpu
from kernel.reads import SharedReads
from tenants.models import Project


@dataclass(frozen=True)
class ClusterFit:
    """The engine's dry run of a request on one cluster."""

    cluster: str
    gpu_model: str
    requested: int  # units
    fits: bool  # every unit of the request found a place
    placed: int  # units of the request that found a place (all of them when it fits)
    free: int  # units of the flavor that would find a place now, one after another
    free_is_lower_bound: bool  # the count stopped at its limit: at least ``free``
    reason: str  # why the next unit finds no place (empty when it fits)
    kind: str  # the engine's rejection kind (empty when it fits)
    where: dict[str, list[str]]  # node name → GPUs the request's units would take ("gpu3", "gpu2@4")
    pending_adoption: int = 0  # holding allocations here not yet booked on GPUs

    @property
    def free_label(self) -> str:
        return f"{self.free}+" if self.free_is_lower_bound else str(self.free)

    @property
    def where_label(self) -> str:
        """``a100-0 gpu0, gpu1; a100-1 gpu5``."""
        return "; ".join(f"{node} {', '.join(gpus)}" for node, gpus in self.where.items())


def candidate_clusters(*, flavor: Flavor, cluster: Cluster | None) -> QuerySet[Cluster]:
    """The clusters approval considers, in the order it tries them: the one asked for, else every
    active cluster with a GPU of the flavor's model (primary-key order)."""
    if cluster is not None:
        return Cluster.objects.filter(pk=cluster.pk)
    having = Gpu.objects.filter(node__cluster=OuterRef("pk"), model=flavor.gpu_model)
    return Cluster.objects.filter(Exists(having), is_active=True).order_by("pk")


def _not_yet_booked(clusters: list[Cluster], states: dict[int, ClusterState]) -> dict[int, int]:
    """Per cluster, its holding allocations without any live reservation (what approval adopts
    first): none where every holding allocation holds a row the kept state knows."""
    counts = dict(
        Allocation.objects.filter(cluster_id__in=[cluster.pk for cluster in clusters], state__in=HOLDING_STATES)
        .values_list("cluster_id").annotate(count=Count("pk")).values_list("cluster_id", "count")
    )
    unsure = [cluster.pk for cluster in clusters if counts.get(cluster.pk, 0) != len(states[cluster.pk].allocations())]
    if not unsure:
        return {}
    legacy = (
        holding_with_live_units(cluster_ids=unsure)
        .filter(live_units=0)
        .values_list("cluster_id", flat=True)
    )
    return dict(Counter(cluster_id for cluster_id in legacy if cluster_id is not None))


def _state(cluster: Cluster) -> ClusterState:
    return cluster_state(cluster=cluster)


def preview_states(
    *, flavor: Flavor, cluster: Cluster | None, reads: SharedReads
) -> tuple[list[Cluster], dict[int, ClusterState]]:
    """The clusters approval would try for ``flavor``, and their kept placement states, read once
    per ``reads`` (a page's previews and outlooks share them)."""
    candidates = reads.once(("candidates", flavor.gpu_model, cluster.pk if cluster else None), _candidates,
                            flavor=flavor, cluster=cluster)
    return candidates, {candidate.pk: reads.once(("kept state", candidate.pk), _state, candidate)
                        for candidate in candidates}


def dry_run_key(*, cluster: Cluster, flavor: Flavor, tenant: Tenant | None) -> tuple[str, int, int, int]:
    """Where a page's reads keep the dry run of ``flavor`` on ``cluster`` for ``tenant``: on every
    live reservation, with the page's workload (admission reuses its first units)."""
    return ("dry run", cluster.pk, flavor.pk, tenant.project_id if tenant is not None else 0)


def _exclusion(state: ClusterState, tenant: Tenant | None, model: str) -> Exclusion | None:
    """What the tenant may not use on the state's nodes of ``model`` (None: placement asks itself)."""
    return kept_exclusion(state, tenant=tenant, nodes=state.nodes_of(model), reservations=state.rows_of_model(model))


def _candidates(*, flavor: Flavor, cluster: Cluster | None) -> list[Cluster]:
    return list(candidate_clusters(flavor=flavor, cluster=cluster))


def _cluster_fit(ask: AttemptAsk, *, quantity: int, pending_adoption: int, state: ClusterState,
                 reads: SharedReads) -> ClusterFit:
    # One attempt answers both questions: the request's ``quantity`` units are placed one by one,
    # as approval would place them, and then it counts what else is free (up to the limit,
    # ``ask.count_to``): by the engine's arithmetic for a share of one GPU or whole GPUs (the same
    # count, placement.placing.free_units), else by placing more units one by one. The cluster is
    # seen through its kept placement state (allocations.booking.state).
    cluster, flavor, tenant = ask.cluster, ask.flavor, ask.tenant
    model = flavor.gpu_model
    exclusion = reads.once(("tenancy", cluster.pk, model, tenant.project_id if tenant else 0), _exclusion,
                           state, tenant, model)
    attempt = placement_attempt(ask, state=state, exclusion=exclusion)
    reads.once(dry_run_key(cluster=cluster, flavor=flavor, tenant=tenant), lambda: attempt)
    placed = min(len(attempt.bookings), quantity)
    fits = placed == quantity
    return ClusterFit(
        cluster=cluster.name,
        gpu_model=flavor.gpu_model,
        requested=quantity,
        fits=fits,
        placed=placed,
        free=attempt.free,
        free_is_lower_bound=attempt.free >= ask.count_to,
        reason="" if fits else attempt.reason,
        kind="" if fits else attempt.kind,
        where=attempt.where(quantity) if fits else {},
        pending_adoption=pending_adoption,
    )


def placement_preview(
    *, flavor: Flavor, quantity: int, cluster: Cluster | None = None, free_limit: int = 32,
    reads: SharedReads | None = None, project: Project | None = None,
) -> list[ClusterFit]:
    """Per candidate cluster: would ``quantity`` units of ``flavor`` fit now, where, and if not, why.
    Free units are those that placing units one after another would book, up to ``free_limit``
    (or the request's quantity, if larger): counted without placing them past the request's own
    where the engine can (``placement.placing.free_units``). ``reads`` shares the database reads among the previews of
    many requests (one page's), so that each distinct read runs once. ``project`` is who asks: its
    tenancy rules apply (None: an unnamed project, kept off every other department's MPS node and
    every dedicated pool)."""
    reads = reads if reads is not None else SharedReads()
    candidates, states = preview_states(flavor=flavor, cluster=cluster, reads=reads)
    if not candidates:
        return []
    workload = reads.once(("workload", flavor.pk), placement_workload, include=flavor)
    waiting = reads.once(("not yet booked", tuple(candidate.pk for candidate in candidates)), _not_yet_booked,
                         candidates, states)
    tenant = None if project is None else reads.once(("tenant", project.pk), tenant_of, project)
    return [
        _cluster_fit(AttemptAsk(candidate, flavor, quantity, placement_policy_for(flavor, workload), tenant,
                                count_to=max(quantity, free_limit)),
                     quantity=quantity, pending_adoption=waiting.get(candidate.pk, 0), state=states[candidate.pk],
                     reads=reads)
        for candidate in candidates
    ]
