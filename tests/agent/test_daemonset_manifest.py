"""deploy/agent-daemonset.yaml: settings the agent understands, minimal host access, and a real
API server accepting it and placing an agent pod on a GPU node."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from agent.config import ENV_PREFIX, ENV_SETTINGS, env_name, parse_config

MANIFEST = Path(__file__).resolve().parents[2] / "deploy" / "agent-daemonset.yaml"
DOCUMENTS = list(yaml.safe_load_all(MANIFEST.read_text(encoding="utf-8")))


def _kind(kind: str) -> dict[str, Any]:
    [document] = [d for d in DOCUMENTS if d["kind"] == kind]
    assert isinstance(document, dict)
    return document


def _pod() -> dict[str, Any]:
    pod: dict[str, Any] = _kind("DaemonSet")["spec"]["template"]["spec"]
    return pod


def _container() -> dict[str, Any]:
    [container] = _pod()["containers"]
    assert isinstance(container, dict)
    return container


def _environment(node_name: str) -> dict[str, str]:
    """The container's environment as the kubelet would build it (with $(VAR) expanded)."""
    environment: dict[str, str] = {}
    for variable in _container()["env"]:
        if "valueFrom" in variable:
            assert variable["valueFrom"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
            value = node_name
        else:
            value = re.sub(r"\$\((\w+)\)", lambda m: environment[m.group(1)], variable["value"])
        environment[variable["name"]] = value
    return environment


def test_the_agent_accepts_the_manifests_settings() -> None:
    environment = _environment("gpu-node-7")
    config = parse_config([], environment)
    assert config.node_name == "gpu-node-7"
    assert config.portal_url is not None and config.portal_url.startswith("https://")
    assert config.token_file == Path("/var/run/secrets/gpuportal/node-tokens/gpu-node-7")
    assert config.proc_root == Path("/host/proc")
    assert not config.allow_plain_http and not config.dry_run and not config.once
    assert config.interval_seconds == 30
    assert config.pod_resources.socket == Path("/var/lib/kubelet/pod-resources/kubelet.sock")
    assert config.pod_resources.replica_sharing == "time-sliced"
    known = {env_name(setting) for setting in ENV_SETTINGS}
    assert {name for name in environment if name.startswith(ENV_PREFIX)} <= known


def test_the_token_comes_from_the_secret_mounted_read_only() -> None:
    [secret_volume] = [v for v in _pod()["volumes"] if "secret" in v]
    assert secret_volume["secret"]["secretName"] == "gpuportal-node-tokens"
    assert secret_volume["secret"]["defaultMode"] == 0o400
    [mount] = [m for m in _container()["volumeMounts"] if m["name"] == secret_volume["name"]]
    assert mount["readOnly"] is True
    assert _environment("n")["GPUPORTAL_AGENT_TOKEN_FILE"].startswith(mount["mountPath"] + "/")


def test_host_access_is_the_hosts_proc_and_the_pod_resources_socket_read_only_and_nothing_else() -> None:
    pod = _pod()
    host_paths = [v for v in pod["volumes"] if "hostPath" in v]
    assert [v["hostPath"]["path"] for v in host_paths] == ["/proc", "/var/lib/kubelet/pod-resources"]
    mounts = {m["name"]: m for m in _container()["volumeMounts"]}
    assert all(mounts[v["name"]]["readOnly"] is True for v in host_paths)
    for flag in ("hostPID", "hostNetwork", "hostIPC"):
        assert not pod.get(flag), flag
    security = _container()["securityContext"]
    assert security.get("privileged") is not True
    assert security["capabilities"]["drop"] == ["ALL"]
    assert security["readOnlyRootFilesystem"] is True
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"]["add"] == ["SYS_ADMIN"]  # MIG monitoring, see the manifest


def test_it_runs_without_kubernetes_api_credentials() -> None:
    account = _kind("ServiceAccount")
    assert account["automountServiceAccountToken"] is False
    assert _pod()["serviceAccountName"] == account["metadata"]["name"]
    assert _pod()["automountServiceAccountToken"] is False


def test_it_lands_on_nodes_labelled_like_gpu_feature_discovery_does() -> None:
    from kube_testenv import GPUNodeSpec  # the project's fake GFD nodes; no cluster needed

    labels = GPUNodeSpec("gpu-node", gpus=8).node_labels()
    assert _pod()["nodeSelector"].items() <= labels.items()
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in _pod()["tolerations"]


def test_a_real_api_server_accepts_it(request: pytest.FixtureRequest) -> None:
    """The API server validates the pod template too (e.g. securityContext combinations)."""
    try:
        cluster = request.getfixturevalue("kube_cluster")  # skips when the control plane is not built
    except pytest.FixtureLookupError:
        pytest.skip("the kube_cluster fixture is not loaded (kube_testenv.pytest_plugin)")
    applied = cluster.kubectl("apply", "-f", str(MANIFEST))
    assert applied.stdout.split("\n")[:3] == [
        "namespace/gpuportal-system created",
        "serviceaccount/gpuportal-agent created",
        "daemonset.apps/gpuportal-agent created",
    ]
    shown = cluster.kubectl("get", "daemonset", "gpuportal-agent", "-n", "gpuportal-system", "-o", "yaml")
    stored = yaml.safe_load(shown.stdout)["spec"]["template"]["spec"]
    assert stored["containers"][0]["securityContext"]["allowPrivilegeEscalation"] is False
    assert stored["volumes"][1]["secret"]["defaultMode"] == 0o400

    cluster.kubectl("delete", "-f", str(MANIFEST), "--wait=false")
