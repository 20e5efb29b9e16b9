"""The Kubernetes driver: server-side apply under the field manager ``gpuportal``.

A push first reads what the cluster has (one list per kind, filtered by the managed-by label),
compares it with the desired objects (:mod:`delivery.drivers.diff`) and then writes only what
differs, many requests at once: a resync with nothing changed issues no write at all. Managed
objects of a scope that are no longer desired are deleted (the prune); a project's Namespace goes
last, and with it everything inside. After a project's objects are applied, the pods beyond its
lowered GPU quotas are evicted (:meth:`KubernetesDriver.enforce_quotas`).
"""

from __future__ import annotations

import datetime
import hashlib
import json
import logging
import ssl
from collections import defaultdict
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import quote

import urllib3
import yaml
from kubernetes import client as kube_client
from kubernetes import config as kube_config

from delivery.drivers import kube_evictions, kube_identity, kube_pending
from delivery.drivers.base import (
    EMPTY_RESULT,
    ApplyResult,
    Change,
    DriverError,
    PermanentDriverError,
    Plan,
    Scope,
)
from delivery.drivers.diff import FIELD_MANAGER, differing_fields
from delivery.eviction import evictions_choose, quota_limits
from delivery.pod_reasons import PendingRead, mig_pending_nodes
from delivery.rendering import MANAGED_BY_LABEL, MANAGED_BY_VALUE, PROJECT_KINDS, SCOPE_CLUSTER, SCOPE_LABEL
from kernel.clock import clock_now

log = logging.getLogger(__name__)

MANAGED_SELECTOR = f"{MANAGED_BY_LABEL}={MANAGED_BY_VALUE}"
# The admission policies: the tenant pools' (delivery.pinning) and Volcano's queue policy
# (delivery.volcano.render_queue_admission_policy).
CLUSTER_KINDS: tuple[str, ...] = (
    "PriorityClass", "ConfigMap", "Queue", "PrometheusRule", "MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding",
    "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding",
)
# TLS failures that retrying cannot cure: a wrong CA, an unreadable or mismatched client key.
_CONFIG_TLS_ERRORS = ("CERTIFICATE_VERIFY_FAILED", "PEM lib", "KEY_VALUES_MISMATCH", "NO_START_LINE", "BAD_BASE64")


@dataclass(frozen=True)
class KindInfo:
    group_version: str
    plural: str
    namespaced: bool

    def path(self, *, namespace: str = "", name: str = "") -> str:
        base = "/api/v1" if self.group_version == "v1" else f"/apis/{self.group_version}"
        if self.namespaced and namespace:
            base += f"/namespaces/{quote(namespace)}"
        base += f"/{self.plural}"
        return f"{base}/{quote(name)}" if name else base


_ADMISSION = "admissionregistration.k8s.io/v1"
KINDS: dict[str, KindInfo] = {
    "Namespace": KindInfo("v1", "namespaces", False),
    "ResourceQuota": KindInfo("v1", "resourcequotas", True),
    "LimitRange": KindInfo("v1", "limitranges", True),
    "RoleBinding": KindInfo("rbac.authorization.k8s.io/v1", "rolebindings", True),
    "NetworkPolicy": KindInfo("networking.k8s.io/v1", "networkpolicies", True),
    "PriorityClass": KindInfo("scheduling.k8s.io/v1", "priorityclasses", False),
    "ConfigMap": KindInfo("v1", "configmaps", True),
    "Queue": KindInfo("scheduling.volcano.sh/v1beta1", "queues", False),
    "PrometheusRule": KindInfo("monitoring.coreos.com/v1", "prometheusrules", True),
    "Node": KindInfo("v1", "nodes", False),
    "MutatingAdmissionPolicy": KindInfo(_ADMISSION, "mutatingadmissionpolicies", False),
    "MutatingAdmissionPolicyBinding": KindInfo(_ADMISSION, "mutatingadmissionpolicybindings", False),
    "ValidatingAdmissionPolicy": KindInfo(_ADMISSION, "validatingadmissionpolicies", False),
    "ValidatingAdmissionPolicyBinding": KindInfo(_ADMISSION, "validatingadmissionpolicybindings", False),
}

Key = tuple[str, str, str]  # kind, namespace, name


def _key(obj: dict[str, Any]) -> Key:
    metadata = obj.get("metadata", {})
    kind = obj["kind"]
    namespace = metadata.get("namespace", "") if KINDS[kind].namespaced else ""
    return kind, namespace, metadata["name"]


class KubeRest:
    """JSON over the API server with the kubeconfig's credentials; errors become DriverErrors."""

    def __init__(self, *, cluster: str, kubeconfig: str, pool_size: int, timeout: float) -> None:
        self.cluster = cluster
        self.timeout = timeout
        try:
            document = yaml.safe_load(kubeconfig)
            if not isinstance(document, dict):
                raise kube_config.ConfigException("not a YAML mapping")
            configuration = kube_client.Configuration()
            kube_config.load_kube_config_from_dict(document, client_configuration=configuration, persist_config=False)
        except (yaml.YAMLError, kube_config.ConfigException, KeyError, TypeError, ValueError) as error:
            raise PermanentDriverError(f"cluster {cluster}: the kubeconfig is not usable: {error}") from None
        configuration.connection_pool_maxsize = pool_size
        configuration.retries = False
        self.server = configuration.host
        self.api = kube_client.ApiClient(configuration)

    def close(self) -> None:
        self.api.close()

    def request(
        self, method: str, path: str, *, query: dict[str, str] | None = None, body: Any = None, content_type: str = "application/json"
    ) -> tuple[int, Any]:
        configuration = self.api.configuration
        headers = {"Accept": "application/json", "Content-Type": content_type}
        if configuration.refresh_api_key_hook is not None:
            configuration.refresh_api_key_hook(configuration)
        for setting in configuration.auth_settings().values():  # a bearer token, static or from an exec plugin
            if setting.get("in") == "header" and setting.get("value"):
                headers[setting["key"].title()] = setting["value"]
        url = configuration.host + path
        try:
            if method == "GET":
                response = self.api.rest_client.pool_manager.request(
                    "GET", url, fields=query, headers=headers, timeout=self._timeout(), retries=False
                )
            else:
                if query:
                    url += "?" + "&".join(f"{quote(k)}={quote(v)}" for k, v in query.items())
                response = self.api.rest_client.pool_manager.request(
                    method, url, body=None if body is None else json.dumps(body), headers=headers,
                    timeout=self._timeout(), retries=False,
                )
        except urllib3.exceptions.SSLError as error:
            if any(marker in str(error) for marker in _CONFIG_TLS_ERRORS):
                raise PermanentDriverError(
                    f"cluster {self.cluster}: the kubeconfig's TLS material does not work with {self.server}: {error}"
                ) from None
            raise DriverError(f"cluster {self.cluster}: API server {self.server} unreachable (TLS: {error})") from None
        except (urllib3.exceptions.HTTPError, ssl.SSLError, OSError) as error:
            raise DriverError(f"cluster {self.cluster}: API server {self.server} unreachable: {_reason(error)}") from None
        try:
            payload = json.loads(response.data) if response.data else None
        except ValueError:  # plain text, e.g. "404 page not found" for an unknown API group
            payload = response.data.decode(errors="replace")
        return response.status, payload

    def _timeout(self) -> urllib3.Timeout:
        return urllib3.Timeout(connect=min(5.0, self.timeout), read=self.timeout)

    def checked(self, method: str, path: str, *, what: str, allow: Iterable[int] = (), **kwargs: Any) -> tuple[int, Any]:
        status, payload = self.request(method, path, **kwargs)
        if 200 <= status < 300 or status in allow:
            return status, payload
        raise self.failure(status, payload, what=what)

    def failure(self, status: int, payload: Any, *, what: str) -> DriverError:
        message = payload.get("message", "") if isinstance(payload, dict) else str(payload)
        text = f"cluster {self.cluster}: {what}: HTTP {status}: {message}"
        if status == 401:
            return PermanentDriverError(f"{text} (the kubeconfig's credentials were refused)")
        if status == 403 and "being terminated" not in message:
            return PermanentDriverError(f"{text} (the kubeconfig's user lacks the rights)")
        if status in (400, 422):
            return PermanentDriverError(text)
        return DriverError(text)


def _reason(error: BaseException) -> str:
    reason = getattr(error, "reason", None)
    return str(reason or error)


class KubernetesDriver:
    def __init__(self, *, cluster: str, kubeconfig: str, concurrency: int = 16, timeout: float = 30.0) -> None:
        self.cluster = cluster
        self.concurrency = concurrency
        self.rest = KubeRest(cluster=cluster, kubeconfig=kubeconfig, pool_size=concurrency, timeout=timeout)
        self.writes = 0
        self.reads = 0
        self._credentials = hashlib.sha256(kubeconfig.encode()).hexdigest()
        self._bound: set[str] = set()  # namespaces whose evictor binding this driver created

    def close(self) -> None:
        self.rest.close()

    # ------------------------------------------------------------------------------ reads
    def _list(self, kind: str, *, namespace: str = "", selector: str | None = MANAGED_SELECTOR) -> list[dict[str, Any]]:
        info = KINDS[kind]
        query = {"labelSelector": selector} if selector else None
        self.reads += 1
        status, payload = self.rest.checked("GET", info.path(namespace=namespace), query=query, what=f"list {kind}", allow=(404,))
        if status == 404:
            return []  # the kind (a CRD) or the namespace does not exist: nothing of ours is there
        items: list[dict[str, Any]] = payload.get("items", [])
        for item in items:
            item.setdefault("kind", kind)
        return items

    def _get(self, kind: str, *, name: str, namespace: str = "") -> dict[str, Any] | None:
        self.reads += 1
        status, payload = self.rest.checked("GET", KINDS[kind].path(namespace=namespace, name=name), what=f"read {kind} {name}", allow=(404,))
        if status == 404:
            return None
        payload.setdefault("kind", kind)
        result: dict[str, Any] = payload
        return result

    def read_nodes(self) -> list[dict[str, Any]]:
        return self._list("Node", selector=None)

    def read_pending(self, *, namespace: str, older_than: datetime.timedelta) -> PendingRead:
        read = kube_pending.pending_read(self.rest, namespace=namespace, older_than=older_than, now=clock_now())
        self.reads += 2
        if not kube_pending.asks_for_mig(read):
            return read
        return replace(read, mig_pending=tuple(mig_pending_nodes(self.read_nodes())))

    def namespace_exists(self, name: str) -> bool:
        self.reads += 1
        status, _ = self.rest.checked("GET", KINDS["Namespace"].path(name=name), what=f"read Namespace {name}", allow=(404,))
        return bool(status != 404)

    def _live(self, scopes: list[Scope]) -> dict[Key, dict[str, Any]]:
        """Every live object the plan needs, read with as few requests as the scopes allow."""
        live: dict[Key, dict[str, Any]] = {}
        projects = [scope.namespace for scope in scopes if scope.namespace]
        kinds: set[str] = set()
        if projects:
            kinds.update(PROJECT_KINDS)
        if any(scope.namespace is None and scope.prune for scope in scopes):
            kinds.update(CLUSTER_KINDS)
        kinds.update(obj["kind"] for scope in scopes for obj in scope.objects)
        node_names = {obj["metadata"]["name"] for scope in scopes for obj in scope.objects if obj["kind"] == "Node"}
        for kind in sorted(kinds):
            if kind == "Node":
                items = self.read_nodes() if len(node_names) > 3 else [n for n in (self._get("Node", name=x) for x in sorted(node_names)) if n]
            elif len(projects) == 1 and kind in PROJECT_KINDS and not any(scope.namespace is None for scope in scopes):
                namespace = projects[0]
                if kind == "Namespace":
                    found = self._get("Namespace", name=namespace)
                    items = [found] if found else []
                else:
                    items = self._list(kind, namespace=namespace)
            else:
                items = self._list(kind)
            for item in items:
                live[_key(item)] = item
        return live

    # ----------------------------------------------------------------------------- plan
    def plan(self, scopes: list[Scope]) -> Plan:
        if any(scope.namespace for scope in scopes):
            scopes = kube_identity.with_evictor_bindings(scopes, self._subject())
        live = self._live(scopes)
        owned: dict[str | None, list[tuple[Key, dict[str, Any]]]] = defaultdict(list)
        for key, item in sorted(live.items()):
            owner = _owner(item)
            if owner is not _NOBODY:
                owned[owner].append((key, item))
        changes: list[Change] = []
        unchanged = 0
        absent: set[Key] = set()
        for scope in scopes:
            wanted = {_key(obj): obj for obj in scope.objects}
            for key, obj in wanted.items():
                current = live.get(key)
                if key[0] == "Namespace" and current and current.get("metadata", {}).get("deletionTimestamp"):
                    raise DriverError(f"cluster {self.cluster}: namespace {key[2]} is still being deleted; will retry")
                if key[0] == "Node" and current is None:
                    absent.add(key)  # the portal labels nodes, it never creates them: not (yet) in the cluster
                    continue
                fields = differing_fields(obj, current)
                if not fields:
                    unchanged += 1
                    continue
                action = "create" if current is None else "update"
                changes.append(Change(action, key[0], key[2], key[1], scope.label, obj, current, tuple(fields)))
            for key, current in owned.get(scope.namespace, []) if scope.prune else []:
                if key in wanted or key in scope.kept or current.get("metadata", {}).get("deletionTimestamp"):
                    continue
                changes.append(Change("delete", key[0], key[2], key[1], scope.label, None, current))
        return Plan(changes=_prune_inside_deleted_namespaces(changes), unchanged=unchanged, absent=frozenset(absent))

    def _subject(self) -> dict[str, str] | None:
        """The portal's identity on the cluster: asked once per process and kubeconfig."""
        key = (self.cluster, self._credentials)
        if key not in _IDENTITIES:
            self.reads += 1
            _IDENTITIES[key] = kube_identity.self_subject(self.rest)
        return _IDENTITIES[key]

    # ---------------------------------------------------------------------------- apply
    def apply(self, plan: Plan) -> ApplyResult:
        writes = [change for change in plan.changes if change.action != "delete"]
        deletes = [change for change in plan.changes if change.action == "delete"]
        errors: list[tuple[str, bool]] = []
        namespaces = [change for change in writes if change.kind == "Namespace"]
        self._run(self._apply_one, namespaces, errors)
        if errors:  # nothing namespaced can land in a namespace that failed
            raise _failure(errors)
        self._run(self._apply_one, [change for change in writes if change.kind != "Namespace"], errors)
        self._bound |= {c.namespace for c in writes if c.kind == "RoleBinding" and c.name == kube_identity.EVICTOR_BINDING}
        self._run(self._delete_one, sorted(deletes, key=lambda change: change.kind == "Namespace"), errors)
        if errors:
            raise _failure(errors)
        return ApplyResult(applied=len(writes), pruned=len(deletes), unchanged=plan.unchanged)

    def apply_project(self, *, namespace: str, objects: list[dict[str, Any]]) -> ApplyResult:
        return self.apply(self.plan([Scope(namespace=namespace, objects=objects)]))

    def enforce_quotas(self, scopes: list[Scope]) -> ApplyResult:
        """Evict the pods beyond each project's desired GPU quotas (:mod:`delivery.eviction`
        chooses, :mod:`delivery.drivers.kube_evictions` evicts): one read of the pods, and one
        request per chosen pod. A project without objects (its namespace is being pruned) and
        one whose quotas govern no GPU resource are left alone."""
        limits = {
            scope.namespace: quota_limits(scope.objects, managed_resources=scope.managed_resources)
            for scope in scopes if scope.namespace and scope.objects
        }  # fmt: skip
        limits = {namespace: found for namespace, found in limits.items() if found}
        if not limits:
            return EMPTY_RESULT
        pods, reads = kube_evictions.live_pods(self.rest, namespaces=sorted(limits), fresh=frozenset(self._bound))
        self.reads += reads
        chosen = [
            eviction for namespace, found in sorted(limits.items())
            for eviction in evictions_choose([pod for pod in pods if pod.namespace == namespace], found)
        ]  # fmt: skip
        self.writes += len(chosen)
        return kube_evictions.pods_evict(self.rest, chosen)

    def _run(self, action: Callable[[Change], None], changes: list[Change], errors: list[tuple[str, bool]]) -> None:
        if not changes:
            return

        def guarded(change: Change) -> None:
            try:
                action(change)
            except DriverError as error:
                errors.append((f"{change.ref}: {error}", isinstance(error, PermanentDriverError)))

        if len(changes) == 1 or self.concurrency == 1:
            for change in changes:
                guarded(change)
            return
        with ThreadPoolExecutor(max_workers=min(self.concurrency, len(changes))) as pool:
            list(pool.map(guarded, changes))

    def _apply_one(self, change: Change) -> None:
        assert change.desired is not None
        path = KINDS[change.kind].path(namespace=change.namespace, name=change.name)
        status, payload = self._server_side_apply(path, change.desired)
        if change.kind == "PriorityClass" and status == 422 and "immutable" in json.dumps(payload):
            # value and preemptionPolicy cannot change in place: replace the class.
            self.writes += 1
            self.rest.checked("DELETE", path, what=f"replace {change.ref}", allow=(404,))
            status, payload = self._server_side_apply(path, change.desired)
        if not 200 <= status < 300:
            raise self.rest.failure(status, payload, what=f"apply {change.ref}")

    def _server_side_apply(self, path: str, desired: dict[str, Any]) -> tuple[int, Any]:
        self.writes += 1
        query = {"fieldManager": FIELD_MANAGER, "force": "true"}
        return self.rest.request("PATCH", path, query=query, body=desired, content_type="application/apply-patch+yaml")

    def _delete_one(self, change: Change) -> None:
        self.writes += 1
        path = KINDS[change.kind].path(namespace=change.namespace, name=change.name)
        self.rest.checked("DELETE", path, what=f"prune {change.ref}", allow=(404,), body={"propagationPolicy": "Background"})


# (cluster, the kubeconfig's hash) → who that kubeconfig is on the cluster (a new kubeconfig asks again).
_IDENTITIES: dict[tuple[str, str], dict[str, str] | None] = {}

_NOBODY = "\x00not managed"


def _owner(live: dict[str, Any]) -> str | None:
    """The scope a live object belongs to (and is pruned from): a project's namespace, None for
    the cluster-wide objects, ``_NOBODY`` for what the portal never deletes (nodes, others' objects)."""
    kind = live.get("kind", "")
    labels = live.get("metadata", {}).get("labels") or {}
    if kind == "Node" or labels.get(MANAGED_BY_LABEL) != MANAGED_BY_VALUE:
        return _NOBODY
    if labels.get(SCOPE_LABEL) == SCOPE_CLUSTER:
        return None
    if kind == "Namespace":
        return str(live["metadata"]["name"])
    return str(live["metadata"].get("namespace") or _NOBODY)


def _prune_inside_deleted_namespaces(changes: list[Change]) -> list[Change]:
    """Deleting a Namespace deletes what it holds: no request for each object inside."""
    doomed = {change.name for change in changes if change.action == "delete" and change.kind == "Namespace"}
    return [change for change in changes if not (change.action == "delete" and change.namespace in doomed)]


def _failure(errors: list[tuple[str, bool]]) -> DriverError:
    """One error for a push; permanent only when every object failed for a permanent reason."""
    messages = sorted(message for message, _ in errors)
    shown = "; ".join(messages[:3])
    more = f" (and {len(messages) - 3} more)" if len(messages) > 3 else ""
    text = f"{len(messages)} object(s) failed: {shown}{more}"
    return PermanentDriverError(text) if all(permanent for _, permanent in errors) else DriverError(text)
