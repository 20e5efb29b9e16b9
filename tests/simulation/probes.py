"""What people are shown, compared with the ledger at that instant, over HTTP (Django's test
client): ``GET /api/v1/quotas/`` as a platform admin and ``GET /metrics`` show each quota's use as
what its department holds now; the placement preview of a pending request, the approvals page and
the quota windows' coming shrinks answer without a server error."""

from __future__ import annotations

import datetime
import re
import traceback
from decimal import Decimal

from django.core.signals import got_request_exception
from django.test import Client
from rest_framework.test import APIClient

from tests.simulation.context import Context
from tests.simulation.ledger import Snapshot

Found = tuple[str, str]
METRIC = re.compile(r'^gpuportal_quota_(used|effective_limit)_(units|gpu_equivalents)\{([^}]*)\} (\S+)$')


def _labels(text: str) -> dict[str, str]:
    return dict(re.findall(r'(\w+)="([^"]*)"', text))


_raised: list[str] = []
requests_made = [0]
"""How many requests the probes made in this process (the run's summary)."""


def _remember(sender: object, request: object = None, **kwargs: object) -> None:
    del sender, request, kwargs
    _raised.append(traceback.format_exc(limit=-6))


def _server_error(found: list[Found], path: str, status: int, body: bytes) -> bool:
    requests_made[0] += 1
    if status >= 500:
        why = _raised[-1] if _raised else body[:300].decode(errors="replace")
        found.append(("http-5xx", f"GET {path} answered {status}: {why}"))
        return True
    return False


def probes(ctx: Context, snap: Snapshot, now: datetime.datetime) -> list[Found]:
    got_request_exception.connect(_remember)
    try:
        return _probes(ctx, snap, now)
    finally:
        got_request_exception.disconnect(_remember)
        _raised.clear()


def _probes(ctx: Context, snap: Snapshot, now: datetime.datetime) -> list[Found]:
    found: list[Found] = []
    api = APIClient(raise_request_exception=False)
    api.force_authenticate(ctx.world.users["platform"])
    response = api.get("/api/v1/quotas/", {"page_size": 500})
    if not _server_error(found, "/api/v1/quotas/", response.status_code, response.content):
        quotas = {q.id: q for q in snap.quotas.values()}
        for row in response.json()["results"]:
            quota = quotas[row["id"]]
            expected = snap.shown_in_use(quota.department_id, quota.flavor_id, now)
            label = f"{row['department']}/{row['flavor'] or 'gpu-equivalents'}"
            if Decimal(row["in_use"]) != expected:
                found.append(("displayed-in-use", f"/api/v1/quotas/ shows {label} in use {row['in_use']}; the ledger "
                              f"holds {expected} at {now.isoformat()}"))
            limit = snap.effective(quota, now)[1]
            if "effective_limit" in row and Decimal(row["effective_limit"]) != limit:
                found.append(("displayed-in-use", f"/api/v1/quotas/ shows {label} with the limit {row['effective_limit']} "
                              f"in force; the windows leave {limit} at {now.isoformat()}"))
    scraped = Client(raise_request_exception=False).get("/metrics")
    if not _server_error(found, "/metrics", scraped.status_code, scraped.content):
        found += _metrics(snap, now, scraped.content.decode())
    pending = sorted(g.id for g in snap.grants.values() if g.state == "pending")
    if pending:
        path = f"/api/v1/allocations/{pending[ctx.step % len(pending)]}/placement-preview/"
        response = api.get(path)
        _server_error(found, path, response.status_code, response.content)
    response = api.get("/api/v1/quota-windows/shrinks/")
    _server_error(found, "/api/v1/quota-windows/shrinks/", response.status_code, response.content)
    page = Client(raise_request_exception=False)
    page.force_login(ctx.world.users["nlp_admin"])
    shown = page.get("/approvals/")
    _server_error(found, "/approvals/", shown.status_code, shown.content)
    return found


def _metrics(snap: Snapshot, now: datetime.datetime, text: str) -> list[Found]:
    found: list[Found] = []
    by_slug = {slug: pk for pk, slug in snap.slugs.items()}
    by_flavor = {row.name: pk for pk, row in snap.flavors.items()}
    for line in text.splitlines():
        match = METRIC.match(line)
        if match is None:
            continue
        name, unit, labels, value = match.groups()
        tags = _labels(labels)
        department = by_slug[tags["department"]]
        scope = by_flavor[tags["flavor"]] if unit == "units" else None
        quota = snap.quotas.get((department, scope))
        if quota is None:
            continue
        expected = snap.shown_in_use(department, scope, now) if name == "used" else snap.effective(quota, now)[1]
        if abs(float(value) - float(expected)) > 1e-6:
            what = "in use" if name == "used" else "effective limit"
            found.append(("displayed-in-use", f"/metrics shows {tags['department']}/{tags.get('flavor', 'gpu-equivalents')} "
                          f"{what} {value}; the ledger has {expected} at {now.isoformat()}"))
    return found
