"""Settings of the inventory, read at call time: the keys that encrypt kubeconfigs at rest.

Their defaults and the environment are read in ``gpuportal/settings.py`` (the configuration table of
the README lists them all). Delivery's settings (pushes, prune policy, the Kubernetes client, the
LimitRange defaults) are delivery's own, in ``delivery/conf.py``.
"""

from __future__ import annotations

from kernel.conf import setting_optional_str


def kubeconfig_keys() -> list[str]:
    """Keys for kubeconfigs at rest, newest first (comma-separated to rotate); empty: derive from SECRET_KEY."""
    raw = setting_optional_str("GPUPORTAL_KUBECONFIG_KEY")
    if raw is None:
        return []
    return [key.strip() for key in raw.split(",") if key.strip()]
