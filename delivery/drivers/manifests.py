"""Writes the exact objects it would apply as YAML, one file per object, for GitOps repositories.

Layout: ``<root>/<cluster>/namespaces/<namespace>/<kind>-<name>.yaml`` for a project's objects and
``<root>/<cluster>/cluster/<kind>-[<namespace>.]<name>.yaml`` for the cluster-wide ones (priority
classes, queues, the device-plugin and mig-parted ConfigMaps, partial Nodes carrying the config
labels). Files are written atomically and only when their content changes, so a resync leaves
the tree untouched; keys are sorted, so the same state always gives the same bytes.
"""

from __future__ import annotations

import datetime
import os
import tempfile
from pathlib import Path
from typing import Any

import yaml

from delivery.drivers.base import (
    EMPTY_RESULT,
    ApplyResult,
    Change,
    DriverError,
    NotReadable,
    PermanentDriverError,
    Plan,
    Scope,
)
from delivery.pod_reasons import PendingRead

CLUSTER_FOLDER = "cluster"


def object_file_name(obj: dict[str, Any], *, with_namespace: bool = False) -> str:
    return key_file_name((obj["kind"], obj["metadata"].get("namespace", ""), obj["metadata"]["name"]), with_namespace=with_namespace)


def key_file_name(key: tuple[str, str, str], *, with_namespace: bool = False) -> str:
    kind, namespace, name = key
    prefix = f"{namespace}." if with_namespace and namespace else ""
    return f"{kind.lower()}-{prefix}{name}.yaml"


def dump_object(obj: dict[str, Any]) -> str:
    return yaml.safe_dump(obj, sort_keys=True, default_flow_style=False)


class ManifestsDriver:
    def __init__(self, *, root: Path, cluster: str) -> None:
        self.directory = root / cluster

    def close(self) -> None:
        return None

    def namespace_exists(self, name: str) -> bool:
        return True  # a folder holds whatever namespace it is given

    def read_nodes(self) -> list[dict[str, Any]]:
        raise PermanentDriverError(f"cluster {self.directory.name}: a manifests folder has no live nodes to discover")

    def read_pending(self, *, namespace: str, older_than: datetime.timedelta) -> PendingRead:
        raise NotReadable(f"cluster {self.directory.name}: pending pods are not readable on this driver (a manifests folder)")

    def _folder(self, scope: Scope) -> Path:
        if scope.namespace is None:
            return self.directory / CLUSTER_FOLDER
        return self.directory / "namespaces" / scope.namespace

    def plan(self, scopes: list[Scope]) -> Plan:
        changes: list[Change] = []
        unchanged = 0
        try:
            for scope in scopes:
                folder = self._folder(scope)
                wanted = {object_file_name(obj, with_namespace=scope.namespace is None): obj for obj in scope.objects}
                for name, obj in sorted(wanted.items()):
                    path = folder / name
                    current = path.read_text() if path.is_file() else None
                    if current == dump_object(obj):
                        unchanged += 1
                        continue
                    live = _parse(current)
                    fields = tuple(_differing_top_level(obj, live))
                    changes.append(Change("create" if current is None else "update", obj["kind"], obj["metadata"]["name"],
                                          obj["metadata"].get("namespace", ""), scope.label, obj, live, fields,
                                          location=str(path.relative_to(self.directory))))
                kept = {key_file_name(key, with_namespace=scope.namespace is None) for key in scope.kept}
                if scope.prune and folder.is_dir():
                    for stale in sorted(folder.glob("*.yaml")):
                        if stale.name not in wanted and stale.name not in kept:
                            location = str(stale.relative_to(self.directory))
                            changes.append(Change("delete", "file", location, scope=scope.label, location=location))
        except OSError as error:
            raise DriverError(f"cannot read manifests under {self.directory}: {error.strerror or error}") from error
        return Plan(changes=changes, unchanged=unchanged)

    def apply(self, plan: Plan) -> ApplyResult:
        applied = pruned = 0
        touched: set[Path] = set()
        try:
            for change in plan.changes:
                path = self.directory / change.location
                if change.action == "delete":
                    path.unlink(missing_ok=True)
                    touched.add(path.parent)
                    pruned += 1
                    continue
                assert change.desired is not None
                path.parent.mkdir(parents=True, exist_ok=True)
                _write_atomically(path, dump_object(change.desired))
                applied += 1
            for folder in sorted(touched):
                if folder.is_dir() and not any(folder.iterdir()):
                    folder.rmdir()
        except OSError as error:
            raise DriverError(f"cannot write manifests under {self.directory}: {error.strerror or error}") from error
        return ApplyResult(applied=applied, pruned=pruned, unchanged=plan.unchanged)

    def apply_project(self, *, namespace: str, objects: list[dict[str, Any]]) -> ApplyResult:
        return self.apply(self.plan([Scope(namespace=namespace, objects=objects)]))

    def enforce_quotas(self, scopes: list[Scope]) -> ApplyResult:
        """Nothing to evict: a folder of manifests runs no pods. Whoever applies the files (a
        GitOps controller) lowers the quota; pods already beyond it are that cluster's to evict."""
        return EMPTY_RESULT


def _parse(text: str | None) -> dict[str, Any] | None:
    if text is None:
        return None
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError:
        return None
    return document if isinstance(document, dict) else None


def _differing_top_level(wanted: dict[str, Any], live: dict[str, Any] | None) -> list[str]:
    if live is None:
        return sorted(wanted)
    return sorted(key for key in set(wanted) | set(live) if wanted.get(key) != live.get(key))


def _write_atomically(path: Path, content: str) -> None:
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=".", suffix=".tmp")
    try:
        with os.fdopen(handle, "w") as stream:
            stream.write(content)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
