"""The twin stands without Django: it imports the placement engine and the pure modules of the
quota algebra, and loading it loads no Django (docs/architecture.md, docs/twin.md)."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.architecture.imports import ROOT, app_of, project_imports

PURE = {"allocations.quotas.algebra", "allocations.quotas.victims"}


def test_the_twin_imports_only_placement_and_the_pure_quota_modules() -> None:
    found = {item.target for item in project_imports() if app_of(item.source) == "twin" and app_of(item.target) != "twin"}
    assert {target for target in found if app_of(target) != "placement"} <= PURE


def test_loading_the_twin_loads_no_django() -> None:
    code = ("import json, sys, twin.replay.load, twin.sources.alibaba, twin.sources.generator, twin.clusters; "
            "print(json.dumps(sorted({name.split('.')[0] for name in sys.modules})))")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60, check=True)
    loaded = set(json.loads(done.stdout.strip().splitlines()[-1]))
    assert "twin" in loaded and "placement" in loaded
    assert loaded & {"django", "rest_framework", "celery", "tenants", "clusters", "kernel"} == set()
