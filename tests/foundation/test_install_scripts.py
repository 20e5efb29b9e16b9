"""The install scripts behind ``make run`` and ``make test`` (docs/install.md): which Python they
pick, what they say when there is none, and the stamp that lets the development lock serve
``make run`` without a reinstall."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from django.core.management import call_command

ROOT = Path(__file__).resolve().parents[2]
TOOLS = ["bash", "cat", "cut", "dirname", "sha256sum", "sed", "env"]


def run(args: list[str], *, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=60, check=False)


def bare_path(tmp_path: Path) -> str:
    """A PATH holding the shell tools the scripts use and no Python at all."""
    folder = tmp_path / "bin"
    folder.mkdir()
    for tool in TOOLS:
        found = shutil.which(tool)
        assert found is not None, tool
        (folder / tool).symlink_to(found)
    return str(folder)


def digest(lock: str) -> str:
    return hashlib.sha256((ROOT / lock).read_bytes() + (ROOT / "pyproject.toml").read_bytes()).hexdigest()[:16]


def test_find_python_names_a_supported_interpreter() -> None:
    for flag in ([], ["--newest"]):
        done = run(["scripts/find-python.sh", *flag], env=dict(os.environ))
        assert done.returncode == 0, done.stderr
        version = run([done.stdout.strip(), "-c", "import sys; print(sys.version_info[:2])"], env=dict(os.environ))
        assert version.stdout.strip() in ("(3, 11)", "(3, 12)", "(3, 13)")


def test_without_a_supported_python_make_says_what_to_install(tmp_path: Path) -> None:
    env = {"PATH": bare_path(tmp_path), "VENV": str(tmp_path / "venv"), "UV_VERSION": "0"}
    done = run([shutil.which("bash") or "bash", "scripts/venv.sh", "runtime"], env=env)
    message = " ".join(done.stderr.split())
    assert done.returncode == 1
    assert "needs Python 3.11, 3.12 or 3.13 and found none" in message
    assert "apt-get install python3 python3-venv" in message
    assert not (tmp_path / "venv").exists()
    named = run(["scripts/venv.sh", "runtime"], env={**os.environ, "VENV": str(tmp_path / "venv"), "UV_VERSION": "0",
                                                      "PYTHON": "python2.7-not-here"})  # fmt: skip
    assert named.returncode == 1 and "PYTHON=python2.7-not-here does not run as Python 3.11" in named.stderr


def fake_python(venv: Path, version: str) -> None:
    """An interpreter that answers the version question and refuses everything else (no install runs)."""
    (venv / "bin").mkdir(parents=True)
    fake = venv / "bin" / "python"
    fake.write_text(f'#!/bin/sh\nif [ "$1" = -c ]; then echo {version}; exit 0; fi\necho "fake: $*" >&2\nexit 3\n')
    fake.chmod(0o755)


def test_the_development_lock_serves_make_run_without_a_reinstall_but_not_the_reverse(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    fake_python(venv, "3.12")
    env = {**os.environ, "VENV": str(venv), "UV_VERSION": "0"}
    (venv / ".gpuportal-lock").write_text(f"dev {digest('requirements-dev.lock')}\n")
    done = run(["scripts/venv.sh", "runtime"], env=env)
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")
    (venv / ".gpuportal-lock").write_text(f"runtime {digest('requirements.lock')}\n")
    assert run(["scripts/venv.sh", "runtime"], env=env).stdout == ""
    # The runtime lock does not satisfy the development one: it starts installing (the fake refuses).
    dev = run(["scripts/venv.sh", "dev"], env=env)
    assert "Installing requirements-dev.lock" in dev.stdout and "fake: -m pip install" in dev.stderr
    assert dev.returncode != 0


def test_a_venv_of_an_unsupported_python_is_refused(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    fake_python(venv, "3.10")
    done = run(["scripts/venv.sh", "runtime"], env={**os.environ, "VENV": str(venv), "UV_VERSION": "0"})
    assert done.returncode == 1 and "unsupported or broken Python" in done.stderr


@pytest.mark.django_db
def test_demo_prepare_seeds_once_in_one_process(capsys: pytest.CaptureFixture[str]) -> None:
    from allocations.models import Allocation

    call_command("demo_prepare")
    first = Allocation.objects.count()
    call_command("demo_prepare")
    out = capsys.readouterr().out
    assert first > 0 and Allocation.objects.count() == first
    assert out.count("Database ready in") == 2 and "Applying" not in out  # the test database is migrated


def test_make_runs_first_preparation_logs_no_warning(tmp_path: Path) -> None:
    """A new user's first ``make run`` prints the migrations and the demo, not warnings: seeding the
    demo once logged ``NotRegistered`` for each notification (no task module imported outside a
    worker) and kombu's "No hostname was supplied" (an AMQP default for the eager producer)."""
    import sys

    env = {key: value for key, value in os.environ.items()
           if key not in ("DATABASE_URL", "GPUPORTAL_APP_DATABASE_URL", "CELERY_BROKER_URL", "GPUPORTAL_CACHE_URL")}
    env.update({"GPUPORTAL_DEBUG": "true", "GPUPORTAL_VAR_DIR": str(tmp_path), "GPUPORTAL_LOG_FORMAT": "json",
                "DJANGO_SETTINGS_MODULE": "gpuportal.settings"})
    done = subprocess.run([sys.executable, "manage.py", "demo_prepare"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = (done.stdout + done.stderr).splitlines()
    assert "Demo data is in place" in done.stdout + done.stderr
    loud = [line for line in lines if '"level": "WARNING"' in line or '"level": "ERROR"' in line or "Traceback" in line]
    assert loud == []
