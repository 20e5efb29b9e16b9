"""schemathesis' hooks for the fuzz step (loaded through ``SCHEMATHESIS_HOOKS`` by
``tests/fuzz/run.py``): bind each valid ("positive") generated request of a write operation's actor
to real objects, as ``tests/fuzz/bindings.py`` says.

The objects made for a request (a pending allocation to approve, a token to revoke) are made over
the API by the demo users, with ``X-Fuzz-Identity: setup`` so the step's counts keep them apart.
Reads ``GPUPORTAL_FUZZ_PREPARED`` (the JSON of ``tests/fuzz/identities.py``),
``GPUPORTAL_FUZZ_IDENTITY`` and ``GPUPORTAL_FUZZ_URL``.
"""

from __future__ import annotations

import datetime
import functools
import itertools
import json
import os
import random
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

from tests.fuzz import identities
from tests.fuzz.bindings import FIELDS, OPERATIONS, WRITE_METHODS

SETUP = "setup"
Json = dict[str, Any]


class Setup:
    """The API as the demo identities, for the objects a request needs; and what the actor sees."""

    def __init__(self, prepared: Json, identity: str, url: str) -> None:
        self.prepared = prepared
        self.identity = identity
        self.url = url.rstrip("/")
        self.random = random.Random(f"fuzz-bindings-{identity}")  # noqa: S311 - test data, not secrets
        self.counter = itertools.count(1)
        self.now = datetime.datetime.now(datetime.UTC).replace(microsecond=0)
        # Each schemathesis run (one identity) makes its allocations in its own slots.
        self.lane = sorted(prepared["users"]).index(identity) if identity in prepared["users"] else 0
        self.kept: dict[str, Json] = {}  # the objects made once per run (``own``)

    def call(self, identity: str, method: str, path: str, body: Json | None = None) -> Json:
        request = urllib.request.Request(  # noqa: S310 - the fuzz step's own server
            f"{self.url}{path}", method=method, data=None if body is None else json.dumps(body).encode(),
            headers={"Authorization": f"Token {self.prepared['users'][identity]}", "X-Fuzz-Identity": SETUP,
                     "Content-Type": "application/json", "Accept": "application/json"},
        )  # fmt: skip
        try:
            with urllib.request.urlopen(request, timeout=60) as answer:  # noqa: S310
                text = answer.read()
        except urllib.error.HTTPError as exc:
            raise SetupFailed(f"{method} {path} as {identity}: {exc.code} {exc.read()[:300]!r}") from None
        found: Json = json.loads(text) if text else {}
        return found

    def unique(self, prefix: str) -> str:
        return f"{prefix}-{self.identity[:3]}{self.lane}-{next(self.counter)}-{self.random.randrange(10**6)}"

    def named(self, kind: str, name: str) -> int:
        return int(self.prepared["named"][f"{kind}:{name}"])

    def visible(self, kind: str) -> list[Any]:
        seen: list[Any] = self.prepared["visible"].get(self.identity, {}).get(kind) or self.prepared["ids"].get(kind) or []
        return seen

    def pick(self, kind: str) -> Any:
        values = self.visible(kind)
        return self.random.choice(values) if values else 1

    def time(self, delta: datetime.timedelta) -> str:
        return (self.now + delta).strftime("%Y-%m-%dT%H:%M:%SZ")

    def slot(self) -> tuple[str, str]:
        """A start and end one hour apart, each request's own, within the allowed horizon."""
        start = datetime.timedelta(days=1, minutes=90 * next(self.counter) + 37 * self.lane)
        return self.time(start), self.time(start + datetime.timedelta(hours=1))


class SetupFailed(RuntimeError):
    pass


# ---- objects made for one request (recipes): each gives the path parameters it binds ----------------


def allocation_pending(setup: Setup, *, project: str = "nlp-llm", flavor: str = "a100-80gb") -> Json:
    starts_at, ends_at = setup.slot()
    made = setup.call("researcher", "POST", "/api/v1/allocations/", {
        "project": setup.named("project", project), "flavor": setup.named("flavor", flavor), "quantity": 1,
        "priority_class": setup.named("priority_class", "gpu-standard"), "starts_at": starts_at, "ends_at": ends_at,
        "justification": "fuzz step: made for one request",
    })  # fmt: skip
    return {"allocation_id": made["id"]}


def allocation_granted(setup: Setup, **where: str) -> Json:
    made = allocation_pending(setup, **where)
    setup.call("department-admin", "POST", f"/api/v1/allocations/{made['allocation_id']}/approve/", {"comment": "fuzz"})
    return made


def change_pending(setup: Setup) -> Json:
    """A raise of a grant of the step's own department (``identities.STEP_DEPARTMENT``): nlp and acme
    are nearly full at the demo's busy hours, where approving a raise of theirs exceeds the quota."""
    where = {"project": identities.STEP_PROJECT, "flavor": identities.STEP_FLAVOR}
    allocation = allocation_granted(setup, **where)["allocation_id"]
    change = setup.call("researcher", "POST", f"/api/v1/allocations/{allocation}/resize/", {"quantity": 2})
    return {"change_id": change["id"]}


def window_pending(setup: Setup) -> Json:
    begins = datetime.timedelta(days=2, hours=next(setup.counter))
    made = setup.call("department-admin", "POST", "/api/v1/quota-windows/", {
        "quota": setup.named("quota", "nlp"), "kind": "temporary", "begins_at": setup.time(begins),
        "ends_at": setup.time(begins + datetime.timedelta(hours=2)), "limit_delta": "1", "justification": "fuzz",
    })  # fmt: skip
    return {"window_id": made["id"]}


def department_fresh(setup: Setup) -> Json:
    made = setup.call("platform-admin", "POST", "/api/v1/departments/", {"slug": setup.unique("dept"), "name": "Fuzz"})
    return {"department_id": made["id"]}


# A quota or priority class made for one request applies at once as an emergency with its reason
# (with four-eyes on, a plain create answers 202 with a pending rule change, not the object).
EMERGENCY = {"emergency": True, "reason": "fuzz step: an object made for one request"}


def quota_fresh(setup: Setup) -> Json:
    department = department_fresh(setup)["department_id"]
    made = setup.call("platform-admin", "POST", "/api/v1/quotas/",
                      {"department": department, "guaranteed": "1", "limit": "2", **EMERGENCY})
    return {"quota_id": made["id"]}


def priority_class_fresh(setup: Setup) -> Json:
    made = setup.call("platform-admin", "POST", "/api/v1/priority-classes/", {
        "name": setup.unique("pc"), "value": setup.random.randrange(1, 10**6), **EMERGENCY})
    return {"priority_class_id": made["id"]}


def rule_change_pending(setup: Setup) -> Json:
    """A new priority class proposed by the second platform admin, for the platform admin to decide
    (nobody decides their own change)."""
    made = setup.call("second-platform-admin", "POST", "/api/v1/priority-classes/", {
        "name": setup.unique("pc"), "value": setup.random.randrange(1, 10**6)})
    return {"change_id": made["id"]}


def rule_change_own(setup: Setup) -> Json:
    """A new priority class proposed by the platform admin itself, for it to withdraw."""
    made = setup.call("platform-admin", "POST", "/api/v1/priority-classes/", {
        "name": setup.unique("pc"), "value": setup.random.randrange(1, 10**6)})
    return {"change_id": made["id"]}


def flavor_fresh(setup: Setup) -> Json:
    made = setup.call("platform-admin", "POST", "/api/v1/flavors/", flavor_body(setup))
    return {"flavor_id": made["id"]}


def cluster_fresh(setup: Setup) -> Json:
    made = setup.call("platform-admin", "POST", "/api/v1/clusters/", {"name": setup.unique("c"), "driver": "manifests"})
    return {"cluster_id": made["id"]}


def membership_fresh(setup: Setup) -> Json:
    department = department_fresh(setup)["department_id"]
    made = setup.call("platform-admin", "POST", f"/api/v1/departments/{department}/members/",
                      {"user": "carol", "role": "auditor"})
    return {"department_id": department, "membership_id": made["id"]}


def project_fresh(setup: Setup) -> Json:
    made = setup.call("platform-admin", "POST", "/api/v1/projects/", {
        "slug": setup.unique("p"), "name": "Fuzz", "department": setup.named("department", "nlp")})
    return {"project_id": made["id"]}


def project_member_fresh(setup: Setup) -> Json:
    project = project_fresh(setup)["project_id"]
    setup.call("platform-admin", "POST", f"/api/v1/projects/{project}/members/", {"user": "alice"})
    return {"project_id": project, "user_id": setup.named("user", "alice")}


def webhook_fresh(setup: Setup) -> Json:
    department = setup.named("department", "nlp")
    made = setup.call("department-admin", "POST", f"/api/v1/departments/{department}/webhooks/", {
        "name": setup.unique("hook"), "url": "https://hooks.example.org/fuzz"})
    return {"webhook_id": made["id"]}


def group_mapping_fresh(setup: Setup) -> Json:
    made = setup.call("platform-admin", "POST", "/api/v1/group-mappings/", {
        "source": "oidc", "external_group": setup.unique("g"), "department": setup.named("department", "nlp"),
        "role": "researcher"})  # fmt: skip
    return {"mapping_id": made["id"]}


def rate_card_fresh(setup: Setup) -> Json:
    flavor = flavor_fresh(setup)["flavor_id"]
    made = setup.call("platform-admin", "POST", "/api/v1/rate-cards/", {
        "flavor": flavor, "price_per_gpu_hour": "1.50", "currency": "EUR", "valid_from": setup.time(datetime.timedelta())})
    return {"rate_card_id": made["id"]}


def access_token_fresh(setup: Setup) -> Json:
    made = setup.call(setup.identity, "POST", "/api/v1/auth/tokens/", {"name": setup.unique("t")})
    return {"token_id": made["id"]}


def access_token_issued(setup: Setup) -> Json:
    """A token a platform admin issued for the actor (``identities.py``), claimed once."""
    tokens: list[int] = setup.prepared["issued_tokens"].get(setup.identity) or []
    return {"token_id": tokens.pop(0) if tokens else 1}


def node_token_fresh(setup: Setup) -> Json:
    made = setup.call("platform-admin", "POST", "/api/v1/node-tokens/", {
        "cluster": setup.named("cluster", "demo"), "node_name": setup.unique("n")})
    return {"token_id": made["id"]}  # the answer's "token" is the token's text


def idle_policy_fresh(setup: Setup) -> Json:
    """A policy of vision only, inactive: it watches none of the open cases' grants."""
    made = setup.call("platform-admin", "POST", "/api/v1/idle-policies/", {
        "name": setup.unique("idle"), "department": setup.named("department", "vision"), "threshold": 0.05,
        "window_minutes": 120, "grace_minutes": 60, "action": "notify", "max_keeps": 1, "keep_hours": 1,
        "is_active": False})  # fmt: skip
    return {"policy_id": made["id"]}


def own(recipe: Callable[[Setup], Json]) -> Callable[[Setup], Json]:
    """The recipe's object made once per run and changed by every request after: for a change
    that does not consume its object. Each cluster made costs every later change of a priority
    class a push to it (in-process: a class made with 70 clusters took 15 s), and each changed
    object of the demo would change the other identities' runs."""

    def kept(setup: Setup) -> Json:
        if recipe.__name__ not in setup.kept:
            setup.kept[recipe.__name__] = recipe(setup)
        return setup.kept[recipe.__name__]

    kept.__name__ = recipe.__name__.removesuffix("_fresh") + "_own"
    return kept


def node_fresh(setup: Setup) -> Json:
    return {"node_id": setup.pick("node")}


def idle_case_open(setup: Setup) -> Json:
    """An open idle case the seed made for the step (``identities.py``), each used once."""
    cases: list[int] = setup.prepared["open_cases"].get(setup.identity) or []
    return {"case_id": cases.pop(0) if cases else setup.pick("case")}


RECIPES: dict[str, Callable[[Setup], Json]] = {
    function.__name__: function
    for function in (
        allocation_pending, allocation_granted, change_pending, window_pending, department_fresh, quota_fresh,
        priority_class_fresh, flavor_fresh, cluster_fresh, membership_fresh, project_fresh, project_member_fresh,
        webhook_fresh, group_mapping_fresh, rate_card_fresh, access_token_fresh, node_token_fresh, node_fresh,
        idle_case_open, rule_change_pending, rule_change_own, access_token_issued, idle_policy_fresh,
        own(cluster_fresh), own(flavor_fresh), own(quota_fresh), own(priority_class_fresh), own(idle_policy_fresh),
    )
}  # fmt: skip


# ---- field binders: a value the actor may use ---------------------------------------------------------

BINDERS: dict[str, Callable[[Setup], Any]] = {
    **{kind: functools.partial(lambda kind, setup: setup.pick(kind), kind) for kind in (
        "department", "project", "flavor", "cluster", "priority_class", "quota", "node", "policy", "statement")},
    "node_name": lambda setup: setup.prepared["node"]["name"],
    "soon": lambda setup: setup.time(datetime.timedelta(hours=1)),
    "later": lambda setup: setup.time(datetime.timedelta(days=7)),
    "one": lambda setup: 1,
    "username": lambda setup: setup.random.choice(["alice", "bob", "carol", "dave", "erin"]),
    "password": lambda setup: "demo",
    "no_members": lambda setup: [],  # a project's members must belong to its department
}  # fmt: skip


# ---- body fixes: the rules across fields ---------------------------------------------------------------


def flavor_body(setup: Setup) -> Json:
    return {"name": setup.unique("f"), "display_name": "Fuzz", "gpu_model": "NVIDIA A100", "sharing_mode": "exclusive",
            "resource_name": "nvidia.com/gpu", "memory_mib": 81920, "compute_percent": 100, "gpu_equivalents": "1"}


def fix_allocation(setup: Setup, body: Json, context: Json) -> None:
    starts_at, ends_at = setup.slot()
    body.update({"project": setup.named("project", "nlp-llm"), "flavor": setup.named("flavor", "a100-80gb"),
                 "quantity": 1, "starts_at": starts_at, "ends_at": ends_at})
    body.pop("cluster", None)
    body["priority_class"] = setup.named("priority_class", "gpu-standard")


def fix_renew(setup: Setup, body: Json, context: Json) -> None:
    body["ends_at"] = setup.time(datetime.timedelta(days=60))


def fix_resize(setup: Setup, body: Json, context: Json) -> None:
    body["quantity"] = 2


def fix_window(setup: Setup, body: Json, context: Json) -> None:
    for name in ("rrule", "timezone", "duration", "guaranteed_delta", "guaranteed", "limit", "priority_class"):
        body.pop(name, None)
    begins = datetime.timedelta(days=3, hours=next(setup.counter))
    body.update({"quota": setup.named("quota", "nlp"), "kind": "temporary", "begins_at": setup.time(begins),
                 "ends_at": setup.time(begins + datetime.timedelta(hours=3)), "limit_delta": "1"})


# Three requests of the demo's projects and flavors (a whole GPU, MIG instances, a share): the
# run is a whole what-if replay in the request (tasks in-process), over the rules and departments
# the fuzzing made, at a cost of about a second. The last week's history (every request the fuzzing
# made) cost 20 to 40 s a run here, minutes over the run; what-ifs over the history are tested in
# tests/whatifs.
WHAT_IF_WORKLOAD = "".join(json.dumps(line) + "\n" for line in (
    {"submit_at": 0, "department": "nlp", "project": "nlp-llm", "flavor": "a100-80gb", "quantity": 2,
     "runtime_s": 3600, "requested_s": 7200, "priority_class": "gpu-standard", "busy": 0.5},
    {"submit_at": 600, "department": "vision", "project": "vision-seg", "flavor": "a100-mig-1g-10gb", "quantity": 3,
     "runtime_s": 1800, "requested_s": 3600, "priority_class": "gpu-standard", "busy": 0.2},
    {"submit_at": 900, "department": "nlp", "project": "nlp-speech", "flavor": "h100-mps-4", "quantity": 1,
     "runtime_s": 1200, "requested_s": 1800, "priority_class": "gpu-standard", "busy": 0.9},
))


def fix_what_if(setup: Setup, body: Json, context: Json) -> None:
    """A what-if of one valid change over a short uploaded workload (``WHAT_IF_WORKLOAD``)."""
    for name in ("history_days", "history_until", "department"):
        body.pop(name, None)
    body.update({"changes": [{"kind": "quota", "department": "nlp", "limit_delta": "1"}], "history_days": None,
                 "workload": WHAT_IF_WORKLOAD, "workload_format": "jsonl"})


def fix_emergency(setup: Setup, body: Json, context: Json) -> None:
    """A change of the rules marked an emergency states its reason (else it is a 400 naming it)."""
    if body.get("emergency") is True and not str(body.get("reason") or "").strip():
        body["reason"] = "fuzz step: an emergency"


def fix_quota(setup: Setup, body: Json, context: Json) -> None:
    body.update({"department": department_fresh(setup)["department_id"], "guaranteed": "1", "limit": "2"})
    body.pop("flavor", None)
    body.pop("lending_limit", None)
    fix_emergency(setup, body, context)


def fix_quota_numbers(setup: Setup, body: Json, context: Json) -> None:
    body.update({"guaranteed": "1", "limit": "3"})
    body.pop("lending_limit", None)
    fix_emergency(setup, body, context)


def fix_priority_class(setup: Setup, body: Json, context: Json) -> None:
    if "name" in body:
        body["name"] = setup.unique("pc")
    if "value" in body:
        body["value"] = setup.random.randrange(1, 10**6)
    fix_emergency(setup, body, context)


def fix_priority_class_change(setup: Setup, body: Json, context: Json) -> None:
    """A class's name is its Kubernetes object's and never changes (400 naming ``name``)."""
    body.pop("name", None)
    fix_priority_class(setup, body, context)


def fix_node_settings(setup: Setup, body: Json, context: Json) -> None:
    """A demo node stays as the other identities book it: how it offers its GPUs is not changed (a
    change is refused under live reservations, and a generated sharing, replica count and MIG
    layout rarely agree), and it stays schedulable."""
    for name in ("sharing", "sharing_replicas", "mig_layout"):
        body.pop(name, None)
    if "is_schedulable" in body:
        body["is_schedulable"] = True


def fix_idle_reason(setup: Setup, body: Json, context: Json) -> None:
    """Keeping or exempting an idle grant says why."""
    if not str(body.get("reason") or "").strip():
        body["reason"] = "fuzz step: still needed"


def fix_flavor(setup: Setup, body: Json, context: Json) -> None:
    display = body.get("display_name")
    body.clear()
    body.update(flavor_body(setup))
    if isinstance(display, str) and display.strip():
        body["display_name"] = display


def fix_cluster(setup: Setup, body: Json, context: Json) -> None:
    body["name"] = setup.unique("c")
    body["driver"] = "manifests"


def fix_cluster_settings(setup: Setup, body: Json, context: Json) -> None:
    for name in ("prometheus_url", "user_api_server_url", "user_oidc_issuer_url", "user_ca_certificate"):
        body.pop(name, None)


def fix_kubeconfig(setup: Setup, body: Json, context: Json) -> None:
    body["kubeconfig"] = setup.prepared["kubeconfig"]


def fix_department(setup: Setup, body: Json, context: Json) -> None:
    body["slug"] = setup.unique("d")
    body.pop("parent", None)


def fix_membership(setup: Setup, body: Json, context: Json) -> None:
    context_department = department_fresh(setup)["department_id"]
    context["path"] = {"department_id": context_department}


def fix_webhook(setup: Setup, body: Json, context: Json) -> None:
    if "url" in body:
        body["url"] = f"https://hooks.example.org/{setup.unique('w')}"
    if "name" in body:
        body["name"] = setup.unique("hook")
    context["path"] = {"department_id": setup.named("department", "nlp")}


def fix_project(setup: Setup, body: Json, context: Json) -> None:
    body["slug"] = setup.unique("p")


def fix_project_caps(setup: Setup, body: Json, context: Json) -> None:
    body["caps"] = [{"flavor": None, "limit": "2"}]
    context["path"] = {"project_id": setup.named("project", "nlp-llm")}


def fix_idle_policy(setup: Setup, body: Json, context: Json) -> None:
    if "name" in body:
        body["name"] = setup.unique("idle")
    body.pop("priority_class", None)
    body.pop("cluster", None)
    if "department" in body:
        body["department"] = setup.named("department", "nlp")


def fix_rate_card(setup: Setup, body: Json, context: Json) -> None:
    body.update({"flavor": flavor_fresh(setup)["flavor_id"], "currency": "EUR", "valid_from": setup.time(datetime.timedelta())})
    body.pop("valid_to", None)


def fix_correction(setup: Setup, body: Json, context: Json) -> None:
    statement = setup.prepared["statement"]
    context["path"] = {"statement_id": statement["id"]}
    body.update({"project": statement["project"], "flavor": statement["flavor"]})


def fix_unlock(setup: Setup, body: Json, context: Json) -> None:
    body.pop("address", None)
    body["username"] = "alice"


def fix_node_token(setup: Setup, body: Json, context: Json) -> None:
    body.update({"cluster": setup.named("cluster", "demo"), "node_name": setup.unique("n")})


def fix_reject(setup: Setup, body: Json, context: Json) -> None:
    """A rejection needs a comment for the requester."""
    if not str(body.get("comment") or "").strip():
        body["comment"] = "fuzz step: rejected"


def fix_node_report(setup: Setup, body: Json, context: Json) -> None:
    """The token's own node; collected now by an agent started an hour ago."""
    body["node_name"] = setup.prepared["node"]["name"]
    context["path"] = {"node_name": body["node_name"]}
    body["agent_started_at"] = setup.time(-datetime.timedelta(hours=1))
    body["collected_at"] = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    for number, gpu in enumerate(body.get("gpus") or []):  # each GPU and MIG slot once
        if isinstance(gpu, dict):
            gpu["index"] = number
            for slot, instance in enumerate(gpu.get("mig_instances") or []):
                if isinstance(instance, dict):
                    instance["index"] = slot


FIXES: dict[str, Callable[[Setup, Json, Json], None]] = {
    function.__name__.removeprefix("fix_"): function
    for function in (
        fix_allocation, fix_renew, fix_resize, fix_window, fix_quota, fix_quota_numbers, fix_priority_class, fix_flavor,
        fix_cluster, fix_cluster_settings, fix_kubeconfig, fix_department, fix_membership, fix_webhook, fix_project,
        fix_project_caps, fix_idle_policy, fix_rate_card, fix_correction, fix_unlock, fix_node_token, fix_node_report, fix_reject,
        fix_emergency, fix_idle_reason, fix_priority_class_change, fix_node_settings, fix_what_if,
    )
}  # fmt: skip


def bind(setup: Setup, operation_id: str, path_parameters: Json, body: Any) -> tuple[Json, Any]:
    """The request's path parameters and body, bound as ``bindings.OPERATIONS`` says."""
    binding = OPERATIONS[operation_id]
    path = dict(path_parameters)
    for name in path:
        if name in FIELDS:
            path[name] = BINDERS[FIELDS[name]](setup)
    for recipe in dict.fromkeys(binding.targets.values()):
        path.update(RECIPES[recipe](setup))
    if isinstance(body, dict):
        body = dict(body)
        for name in body:
            if name in FIELDS:
                body[name] = BINDERS[FIELDS[name]](setup)
    context: Json = {}
    if binding.body is not None:
        if not isinstance(body, dict):
            body = {}
        FIXES[binding.body](setup, body, context)
    path.update(context.get("path", {}))
    return {name: value for name, value in path.items() if name in path_parameters}, body


_SETUP: list[Setup] = []


def setup_here() -> Setup | None:
    if not _SETUP and os.environ.get("GPUPORTAL_FUZZ_PREPARED"):
        with open(os.environ["GPUPORTAL_FUZZ_PREPARED"], encoding="utf-8") as file:
            prepared = json.load(file)
        _SETUP.append(Setup(prepared, os.environ["GPUPORTAL_FUZZ_IDENTITY"], os.environ["GPUPORTAL_FUZZ_URL"]))
    return _SETUP[0] if _SETUP else None


def before_call(context: Any, case: Any, kwargs: Json) -> None:
    """schemathesis' hook: bind a valid request of a write operation sent by its actor."""
    setup = setup_here()
    operation = case.operation
    operation_id = (operation.definition.raw or {}).get("operationId")
    if setup is None or str(operation.method).lower() not in WRITE_METHODS or operation_id not in OPERATIONS:
        return
    meta = getattr(case, "meta", None)
    if meta is None or not meta.generation.mode.is_positive or OPERATIONS[operation_id].actor != setup.identity:
        return
    try:
        path, body = bind(setup, operation_id, case.path_parameters or {}, case.body)
    except SetupFailed as exc:
        print(f"fuzz setup for {operation_id} failed: {exc}", flush=True)  # noqa: T201 - in schemathesis' output
        return
    case.path_parameters = path
    if isinstance(body, dict):
        case.body = body


def register() -> None:
    import schemathesis

    schemathesis.hook(before_call)


if os.environ.get("GPUPORTAL_FUZZ_PREPARED"):
    register()
