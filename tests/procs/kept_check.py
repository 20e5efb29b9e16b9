"""The check a web process runs on itself, at ``GET /test-only/kept-state/?seed=N`` (test settings
only, ``tests/procs/urls.py``): for every cluster, the version of the placement state this process
kept before the call (None: it kept none), and the differences between that state brought up to
date and a fresh read and build from the database (``tests/placement/kept_compare.py``)."""

from __future__ import annotations

import os
import random

from django.db import transaction
from django.http import HttpRequest, JsonResponse

from allocations.booking import kept_views
from allocations.booking import state as kept
from clusters.models import Cluster
from tests.placement.kept_compare import differences


def kept_state_check(request: HttpRequest) -> JsonResponse:
    rng = random.Random(int(request.GET.get("seed", "0")))
    clusters: list[dict[str, object]] = []
    with transaction.atomic():  # reads only; the other processes are quiet by now
        for cluster in Cluster.objects.order_by("pk"):
            held = kept._STATES.get(cluster.pk)
            pictures = sum(1 for key in list(kept_views._VIEWS) if key[0] == cluster.pk)
            try:
                state = kept.cluster_state(cluster=cluster)
                found = differences(state, cluster_id=cluster.pk, rng=rng)
            except Exception as error:  # noqa: BLE001 - a state the check cannot even read is a difference
                clusters.append({"cluster": cluster.name, "differences": [f"the check raised {error!r}"]})
                continue
            clusters.append({
                "cluster": cluster.name,
                "held_version": None if held is None else held.version,
                "held_pictures": pictures,
                "version": state.version,
                "live_rows": len(state.ordered),
                "differences": found,
            })  # fmt: skip
    return JsonResponse({"pid": os.getpid(), "clusters": clusters})
