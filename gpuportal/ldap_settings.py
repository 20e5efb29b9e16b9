"""The ``GPUPORTAL_LDAP_*`` settings from the environment (docs/identity.md, "LDAP"), checked when
the settings load: LDAP configured without python-ldap installed, or a plain ldap:// URI without
StartTLS (unless explicitly allowed), stops the start with a clear message."""

from __future__ import annotations

from typing import Any

from kernel.env import env_bool, env_float, env_int, env_secret, env_str
from tenants.ldap.conf import ldap_settings_check

DEFAULT_ATTR_MAP = "first_name=givenName,last_name=sn,email=mail"


def ldap_settings() -> dict[str, Any]:
    values: dict[str, Any] = {
        "GPUPORTAL_LDAP_SERVER_URI": env_str("GPUPORTAL_LDAP_SERVER_URI"),
        # The ExternalIdentity issuer of the directory's accounts; keep it when the server's URI changes.
        "GPUPORTAL_LDAP_ISSUER": env_str("GPUPORTAL_LDAP_ISSUER"),
        "GPUPORTAL_LDAP_START_TLS": env_bool("GPUPORTAL_LDAP_START_TLS", True),
        "GPUPORTAL_LDAP_ALLOW_PLAIN": env_bool("GPUPORTAL_LDAP_ALLOW_PLAIN", False),
        "GPUPORTAL_LDAP_CA_FILE": env_str("GPUPORTAL_LDAP_CA_FILE"),
        "GPUPORTAL_LDAP_BIND_DN": env_str("GPUPORTAL_LDAP_BIND_DN", ""),
        "GPUPORTAL_LDAP_BIND_PASSWORD": env_secret("GPUPORTAL_LDAP_BIND_PASSWORD") or "",
        "GPUPORTAL_LDAP_USER_SEARCH_BASE": env_str("GPUPORTAL_LDAP_USER_SEARCH_BASE", ""),
        "GPUPORTAL_LDAP_USER_FILTER": env_str("GPUPORTAL_LDAP_USER_FILTER", "(uid=%(user)s)"),
        "GPUPORTAL_LDAP_USER_ATTR_MAP": env_str("GPUPORTAL_LDAP_USER_ATTR_MAP", DEFAULT_ATTR_MAP),
        "GPUPORTAL_LDAP_GROUP_SEARCH_BASE": env_str("GPUPORTAL_LDAP_GROUP_SEARCH_BASE", ""),
        "GPUPORTAL_LDAP_GROUP_TYPE": env_str("GPUPORTAL_LDAP_GROUP_TYPE", "nestedGroupOfNames"),
        "GPUPORTAL_LDAP_GROUP_FILTER": env_str("GPUPORTAL_LDAP_GROUP_FILTER"),
        "GPUPORTAL_LDAP_DISABLED_FILTER": env_str("GPUPORTAL_LDAP_DISABLED_FILTER"),
        "GPUPORTAL_LDAP_TIMEOUT_SECONDS": env_float("GPUPORTAL_LDAP_TIMEOUT_SECONDS", 10.0),
        "GPUPORTAL_LDAP_SYNC_EVERY": env_int("GPUPORTAL_LDAP_SYNC_EVERY", 3600, minimum=60),
        "GPUPORTAL_LDAP_SYNC_MAX_DEACTIVATIONS": env_int("GPUPORTAL_LDAP_SYNC_MAX_DEACTIVATIONS", 5, minimum=0),
        "GPUPORTAL_LDAP_SYNC_MAX_DEACTIVATION_PERCENT": env_int(
            "GPUPORTAL_LDAP_SYNC_MAX_DEACTIVATION_PERCENT", 10, minimum=0
        ),
    }
    ldap_settings_check(values)
    return values
