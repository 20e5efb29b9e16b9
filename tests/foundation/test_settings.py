"""Settings come from the environment and fail loudly on bad values."""

from __future__ import annotations

import subprocess
import sys

import pytest
from django.core.exceptions import ImproperlyConfigured

from kernel.env import env_bool, env_int, env_list, env_secret


def test_it_parses_booleans_strictly(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("X_FLAG", "yes")
    assert env_bool("X_FLAG", False) is True
    monkeypatch.setenv("X_FLAG", "treu")
    with pytest.raises(ImproperlyConfigured, match="X_FLAG"):
        env_bool("X_FLAG", False)


def test_it_names_the_variable_of_a_bad_integer(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("X_COUNT", "ten")
    with pytest.raises(ImproperlyConfigured, match="X_COUNT must be an integer"):
        env_int("X_COUNT", 1)
    monkeypatch.setenv("X_COUNT", "0")
    with pytest.raises(ImproperlyConfigured, match="at least 1"):
        env_int("X_COUNT", 1, minimum=1)


def test_it_refuses_empty_list_items(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("X_HOSTS", "a.example,,b.example")
    with pytest.raises(ImproperlyConfigured, match="X_HOSTS"):
        env_list("X_HOSTS", [])


def test_it_reads_secrets_from_files(monkeypatch: pytest.MonkeyPatch, tmp_path: object) -> None:
    secret = tmp_path / "secret"  # type: ignore[operator]
    secret.write_text("s3cret\n")
    monkeypatch.setenv("X_SECRET_FILE", str(secret))
    assert env_secret("X_SECRET") == "s3cret"
    monkeypatch.setenv("X_SECRET_FILE", str(tmp_path / "missing"))  # type: ignore[operator]
    with pytest.raises(ImproperlyConfigured, match="X_SECRET_FILE"):
        env_secret("X_SECRET")


def _boot(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    code = "import django, os; os.environ['DJANGO_SETTINGS_MODULE']='gpuportal.settings'; django.setup()"
    base = {"PATH": "/usr/bin:/bin", "HOME": "/tmp"}
    return subprocess.run([sys.executable, "-c", code], env={**base, **env}, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({}, "GPUPORTAL_SECRET_KEY (or GPUPORTAL_SECRET_KEY_FILE) must be set"),
        ({"GPUPORTAL_SECRET_KEY": "short"}, "at least 32 characters"),
        ({"GPUPORTAL_DEBUG": "maybe"}, "GPUPORTAL_DEBUG must be one of"),
        ({"GPUPORTAL_DEBUG": "true", "DATABASE_URL": "mysql://u@h/db"}, "DATABASE_URL must use postgres:// or sqlite://"),
        ({"GPUPORTAL_DEBUG": "true", "GPUPORTAL_MAX_ALLOCATION_DAYS": "0"}, "GPUPORTAL_MAX_ALLOCATION_DAYS must be at least 1"),
    ],
)
def test_it_refuses_to_start_with_bad_settings(env: dict[str, str], message: str, tmp_path: object) -> None:
    result = _boot({"GPUPORTAL_VAR_DIR": str(tmp_path), **env})
    assert result.returncode != 0
    assert message in result.stderr


def test_it_starts_with_the_embedded_defaults(tmp_path: object) -> None:
    result = _boot({"GPUPORTAL_DEBUG": "true", "GPUPORTAL_VAR_DIR": str(tmp_path)})
    assert result.returncode == 0, result.stderr
