"""gpuportal/settings.py is the one reader of the environment; the apps read settings at call time
through kernel.conf, so a bad value names its variable and overridden settings take effect."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured

from audit import conf as audit_conf
from clusters import conf as clusters_conf
from delivery import conf as delivery_conf
from kernel.conf import setting, setting_float, setting_int, setting_optional_str, setting_str
from telemetry import conf as telemetry_conf
from tests.architecture.imports import LAYERS

ROOT = Path(__file__).resolve().parents[2]
APPS = tuple(app for app in LAYERS if app != "gpuportal")  # every app but the settings' own package
# Variables a library reads from the environment itself: the portal reads them where it needs to
# agree with the library, at the same moment, not through a setting that could differ.
LIBRARY_VARIABLES = {
    ("observability/process.py", "PROMETHEUS_MULTIPROC_DIR"): "prometheus_client's multiprocess mode switch",
}


def _library_variable(path: Path, line: str) -> bool:
    return any(where == str(path.relative_to(ROOT)) and name in line for where, name in LIBRARY_VARIABLES)


def _reads_environment(path: Path) -> list[str]:
    found = []
    text = path.read_text()
    lines = text.splitlines()
    for node in ast.walk(ast.parse(text, filename=str(path))):
        if isinstance(node, ast.expr | ast.stmt) and _library_variable(path, lines[node.lineno - 1]):
            continue
        if isinstance(node, ast.ImportFrom) and node.module == "kernel.env":
            found.append(f"{path.relative_to(ROOT)}:{node.lineno} imports kernel.env")
        elif isinstance(node, ast.Attribute) and node.attr in ("environ", "getenv") and (
            isinstance(node.value, ast.Name) and node.value.id == "os"
        ):
            found.append(f"{path.relative_to(ROOT)}:{node.lineno} reads os.{node.attr}")
    return found


def test_only_the_settings_read_the_environment() -> None:
    readers = [
        finding
        for app in APPS
        for path in sorted((ROOT / app).rglob("*.py"))
        if "migrations" not in path.parts and path != ROOT / "kernel" / "env.py"
        for finding in _reads_environment(path)
    ]
    assert readers == []


def test_the_conf_modules_follow_overridden_settings(settings: Any) -> None:
    settings.GPUPORTAL_PUSH_MAX_ATTEMPTS = 3
    settings.GPUPORTAL_PUSH_BACKOFF_BASE_SECONDS = 2
    settings.GPUPORTAL_KUBE_USER_PREFIX = "oidc:"
    settings.GPUPORTAL_KUBECONFIG_KEY = " new , old ,"
    settings.GPUPORTAL_TELEMETRY_STALE_MIN_SECONDS = 5
    settings.GPUPORTAL_DB_RUNTIME_ROLE = None
    settings.GPUPORTAL_APP_DATABASE_URL = "postgres://gpuportal_app:pw@db/gpuportal"
    assert delivery_conf.push_max_attempts() == 3
    assert delivery_conf.push_backoff_base_seconds() == 2.0
    assert delivery_conf.kube_user_prefix() == "oidc:"
    assert clusters_conf.kubeconfig_keys() == ["new", "old"]
    assert telemetry_conf.stale_min_seconds() == 5
    assert audit_conf.audit_runtime_role() == "gpuportal_app"


def test_it_names_the_setting_that_is_missing_or_of_the_wrong_kind(settings: Any) -> None:
    with pytest.raises(ImproperlyConfigured, match="GPUPORTAL_NO_SUCH_SETTING is not defined"):
        setting("GPUPORTAL_NO_SUCH_SETTING")
    settings.GPUPORTAL_PUSH_MAX_ATTEMPTS = "many"
    with pytest.raises(ImproperlyConfigured, match="GPUPORTAL_PUSH_MAX_ATTEMPTS must be an integer"):
        setting_int("GPUPORTAL_PUSH_MAX_ATTEMPTS")
    settings.GPUPORTAL_PUSH_LEASE_SECONDS = "soon"
    with pytest.raises(ImproperlyConfigured, match="GPUPORTAL_PUSH_LEASE_SECONDS must be a number"):
        setting_float("GPUPORTAL_PUSH_LEASE_SECONDS")
    settings.GPUPORTAL_LIMITRANGE_DEFAULT_CPU = None
    with pytest.raises(ImproperlyConfigured, match="GPUPORTAL_LIMITRANGE_DEFAULT_CPU must be set"):
        setting_str("GPUPORTAL_LIMITRANGE_DEFAULT_CPU")
    settings.GPUPORTAL_KUBECONFIG_KEY = ""
    assert setting_optional_str("GPUPORTAL_KUBECONFIG_KEY") is None


def test_it_checks_the_prune_policy_on_use(settings: Any) -> None:
    settings.GPUPORTAL_KUBE_PRUNE_POLICY = "keep"
    with pytest.raises(ImproperlyConfigured, match="GPUPORTAL_KUBE_PRUNE_POLICY must be one of"):
        delivery_conf.prune_policy()


def _boot(env: dict[str, str], code: str = "") -> subprocess.CompletedProcess[str]:
    program = "import django, os; os.environ['DJANGO_SETTINGS_MODULE']='gpuportal.settings'; django.setup()\n" + code
    base = {"PATH": "/usr/bin:/bin", "HOME": "/tmp", "GPUPORTAL_DEBUG": "true"}
    return subprocess.run([sys.executable, "-c", program], env={**base, **env}, capture_output=True, text=True,
                          timeout=60, cwd=ROOT)


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"GPUPORTAL_PUSH_BACKOFF_BASE_SECONDS": "soon"}, "GPUPORTAL_PUSH_BACKOFF_BASE_SECONDS must be a number"),
        ({"GPUPORTAL_KUBE_APPLY_CONCURRENCY": "0"}, "GPUPORTAL_KUBE_APPLY_CONCURRENCY must be at least 1"),
        ({"GPUPORTAL_DB_RUNTIME_GRANT_TRUNCATE": "maybe"}, "GPUPORTAL_DB_RUNTIME_GRANT_TRUNCATE must be one of"),
        ({"GPUPORTAL_FAIR_SHARE_HALF_LIFE_HOURS": "0"}, "GPUPORTAL_FAIR_SHARE_HALF_LIFE_HOURS must be at least 1"),
        ({"GPUPORTAL_FAIR_SHARE_HALF_LIFE_HOURS": "a week"}, "GPUPORTAL_FAIR_SHARE_HALF_LIFE_HOURS must be an integer"),
    ],
)
def test_a_bad_value_stops_the_start_naming_its_variable(env: dict[str, str], message: str, tmp_path: Path) -> None:
    result = _boot({"GPUPORTAL_VAR_DIR": str(tmp_path), **env})
    assert result.returncode != 0
    assert message in result.stderr


def test_the_environment_and_secret_files_reach_the_conf_modules(tmp_path: Path) -> None:
    key_file = tmp_path / "kubeconfig-key"
    key_file.write_text("from-a-file,older\n")
    code = (
        "from clusters import conf as c; from delivery import conf as d; from audit import conf as a;"
        " from telemetry import conf as t\n"
        "print(c.kubeconfig_keys(), d.push_lease_seconds(), d.prune_policy(), a.audit_origin(),"
        " a.audit_runtime_grant_truncate(), t.report_max_bytes())"
    )
    result = _boot({
        "GPUPORTAL_VAR_DIR": str(tmp_path),
        "GPUPORTAL_KUBECONFIG_KEY_FILE": str(key_file),
        "GPUPORTAL_PUSH_LEASE_SECONDS": "12.5",
        "GPUPORTAL_DB_RUNTIME_GRANT_TRUNCATE": "1",
    }, code)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "['from-a-file', 'older'] 12.5 delete-namespace gpuportal/audit True 2097152"
