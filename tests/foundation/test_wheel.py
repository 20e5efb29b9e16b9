"""The wheel carries every shipped package and the files it reads (templates, static assets, the
agent's report schema), and the package lists in ``pyproject.toml`` are the architecture's list.

The wheel is built offline from a copy of the working tree (the files git tracks or would track), with
the setuptools of the development lock, as ``pip install .`` in the image builds it; each package is
then imported from the unpacked wheel by an interpreter that cannot see the tree.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

from gpuportal.packages import SHIPPED
from tests.architecture.imports import LAYERS, PACKAGES, ROOT

TYPED_TOO = ("bench", "tests", "manage.py")  # checked by mypy, not shipped


def _pyproject() -> dict[str, object]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def _tree_files() -> list[str]:
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT, check=True,
                            capture_output=True).stdout.decode()
    return [name for name in listed.split("\0") if name and (ROOT / name).is_file()]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    work = tmp_path_factory.mktemp("wheel")
    source, out = work / "source", work / "dist"
    for name in _tree_files():
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, source / name)
    out.mkdir()
    build = "import sys; from setuptools import build_meta; print(build_meta.build_wheel(sys.argv[1]))"
    built = subprocess.run([sys.executable, "-c", build, str(out)], cwd=source, check=True, capture_output=True, text=True)
    return out / built.stdout.strip().splitlines()[-1]


def test_the_wheel_and_mypy_list_the_architectures_packages() -> None:
    config = _pyproject()["tool"]
    assert isinstance(config, dict)
    include = config["setuptools"]["packages"]["find"]["include"]
    assert sorted(pattern.removesuffix("*") for pattern in include) == sorted(SHIPPED)
    assert set(config["mypy"]["files"]) == {*PACKAGES, *TYPED_TOO}


def test_every_shipped_package_and_the_files_it_reads_are_in_the_wheel(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
    wanted = {name for name in _tree_files() if name.split("/")[0] in SHIPPED and "__pycache__" not in name}

    assert sorted(wanted - names) == []
    assert {name.split("/")[0] for name in names if not name.startswith("gpuportal-")} == set(SHIPPED)


def test_each_package_imports_from_the_unpacked_wheel(wheel: Path, tmp_path: Path) -> None:
    site = tmp_path / "site"
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(site)
    apps = [package for package in LAYERS if (ROOT / package / "apps.py").is_file()]
    probe = (
        "import importlib, json, sys\n"
        "found = {name: importlib.import_module(name).__file__ for name in sys.argv[1:]}\n"
        "print(json.dumps(found))\n"
    )
    modules = [*SHIPPED, *(f"{app}.apps" for app in apps)]
    ran = subprocess.run([sys.executable, "-c", probe, *modules], cwd=tmp_path, check=True, capture_output=True,
                         text=True, env={"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin"})
    found = json.loads(ran.stdout)

    assert {name: Path(path).is_relative_to(site) for name, path in found.items()} == dict.fromkeys(modules, True)
