"""The charts as helm renders them, held to what the portal's code needs: hardened pods, probes on
the health endpoints, migrations as the owner only, every variable one the settings read, and a
target ClusterRole that covers exactly the kinds and verbs the Kubernetes driver uses."""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from agent.config import ENV_PREFIX, ENV_SETTINGS
from delivery.drivers.kube_identity import EVICTOR_ROLE
from delivery.drivers.kubernetes import KINDS
from delivery.node_configs import DEVICE_PLUGIN_LABEL, MIG_CONFIG_LABEL
from delivery.pinning import MPS_TENANT_LABEL, POLICY_NAME, POOL_LABEL_PREFIX
from delivery.rendering import ProjectState, render_role_bindings
from delivery.volcano import QUEUE_POLICY, SCHEDULER_CONFIGMAP, VOLCANO_NAMESPACE
from tests.deploy.charts import PORTAL, ROOT, TARGET, find, helm, render, value_sets

WORKLOADS = ("Deployment", "DaemonSet", "Job")
PORTAL_SETS = value_sets(PORTAL)
MINIMAL = PORTAL / "ci" / "minimal-values.yaml"


def pod_specs(objects: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    return [(o["metadata"]["name"], o["spec"]["template"]["spec"]) for o in objects if o["kind"] in WORKLOADS]


def env_of(container: dict[str, Any]) -> dict[str, Any]:
    return {item["name"]: item.get("value", item.get("valueFrom")) for item in container.get("env", [])}


@pytest.mark.parametrize("values", PORTAL_SETS, ids=lambda path: path.stem)
def test_every_portal_pod_runs_non_root_read_only_without_capabilities(values: Path) -> None:
    for name, spec in pod_specs(render(PORTAL, values=[values])):
        assert spec["automountServiceAccountToken"] is False, name
        assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}, name
        for container in spec["containers"]:
            context = container["securityContext"]
            assert context["readOnlyRootFilesystem"] is True and context["allowPrivilegeEscalation"] is False, name
            assert context["capabilities"]["drop"] == ["ALL"], name
            assert container["resources"]["requests"] and container["resources"]["limits"]["memory"], name
            if name.endswith("-agent"):  # NVML needs root and, for MIG, CAP_SYS_ADMIN (docs/agent.md)
                assert context["runAsUser"] == 0 and context["capabilities"].get("add", []) in ([], ["SYS_ADMIN"])
                continue
            assert spec["securityContext"]["runAsNonRoot"] is True and spec["securityContext"]["runAsUser"] == 10001
            mounts = {mount["mountPath"] for mount in container["volumeMounts"]}
            assert "/tmp" in mounts, f"{name}: nowhere to write on a read-only root filesystem"


def test_web_probes_the_health_endpoints_with_a_host_the_portal_serves() -> None:
    objects = render(PORTAL, values=[PORTAL / "ci" / "production-values.yaml"])
    [web] = find(objects, "Deployment", "gp-gpu-portal-web")["spec"]["template"]["spec"]["containers"]
    allowed = env_of(web)["GPUPORTAL_ALLOWED_HOSTS"].split(",")
    assert web["livenessProbe"]["httpGet"]["path"] == "/livez" and web["startupProbe"]["httpGet"]["path"] == "/livez"
    assert web["readinessProbe"]["httpGet"]["path"] == "/readyz"
    for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
        [header] = web[probe]["httpGet"]["httpHeaders"]
        assert header == {"name": "Host", "value": "gpuportal.example.com"} and header["value"] in allowed
    assert web["command"] == ["gunicorn", "gpuportal.wsgi:application", "-c", "python:gpuportal.gunicorn_conf"]


def test_beat_is_one_replica_replaced_with_recreate() -> None:
    beat = find(render(PORTAL, values=[MINIMAL], sets=["web.replicas=5"]), "Deployment", "gp-gpu-portal-beat")
    assert beat["spec"]["replicas"] == 1 and beat["spec"]["strategy"] == {"type": "Recreate"}


@pytest.mark.parametrize("values", PORTAL_SETS, ids=lambda path: path.stem)
def test_only_the_migration_hook_sees_the_owners_database_url(values: Path) -> None:
    objects = render(PORTAL, values=[values])
    job = find(objects, "Job")
    assert job["metadata"]["annotations"]["helm.sh/hook"] == "pre-install,pre-upgrade"
    [migrate] = job["spec"]["template"]["spec"]["containers"]
    assert migrate["command"] == ["python", "manage.py", "migrate", "--noinput"]
    env = env_of(migrate)
    assert env["DATABASE_URL"]["secretKeyRef"]["key"] == "migrate-database-url"
    assert env["GPUPORTAL_APP_DATABASE_URL"]["secretKeyRef"]["key"] == "database-url"
    hook_secrets = [o for o in objects if o["kind"] == "Secret" and "helm.sh/hook" in o["metadata"].get("annotations", {})]
    for secret in hook_secrets:  # made before the hook, gone once it succeeded
        assert int(secret["metadata"]["annotations"]["helm.sh/hook-weight"]) < 0
        assert "hook-succeeded" in secret["metadata"]["annotations"]["helm.sh/hook-delete-policy"]
    for name, spec in pod_specs(objects):
        if name.endswith("-migrate"):
            continue
        text = repr(spec)
        assert "migrate-database-url" not in text, name
        runtime = [o for o in objects if o["kind"] == "Secret" and "helm.sh/hook" not in o["metadata"].get("annotations", {})]
        assert all("migrate-database-url" not in o["stringData"] for o in runtime)


@pytest.mark.parametrize("sets", [[], ["serviceAccount.create=false", "serviceAccount.name=portal-ops"]],
                         ids=["chart-account", "operator-account"])
def test_the_migration_hook_runs_as_a_service_account_that_exists_before_the_release(sets: list[str]) -> None:
    """A pre-install hook runs before the release's objects exist, and the API server refuses a pod
    whose ServiceAccount is missing: the hook's account is a hook object made before the Job, or the
    operator's own."""
    objects = render(PORTAL, values=[MINIMAL], sets=sets)
    job = find(objects, "Job")
    account = job["spec"]["template"]["spec"]["serviceAccountName"]
    made = [o for o in objects if o["kind"] == "ServiceAccount" and o["metadata"]["name"] == account]
    if "serviceAccount.create=false" in sets:
        assert account == "portal-ops" and made == []
        return
    [hook_account] = made
    annotations = hook_account["metadata"]["annotations"]
    assert annotations["helm.sh/hook"] == job["metadata"]["annotations"]["helm.sh/hook"]
    assert int(annotations["helm.sh/hook-weight"]) < int(job["metadata"]["annotations"]["helm.sh/hook-weight"])
    assert "hook-succeeded" in annotations["helm.sh/hook-delete-policy"]
    assert hook_account["automountServiceAccountToken"] is False


def test_every_variable_the_chart_sets_is_one_the_portal_reads() -> None:
    settings = "".join((ROOT / "gpuportal" / name).read_text() for name in ("settings.py", "ldap_settings.py", "webhook_settings.py"))
    read = set(re.findall(r'env_\w+\(\s*"([A-Z0-9_]+)"', settings))
    secrets = set(re.findall(r'env_secret\(\s*"([A-Z0-9_]+)"', settings))
    read |= {f"{name}_FILE" for name in secrets}
    read |= {"DATABASE_URL", "CELERY_BROKER_URL", "PROMETHEUS_MULTIPROC_DIR", "GUNICORN_BIND", "GUNICORN_WORKERS"}
    agent = {f"{ENV_PREFIX}{setting.upper()}" for setting in ENV_SETTINGS}
    agent |= {"PYTHONDONTWRITEBYTECODE", "NVIDIA_VISIBLE_DEVICES", "NVIDIA_DRIVER_CAPABILITIES", "NVIDIA_MIG_MONITOR_DEVICES"}
    for values in PORTAL_SETS:
        for name, spec in pod_specs(render(PORTAL, values=[values])):
            known = agent if name.endswith("-agent") else read
            for container in spec["containers"]:
                unknown = set(env_of(container)) - known
                assert not unknown, f"{values.stem} {name}: nothing reads {sorted(unknown)}"


def test_a_changed_secret_or_setting_rolls_the_pods() -> None:
    def annotations(*sets: str) -> dict[str, str]:
        web = find(render(PORTAL, values=[MINIMAL], sets=sets), "Deployment", "gp-gpu-portal-web")
        return dict(web["spec"]["template"]["metadata"]["annotations"])

    before = annotations()
    assert annotations("secrets.cacheUrl=redis://other:6379/1")["checksum/secret"] != before["checksum/secret"]
    assert annotations("config.logLevel=DEBUG")["checksum/config"] != before["checksum/config"]


def test_the_default_deny_policy_covers_every_portal_pod_but_not_the_agent() -> None:
    objects = render(PORTAL, values=[PORTAL / "ci" / "production-values.yaml"])
    deny = find(objects, "NetworkPolicy", "gp-gpu-portal-default-deny")
    assert deny["spec"]["policyTypes"] == ["Ingress", "Egress"] and "ingress" not in deny["spec"]
    selector = deny["spec"]["podSelector"]["matchLabels"]
    for o in objects:
        if o["kind"] in WORKLOADS:
            labels = o["spec"]["template"]["metadata"]["labels"]
            selected = all(labels.get(key) == value for key, value in selector.items())
            assert selected == (o["kind"] != "DaemonSet"), o["metadata"]["name"]
    assert not any(o["kind"] == "NetworkPolicy" for o in render(PORTAL, values=[PORTAL / "ci" / "no-networkpolicy-values.yaml"]))


def test_budgets_only_where_more_than_one_pod_can_run() -> None:
    budgets = {o["metadata"]["name"] for o in render(PORTAL, values=[MINIMAL]) if o["kind"] == "PodDisruptionBudget"}
    assert budgets == {"gp-gpu-portal-web"}  # web: 2 replicas; worker: 1 (a budget would block every drain)
    scaled = render(PORTAL, values=[MINIMAL], sets=["worker.autoscaling.enabled=true"])
    assert {o["metadata"]["name"] for o in scaled if o["kind"] == "PodDisruptionBudget"} == {
        "gp-gpu-portal-web", "gp-gpu-portal-worker"}
    assert find(scaled, "HorizontalPodAutoscaler")["spec"]["scaleTargetRef"]["name"] == "gp-gpu-portal-worker"


def test_helm_lint_passes_for_every_value_set() -> None:
    for chart in (PORTAL, TARGET):
        for values in value_sets(chart):
            result = helm("lint", "--strict", str(chart), "--values", str(values), check=False)
            assert result.returncode == 0, result.stdout + result.stderr


# ------------------------------------------------------------------------------- the target chart


def rules_by_resource(role: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    found: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for rule in role["rules"]:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                found[f"{resource}.{group}" if group else resource].append(rule)
    return found


def verbs(rules: dict[str, list[dict[str, Any]]], resource: str, *, named: bool = False) -> set[str]:
    return {verb for rule in rules.get(resource, []) if bool(rule.get("resourceNames")) == named for verb in rule["verbs"]}


def portal_role(objects: list[dict[str, Any]]) -> dict[str, Any]:
    """The ClusterRole bound to the portal's ServiceAccount (not the evictor role it binds itself)."""
    [role] = [o for o in objects if o["kind"] == "ClusterRole" and o["metadata"]["name"] != EVICTOR_ROLE]
    return role


def test_the_target_role_covers_every_kind_the_driver_pushes_with_exactly_its_verbs() -> None:
    role = portal_role(render(TARGET, values=[TARGET / "ci" / "everything-values.yaml"]))
    rules = rules_by_resource(role)
    admission = {"MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding", "ValidatingAdmissionPolicy",
                 "ValidatingAdmissionPolicyBinding"}
    for kind, info in KINDS.items():
        group = info.group_version.rpartition("/")[0]
        resource = f"{info.plural}.{group}" if group else info.plural
        if kind == "Node":
            assert verbs(rules, resource) == {"get", "list", "patch"}  # labels only: never created or deleted
        elif kind in admission:  # listed by every push; written by name only
            assert verbs(rules, resource) == {"list"}
            assert verbs(rules, resource, named=True) == {"get", "create", "patch", "delete"}
            named = {n for rule in rules[resource] for n in rule.get("resourceNames", [])}
            assert named == {POLICY_NAME, QUEUE_POLICY}
        else:
            assert verbs(rules, resource) == {"get", "list", "create", "patch", "delete"}, kind
    assert "pods" not in rules and "pods/eviction" not in rules  # only through the evictor role, per namespace
    assert "events" not in rules  # the same: why tenants' pods wait is read per namespace


def test_the_evictor_role_lists_and_evicts_pods_and_is_bound_by_the_portal_alone() -> None:
    for values, evicts in ((TARGET / "ci" / "everything-values.yaml", True), (TARGET / "ci" / "minimal-values.yaml", False)):
        objects = render(TARGET, values=[values])
        evictor = find(objects, "ClusterRole", EVICTOR_ROLE)
        rules = rules_by_resource(evictor)
        expected = {"pods": {"get", "list"}, "pods/eviction": {"create"}, "events": {"list"}} if evicts else {}
        assert {resource: verbs(rules, resource) for resource in rules} == expected
        assert not any(b["roleRef"]["name"] == EVICTOR_ROLE for b in objects if b["kind"] in ("RoleBinding", "ClusterRoleBinding"))
    policy = find(render(TARGET, namespace="ops", release="t"), "ValidatingAdmissionPolicy")
    [bindings] = [v["expression"] for v in policy["spec"]["validations"] if "rolebindings" in v["expression"]]
    assert f"object.roleRef.name == '{EVICTOR_ROLE}'" in bindings and "s.name == 't-gpu-portal-target'" in bindings


def test_the_target_role_grants_no_secrets_no_wildcards_no_escalation() -> None:
    for values in value_sets(TARGET):
        role = portal_role(render(TARGET, values=[values]))
        rules = rules_by_resource(role)
        everything = {verb for rule in role["rules"] for verb in rule["verbs"]}
        assert "*" not in everything and not any("*" in r["resources"] + r["apiGroups"] for r in role["rules"])
        assert not everything & {"escalate", "impersonate", "deletecollection", "update"}
        assert "secrets" not in rules and "serviceaccounts" not in rules
        assert "clusterrolebindings.rbac.authorization.k8s.io" not in rules
        assert "pods" not in rules and "pods/eviction" not in rules
        bind = [r for r in role["rules"] if "bind" in r["verbs"]]
        tenant_roles = {b["roleRef"]["name"] for b in render_role_bindings(
            ProjectState(cluster="c", namespace="n", department="d", project="p", grants=(), editors=("a",), viewers=("b",)))}
        assert len(bind) == 1 and set(bind[0]["resourceNames"]) == tenant_roles | {EVICTOR_ROLE} == {"edit", "view", EVICTOR_ROLE}


def test_the_target_defaults_name_the_portals_labels_policies_and_adopted_objects() -> None:
    import yaml

    values = yaml.safe_load((TARGET / "values.yaml").read_text())
    assert set(values["portalAdmissionPolicies"]) == {POLICY_NAME, QUEUE_POLICY}
    assert set(values["nodeLabels"]) == {POOL_LABEL_PREFIX, MPS_TENANT_LABEL, DEVICE_PLUGIN_LABEL, MIG_CONFIG_LABEL}
    assert f"{VOLCANO_NAMESPACE}/{SCHEDULER_CONFIGMAP}" in values["adoptedConfigMaps"]
    policy = find(render(TARGET, namespace="ops", release="t"), "ValidatingAdmissionPolicy")
    [condition] = policy["spec"]["matchConditions"]
    assert "'system:serviceaccount:ops:t-gpu-portal-target'" in condition["expression"]
    assert find(render(TARGET), "ServiceAccount")["automountServiceAccountToken"] is False


def test_the_portal_starts_with_the_configuration_the_chart_gives_it(tmp_path: Path) -> None:
    """The web container's environment (its Secret's files and keys filled in) passes Django's
    deployment checks: every value is one the settings accept."""
    import os
    import subprocess
    import sys

    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    pem = Ed25519PrivateKey.generate().private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()
    secret = {"secret-key": "k" * 50, "audit-signing-key": pem, "database-url": "postgres://app:app@db:5432/gpuportal",
              "broker-url": "redis://redis:6379/0", "cache-url": "redis://redis:6379/1", "metrics-token": "t" * 32}
    for key, value in secret.items():
        (tmp_path / key).write_text(value)
    objects = render(PORTAL, values=[PORTAL / "ci" / "production-values.yaml"])
    [web] = find(objects, "Deployment", "gp-gpu-portal-web")["spec"]["template"]["spec"]["containers"]
    env = {"PATH": os.environ["PATH"], "DJANGO_SETTINGS_MODULE": "gpuportal.settings"}
    for name, value in env_of(web).items():
        if isinstance(value, dict):
            value = secret[value["secretKeyRef"]["key"]]
        env[name] = str(value).replace("/etc/gpuportal/secrets", str(tmp_path)).replace("/var/lib/gpuportal", str(tmp_path))
    env["PROMETHEUS_MULTIPROC_DIR"] = str(tmp_path / "metrics")
    result = subprocess.run([sys.executable, "manage.py", "check", "--deploy", "--fail-level", "ERROR"], cwd=ROOT,
                            env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_agent_reads_pod_resources_from_the_kubelets_socket_directory_read_only() -> None:
    production = PORTAL / "ci" / "production-values.yaml"
    agent = find(render(PORTAL, values=[production]), "DaemonSet")["spec"]["template"]["spec"]
    [container] = agent["containers"]
    [volume] = [v for v in agent["volumes"] if v["name"] == "pod-resources"]
    assert volume["hostPath"] == {"path": "/var/lib/kubelet/pod-resources", "type": "Directory"}
    [mount] = [m for m in container["volumeMounts"] if m["name"] == "pod-resources"]
    assert mount == {"name": "pod-resources", "mountPath": "/var/lib/kubelet/pod-resources", "readOnly": True}
    env = env_of(container)
    assert env["GPUPORTAL_AGENT_POD_RESOURCES_SOCKET"] == "/var/lib/kubelet/pod-resources/kubelet.sock"
    assert env["GPUPORTAL_AGENT_REPLICA_SHARING"] == "time-sliced" and "GPUPORTAL_AGENT_HAMI_RESOURCES" not in env

    sets = ["agent.podResources.replicaSharing=mps", "agent.podResources.hamiResources={nvidia.com/gpu,hami.io/x}"]
    [shared] = find(render(PORTAL, values=[production], sets=sets), "DaemonSet")["spec"]["template"]["spec"]["containers"]
    assert env_of(shared)["GPUPORTAL_AGENT_REPLICA_SHARING"] == "mps"
    assert env_of(shared)["GPUPORTAL_AGENT_HAMI_RESOURCES"] == "nvidia.com/gpu,hami.io/x"

    off = find(render(PORTAL, values=[production], sets=["agent.podResources.enabled=false"]), "DaemonSet")
    spec = off["spec"]["template"]["spec"]
    assert [v["hostPath"]["path"] for v in spec["volumes"] if "hostPath" in v] == ["/proc"]
    assert "GPUPORTAL_AGENT_POD_RESOURCES_SOCKET" not in env_of(spec["containers"][0])
