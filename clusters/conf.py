"""Settings of cluster delivery, read from Django settings first and the environment second.

Every name here belongs in the configuration table of the README; the defaults suit production.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from kernel.env import env_int, env_secret, env_str

PRUNE_DELETE_NAMESPACE = "delete-namespace"
PRUNE_RETAIN_NAMESPACE = "retain-namespace"
PRUNE_POLICIES = (PRUNE_DELETE_NAMESPACE, PRUNE_RETAIN_NAMESPACE)


def _setting(name: str, default: Any) -> Any:
    return getattr(settings, name, default)


def _float(name: str, default: float) -> float:
    raw = _setting(name, None)
    if raw is None:
        raw = env_str(name)
    if raw is None:
        return default
    try:
        return float(raw)
    except (TypeError, ValueError):
        raise ImproperlyConfigured(f"{name} must be a number, got {raw!r}") from None


def _int(name: str, default: int, *, minimum: int = 0) -> int:
    raw = _setting(name, None)
    return int(raw) if raw is not None else env_int(name, default, minimum=minimum)


def _str(name: str, default: str) -> str:
    raw = _setting(name, None)
    if raw is not None:
        return str(raw)
    return env_str(name, default) or default


def push_max_attempts() -> int:
    """Attempts of one push before its allocation is marked failed."""
    return _int("GPUPORTAL_PUSH_MAX_ATTEMPTS", 8, minimum=1)


def push_backoff_base_seconds() -> float:
    return _float("GPUPORTAL_PUSH_BACKOFF_BASE_SECONDS", 2.0)


def push_backoff_max_seconds() -> float:
    return _float("GPUPORTAL_PUSH_BACKOFF_MAX_SECONDS", 300.0)


def push_lease_seconds() -> float:
    """How long a claimed push is left to its worker before another one may take it over.
    Longer than the task time limit, so a slow but live push is not duplicated."""
    return _float("GPUPORTAL_PUSH_LEASE_SECONDS", 330.0)


def prune_policy() -> str:
    policy = _str("GPUPORTAL_KUBE_PRUNE_POLICY", PRUNE_DELETE_NAMESPACE)
    if policy not in PRUNE_POLICIES:
        raise ImproperlyConfigured(f"GPUPORTAL_KUBE_PRUNE_POLICY must be one of {', '.join(PRUNE_POLICIES)}, got {policy!r}")
    return policy


def kube_user_prefix() -> str:
    """Prefix of RoleBinding user names (``oidc:`` when the API server's OIDC users are prefixed)."""
    return _str("GPUPORTAL_KUBE_USER_PREFIX", "")


def kube_apply_concurrency() -> int:
    return _int("GPUPORTAL_KUBE_APPLY_CONCURRENCY", 16, minimum=1)


def kube_request_timeout_seconds() -> float:
    return _float("GPUPORTAL_KUBE_REQUEST_TIMEOUT_SECONDS", 30.0)


def limitrange_default_cpu() -> str:
    return _str("GPUPORTAL_LIMITRANGE_DEFAULT_CPU", "100m")


def limitrange_default_memory() -> str:
    return _str("GPUPORTAL_LIMITRANGE_DEFAULT_MEMORY", "256Mi")


def kubeconfig_keys() -> list[str]:
    """Keys for kubeconfigs at rest, newest first (comma-separated to rotate); empty: derive from SECRET_KEY."""
    raw = _setting("GPUPORTAL_KUBECONFIG_KEY", None)
    if raw is None:
        raw = env_secret("GPUPORTAL_KUBECONFIG_KEY")
    if not raw:
        return []
    return [key.strip() for key in str(raw).split(",") if key.strip()]
