"""helm itself installs, upgrades and uninstalls the portal chart on the real API server: the
migration hook runs first, with a Secret of its own (the release's Secret does not exist yet at
pre-install), before any of the release's pods; both hook objects are gone once the Job succeeded;
an upgrade runs the hook again and rolls the pods whose configuration changed. Nothing runs pods
here (no kubelet, no Job controller), so the test plays the Job controller: it creates the Job's
pod, which the API server's ServiceAccount admission refuses unless the pod's ServiceAccount exists
(the hook brings its own: the release's does not exist yet at pre-install), then marks the Job done."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tests.deploy.charts import PORTAL, finished, helm_against

if TYPE_CHECKING:
    from kube_testenv.cluster import KubeTestCluster

MINIMAL = PORTAL / "ci" / "minimal-values.yaml"
RELEASE = "gp"
NAME = f"{RELEASE}-gpu-portal"


def _run_the_hook(api: Any, namespace: str) -> dict[str, Any]:
    """Wait for the migration Job, note what exists while it runs, then mark it complete as the
    Job controller would once its pod exited 0."""
    from kubernetes import client

    from kube_testenv import wait_for

    batch, core, apps = client.BatchV1Api(api), client.CoreV1Api(api), client.AppsV1Api(api)

    def job() -> Any:
        try:
            return batch.read_namespaced_job(f"{NAME}-migrate", namespace)
        except client.ApiException as error:
            if error.status == 404:
                return None
            raise

    found = wait_for(job, timeout=60, what="the migration hook's Job")
    seen = {
        "secrets": {s.metadata.name for s in core.list_namespaced_secret(namespace).items},
        "service_accounts": {a.metadata.name for a in core.list_namespaced_service_account(namespace).items},
        "deployments": {d.metadata.name for d in apps.list_namespaced_deployment(namespace).items},
        "job": found,
    }
    template = found.spec.template
    pod = client.V1Pod(metadata=client.V1ObjectMeta(name=f"{NAME}-migrate-run", labels=template.metadata.labels),
                       spec=template.spec)
    core.create_namespaced_pod(namespace, pod)  # refused (403) if the pod's ServiceAccount is missing
    core.delete_namespaced_pod(f"{NAME}-migrate-run", namespace, grace_period_seconds=0)
    now = "2026-01-01T00:00:00Z"
    batch.patch_namespaced_job_status(f"{NAME}-migrate", namespace, {"status": {
        "startTime": now, "completionTime": now, "succeeded": 1, "conditions": [
            {"type": "SuccessCriteriaMet", "status": "True", "lastTransitionTime": now},
            {"type": "Complete", "status": "True", "lastTransitionTime": now}]}})  # fmt: skip
    return seen


def test_helm_runs_the_migration_hook_before_the_release_and_again_on_upgrade(
    kube_cluster: KubeTestCluster, tmp_path: Path
) -> None:
    from kubernetes import client

    namespace = f"helm-{uuid.uuid4().hex[:6]}"
    with kube_cluster.api_client() as api:
        core, apps = client.CoreV1Api(api), client.AppsV1Api(api)
        install = helm_against(kube_cluster.kubeconfig, tmp_path, "install", RELEASE, str(PORTAL), "--namespace", namespace,
                        "--create-namespace", "--values", str(MINIMAL))
        seen = _run_the_hook(api, namespace)
        finished(install)

        assert f"{NAME}-migrate" in seen["secrets"]  # the hook's own Secret, made before the Job
        assert NAME not in seen["secrets"] and seen["deployments"] == set()  # nothing of the release yet
        assert NAME not in seen["service_accounts"]  # the release's ServiceAccount does not exist yet
        assert seen["job"].spec.template.spec.service_account_name == f"{NAME}-migrate"
        [container] = seen["job"].spec.template.spec.containers
        refs = {e.name: e.value_from.secret_key_ref for e in container.env if e.value_from}
        assert (refs["DATABASE_URL"].name, refs["DATABASE_URL"].key) == (f"{NAME}-migrate", "migrate-database-url")
        assert refs["GPUPORTAL_APP_DATABASE_URL"].name == f"{NAME}-migrate"

        secrets = {s.metadata.name for s in core.list_namespaced_secret(namespace).items if s.type == "Opaque"}
        assert secrets == {NAME}  # the hook's Secret is gone with its Job; the runtime one stays
        accounts = {a.metadata.name for a in core.list_namespaced_service_account(namespace).items}
        assert f"{NAME}-migrate" not in accounts and NAME in accounts  # so is its ServiceAccount
        deployments = {d.metadata.name: d for d in apps.list_namespaced_deployment(namespace).items}
        assert set(deployments) == {f"{NAME}-web", f"{NAME}-worker", f"{NAME}-beat"}
        before = deployments[f"{NAME}-web"].spec.template.metadata.annotations["checksum/config"]

        upgrade = helm_against(kube_cluster.kubeconfig, tmp_path, "upgrade", RELEASE, str(PORTAL), "--namespace", namespace,
                        "--values", str(MINIMAL), "--set", "config.logLevel=DEBUG")
        _run_the_hook(api, namespace)  # pre-upgrade: migrations before the new pods
        finished(upgrade)
        web = apps.read_namespaced_deployment(f"{NAME}-web", namespace)
        assert web.spec.template.metadata.annotations["checksum/config"] != before

        finished(helm_against(kube_cluster.kubeconfig, tmp_path, "uninstall", RELEASE, "--namespace", namespace))
        assert apps.list_namespaced_deployment(namespace).items == []
    kube_cluster.kubectl("delete", "namespace", namespace, "--wait=false")
