"""Settings of cluster delivery, read at call time: the outbox's attempts, backoff and lease, how
objects reach a cluster (prune policy, apply concurrency, request timeout) and what they carry
(the RoleBindings' user prefix, the LimitRange defaults).

Their defaults and the environment are read in ``gpuportal/settings.py`` (the configuration table of
the README lists them all); this module names them for callers and checks what settings cannot.
The inventory's own setting (the kubeconfig keys) stays in ``clusters/conf.py``: clusters sits below
delivery and never reads delivery's settings.
"""

from __future__ import annotations

from django.core.exceptions import ImproperlyConfigured

from kernel.conf import setting_float, setting_int, setting_str

PRUNE_DELETE_NAMESPACE = "delete-namespace"
PRUNE_RETAIN_NAMESPACE = "retain-namespace"
PRUNE_POLICIES = (PRUNE_DELETE_NAMESPACE, PRUNE_RETAIN_NAMESPACE)


def push_max_attempts() -> int:
    """Attempts of one push before its allocation is marked failed."""
    return setting_int("GPUPORTAL_PUSH_MAX_ATTEMPTS")


def push_backoff_base_seconds() -> float:
    return setting_float("GPUPORTAL_PUSH_BACKOFF_BASE_SECONDS")


def push_backoff_max_seconds() -> float:
    return setting_float("GPUPORTAL_PUSH_BACKOFF_MAX_SECONDS")


def push_lease_seconds() -> float:
    """How long a claimed push is left to its worker before another one may take it over.
    Longer than the task time limit, so a slow but live push is not duplicated."""
    return setting_float("GPUPORTAL_PUSH_LEASE_SECONDS")


def prune_policy() -> str:
    policy = setting_str("GPUPORTAL_KUBE_PRUNE_POLICY")
    if policy not in PRUNE_POLICIES:
        raise ImproperlyConfigured(f"GPUPORTAL_KUBE_PRUNE_POLICY must be one of {', '.join(PRUNE_POLICIES)}, got {policy!r}")
    return policy


def kube_user_prefix() -> str:
    """Prefix of RoleBinding user names (``oidc:`` when the API server's OIDC users are prefixed)."""
    return setting_str("GPUPORTAL_KUBE_USER_PREFIX")


def kube_apply_concurrency() -> int:
    return setting_int("GPUPORTAL_KUBE_APPLY_CONCURRENCY")


def kube_request_timeout_seconds() -> float:
    return setting_float("GPUPORTAL_KUBE_REQUEST_TIMEOUT_SECONDS")


def limitrange_default_cpu() -> str:
    return setting_str("GPUPORTAL_LIMITRANGE_DEFAULT_CPU")


def limitrange_default_memory() -> str:
    return setting_str("GPUPORTAL_LIMITRANGE_DEFAULT_MEMORY")


def pending_pod_threshold_seconds() -> int:
    return setting_int("GPUPORTAL_PENDING_POD_THRESHOLD_SECONDS")
