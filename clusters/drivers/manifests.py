"""Writes the exact objects it would apply as YAML, one file per object, for GitOps repositories.

Layout: ``<root>/<cluster>/namespaces/<namespace>/<kind>-<name>.yaml``. Files are written
atomically and only when their content changes, so a resync leaves the tree untouched.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import yaml

from clusters.drivers.base import ApplyResult, DriverError


def object_file_name(obj: dict[str, Any]) -> str:
    return f"{obj['kind'].lower()}-{obj['metadata']['name']}.yaml"


def dump_object(obj: dict[str, Any]) -> str:
    return yaml.safe_dump(obj, sort_keys=True, default_flow_style=False)


class ManifestsDriver:
    def __init__(self, *, root: Path, cluster: str) -> None:
        self.directory = root / cluster

    def apply_project(self, *, namespace: str, objects: list[dict[str, Any]]) -> ApplyResult:
        folder = self.directory / "namespaces" / namespace
        try:
            folder.mkdir(parents=True, exist_ok=True)
            wanted = {object_file_name(obj): dump_object(obj) for obj in objects}
            applied = unchanged = pruned = 0
            for name, content in sorted(wanted.items()):
                path = folder / name
                if path.is_file() and path.read_text() == content:
                    unchanged += 1
                    continue
                _write_atomically(path, content)
                applied += 1
            for stale in sorted(folder.glob("*.yaml")):
                if stale.name not in wanted:
                    stale.unlink()
                    pruned += 1
            if not wanted:
                folder.rmdir()
        except OSError as error:
            raise DriverError(f"cannot write manifests under {folder}: {error.strerror or error}") from error
        return ApplyResult(applied=applied, pruned=pruned, unchanged=unchanged)


def _write_atomically(path: Path, content: str) -> None:
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=".", suffix=".tmp")
    try:
        with os.fdopen(handle, "w") as stream:
            stream.write(content)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
