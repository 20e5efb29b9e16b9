"""The twin stands without Django: it imports the placement engine and the pure modules of the
portal's rules (the quota algebra and victim choice with room on one node, quota windows and the
tree over a request's period step by step, fair share's arithmetic and the queue's order, the
idle ladder and idle policy matching, and the time formats they write), and loading it loads no
Django and nothing else of the portal (docs/architecture.md, docs/twin.md)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.architecture.imports import ROOT, app_of, project_imports

pytestmark = pytest.mark.pure  # no database: runs beside the suite (tests/pure.py)

PURE = {
    "allocations.quotas.algebra", "allocations.quotas.victims", "allocations.quotas.node_room",
    "allocations.quotas.windows", "allocations.quotas.rrules", "allocations.quotas.stepped", "allocations.quotas.in_use", "allocations.quotas.victim_view",
    "allocations.fair_share.tree", "allocations.fair_share.queue", "allocations.grants.idle_ladder", "allocations.grants.idle_matching",
    "allocations.quotas.shrinking",
}
PURE_LOADED = PURE | {"allocations.quotas.walking", "kernel.times"}  # what those import in turn


def test_the_twin_imports_only_placement_and_the_pure_quota_modules() -> None:
    found = {item.target for item in project_imports() if app_of(item.source) == "twin" and app_of(item.target) != "twin"}
    assert {target for target in found if app_of(target) != "placement"} <= PURE


def test_loading_the_twin_loads_no_django() -> None:
    code = ("import json, sys, twin.replay.load, twin.replay.fairness, twin.sources.alibaba, twin.sources.generator, "
            "twin.clusters; print(json.dumps(sorted(sys.modules)))")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60, check=True)
    modules = set(json.loads(done.stdout.strip().splitlines()[-1]))
    loaded = {name.split(".")[0] for name in modules}
    assert "twin" in loaded and "placement" in loaded
    assert loaded & {"django", "rest_framework", "celery", "tenants", "clusters", "audit", "accounting"} == set()
    portal = {name for name in modules if name.split(".")[0] in {"kernel", "allocations"}}
    packages = {"kernel", "allocations", "allocations.quotas", "allocations.grants", "allocations.fair_share"}
    assert portal - packages <= PURE_LOADED
