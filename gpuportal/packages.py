"""The project's packages, listed once: the portal's apps from the bottom of the import order to
the top, and the packages that run on their own. Everything else that names them is this list
read again: the settings' ``INSTALLED_APPS``, the architecture tests' layers, and, where a file
cannot import Python (``pyproject.toml``'s package and mypy lists, the README's layout,
docs/architecture.md's table), ``tests/architecture/test_one_rule.py`` compares it with this list.

Plain data: no Django, nothing of the portal.
"""

from __future__ import annotations

# An app may import only the apps before it in this list (docs/architecture.md explains what each owns).
LAYERS: tuple[str, ...] = (
    "kernel",
    "audit",
    "tenants",
    "notifications",
    "clusters",
    "placement",
    "allocations",
    "twin",
    "delivery",
    "custody",
    "telemetry",
    "accounting",
    "whatifs",
    "observability",
    "compliance",
    "frontend",
    "demo",
    "gpuportal",
)
# Packages that run on their own, outside the portal: the node agent (a DaemonSet without
# Django), the command-line client (over the REST API only) and the Kubernetes control plane for
# tests and developers (never deployed).
STANDALONE: tuple[str, ...] = ("agent", "cli", "kube_testenv")
PACKAGES: tuple[str, ...] = LAYERS + STANDALONE
# Packages that the wheel leaves out: the test cluster's control plane (docs/kube-testenv.md).
NEVER_DEPLOYED: tuple[str, ...] = ("kube_testenv",)
SHIPPED: tuple[str, ...] = tuple(package for package in PACKAGES if package not in NEVER_DEPLOYED)

# The Django apps a layer installs, where that is not the layer itself: kernel only its
# Idempotency-Key store, the placement engine and the policy twin (no Django) and gpuportal
# (configuration only) none.
_DJANGO_APPS: dict[str, tuple[str, ...]] = {
    "placement": (), "twin": (), "kernel": ("kernel.idempotency",), "gpuportal": (),
}
# The portal's Django apps, in the import order (the settings install them after Django's own).
PORTAL_APPS: tuple[str, ...] = tuple(app for layer in LAYERS for app in _DJANGO_APPS.get(layer, (layer,)))
