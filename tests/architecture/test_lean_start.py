"""A start loads only what serving needs: the Kubernetes client (seconds to import) only when a
cluster's Kubernetes driver runs, and no development package at all (docs/install.md)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.architecture.imports import ROOT

# What a web process, a worker and a management command load before doing anything: the settings,
# the apps and models, the URL table (every view), the WSGI application and the Celery app with
# every app's tasks.
START = """
import json, sys
import django
django.setup()
from django.urls import get_resolver
get_resolver().url_patterns
import gpuportal.wsgi
from gpuportal.celery import app
app.loader.import_default_modules()
print(json.dumps(sorted({name.split(".")[0] for name in sys.modules})))
"""

LAZY = {"kubernetes"}  # imported by delivery.drivers.kubernetes inside driver_for()
DEVELOPMENT = {"pytest", "hypothesis", "ortools", "playwright", "schemathesis", "mypy", "django_stubs_ext", "httpx"}


def top_level_modules_after_start(code: str = START) -> set[str]:
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "gpuportal.settings", "GPUPORTAL_DEBUG": "true"}
    env.pop("CELERY_BROKER_URL", None)
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=True
    )
    return set(json.loads(done.stdout.strip().splitlines()[-1]))


def test_a_start_imports_neither_the_kubernetes_client_nor_a_development_package() -> None:
    loaded = top_level_modules_after_start()
    assert {"django", "rest_framework", "celery", "delivery"} <= loaded  # it did start
    assert loaded & (LAZY | DEVELOPMENT) == set()


def test_the_check_sees_the_kubernetes_client_once_a_kubernetes_driver_is_built() -> None:
    code = START.replace(
        "print(",
        "from clusters.models import Cluster, ClusterDriverKind\n"
        "from delivery.drivers import PermanentDriverError, driver_for\n"
        "try:\n"
        "    driver_for(Cluster(name='c', driver=ClusterDriverKind.KUBERNETES))\n"
        "except PermanentDriverError:\n"
        "    pass  # no kubeconfig: refused after the driver's module was loaded\n"
        "print(",
    )
    assert "kubernetes" in top_level_modules_after_start(code)
