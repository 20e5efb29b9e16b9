"""The LDAP settings: checked when the settings load (``ldap_settings_check``, so that a bad value
stops the start with a clear message) and read at call time as an ``LdapConfig``.

Nothing here imports python-ldap at module level: the portal starts without it unless
``GPUPORTAL_LDAP_SERVER_URI`` is set.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.core.exceptions import ImproperlyConfigured

from kernel.conf import setting

GROUP_TYPES: dict[str, tuple[str, str]] = {
    # name: (django_auth_ldap.config class, default group filter)
    "groupOfNames": ("GroupOfNamesType", "(objectClass=groupOfNames)"),
    "nestedGroupOfNames": ("NestedGroupOfNamesType", "(objectClass=groupOfNames)"),
    "groupOfUniqueNames": ("GroupOfUniqueNamesType", "(objectClass=groupOfUniqueNames)"),
    "nestedGroupOfUniqueNames": ("NestedGroupOfUniqueNamesType", "(objectClass=groupOfUniqueNames)"),
    "posixGroup": ("PosixGroupType", "(objectClass=posixGroup)"),
    "activeDirectory": ("ActiveDirectoryGroupType", "(objectClass=group)"),
    "nestedActiveDirectory": ("NestedActiveDirectoryGroupType", "(objectClass=group)"),
}
USER_FIELDS = ("first_name", "last_name", "email")
NAMES = (
    "SERVER_URI", "ISSUER", "START_TLS", "ALLOW_PLAIN", "CA_FILE", "BIND_DN", "BIND_PASSWORD", "USER_SEARCH_BASE",
    "USER_FILTER", "USER_ATTR_MAP", "GROUP_SEARCH_BASE", "GROUP_TYPE", "GROUP_FILTER", "DISABLED_FILTER",
    "TIMEOUT_SECONDS", "SYNC_EVERY", "SYNC_MAX_DEACTIVATIONS", "SYNC_MAX_DEACTIVATION_PERCENT",
)  # fmt: skip


@dataclass(frozen=True)
class LdapConfig:
    server_uri: str
    issuer: str  # ExternalIdentity.issuer of the accounts this directory vouches for
    start_tls: bool
    ca_file: str | None
    bind_dn: str
    bind_password: str
    user_search_base: str
    user_filter: str
    user_attr_map: dict[str, str]
    group_search_base: str
    group_type: str
    group_filter: str
    disabled_filter: str | None
    timeout_seconds: float
    sync_max_deactivations: int
    sync_max_deactivation_percent: int


def attr_map_parse(raw: str) -> dict[str, str]:
    """``first_name=givenName,last_name=sn,email=mail`` → a field → attribute map."""
    result: dict[str, str] = {}
    for item in (part.strip() for part in raw.split(",")):
        if not item:
            continue
        field, sep, attribute = (side.strip() for side in item.partition("="))
        if not sep or field not in USER_FIELDS or not attribute:
            raise ImproperlyConfigured(
                f"GPUPORTAL_LDAP_USER_ATTR_MAP: {item!r} must be FIELD=attribute with FIELD one of {', '.join(USER_FIELDS)}"
            )
        result[field] = attribute
    return result


def _uri_protected(uri: str, start_tls: bool) -> bool:
    scheme = uri.split("://", 1)[0].lower()
    return scheme in ("ldaps", "ldapi") or start_tls


def ldap_settings_check(values: Mapping[str, Any]) -> None:
    """Refuse settings that cannot work or that would send passwords in the clear. ``values`` holds
    the ``GPUPORTAL_LDAP_*`` settings (the settings module's globals, or Django's settings)."""

    def get(name: str) -> Any:
        return values.get(f"GPUPORTAL_LDAP_{name}")

    uri = get("SERVER_URI")
    if not uri:
        return
    missing = [module for module in ("ldap", "django_auth_ldap") if importlib.util.find_spec(module) is None]
    if missing:
        raise ImproperlyConfigured(
            "GPUPORTAL_LDAP_SERVER_URI is set but python-ldap and django-auth-ldap are not installed "
            "(install the portal with its `ldap` extra: pip install 'gpuportal[ldap]'; python-ldap builds "
            "against libldap2-dev and libsasl2-dev)"
        )
    for one in str(uri).split():
        if not one.lower().startswith(("ldap://", "ldaps://", "ldapi://")):
            raise ImproperlyConfigured(f"GPUPORTAL_LDAP_SERVER_URI: {one!r} must be an ldap://, ldaps:// or ldapi:// URI")
        if not _uri_protected(one, bool(get("START_TLS"))) and not get("ALLOW_PLAIN"):
            raise ImproperlyConfigured(
                f"GPUPORTAL_LDAP_SERVER_URI {one!r} with GPUPORTAL_LDAP_START_TLS off would send passwords in the "
                "clear: use StartTLS or ldaps://, or set GPUPORTAL_LDAP_ALLOW_PLAIN=true (test directories only)"
            )
    if not get("USER_SEARCH_BASE"):
        raise ImproperlyConfigured("GPUPORTAL_LDAP_USER_SEARCH_BASE must be set when GPUPORTAL_LDAP_SERVER_URI is")
    if "%(user)s" not in str(get("USER_FILTER") or ""):
        raise ImproperlyConfigured("GPUPORTAL_LDAP_USER_FILTER must contain %(user)s, for example (uid=%(user)s)")
    if get("GROUP_TYPE") not in GROUP_TYPES:
        raise ImproperlyConfigured(f"GPUPORTAL_LDAP_GROUP_TYPE must be one of {', '.join(GROUP_TYPES)}, got {get('GROUP_TYPE')!r}")
    ca_file = get("CA_FILE")
    if ca_file and not Path(str(ca_file)).is_file():
        raise ImproperlyConfigured(f"GPUPORTAL_LDAP_CA_FILE {ca_file!r} is not a readable file")
    attr_map_parse(str(get("USER_ATTR_MAP") or ""))


def ldap_configured() -> bool:
    return bool(setting("GPUPORTAL_LDAP_SERVER_URI"))


def ldap_config() -> LdapConfig:
    """The LDAP settings as they stand now; ``ImproperlyConfigured`` when LDAP is off or invalid."""
    values = {f"GPUPORTAL_LDAP_{name}": setting(f"GPUPORTAL_LDAP_{name}") for name in NAMES}
    if not values["GPUPORTAL_LDAP_SERVER_URI"]:
        raise ImproperlyConfigured("LDAP is not configured (GPUPORTAL_LDAP_SERVER_URI is unset)")
    ldap_settings_check(values)
    group_type = str(values["GPUPORTAL_LDAP_GROUP_TYPE"])
    uri = str(values["GPUPORTAL_LDAP_SERVER_URI"])
    return LdapConfig(
        server_uri=uri,
        issuer=str(values["GPUPORTAL_LDAP_ISSUER"] or uri),
        start_tls=bool(values["GPUPORTAL_LDAP_START_TLS"]) and not uri.lower().startswith(("ldaps://", "ldapi://")),
        ca_file=values["GPUPORTAL_LDAP_CA_FILE"] or None,
        bind_dn=str(values["GPUPORTAL_LDAP_BIND_DN"] or ""),
        bind_password=str(values["GPUPORTAL_LDAP_BIND_PASSWORD"] or ""),
        user_search_base=str(values["GPUPORTAL_LDAP_USER_SEARCH_BASE"]),
        user_filter=str(values["GPUPORTAL_LDAP_USER_FILTER"]),
        user_attr_map=attr_map_parse(str(values["GPUPORTAL_LDAP_USER_ATTR_MAP"] or "")),
        group_search_base=str(values["GPUPORTAL_LDAP_GROUP_SEARCH_BASE"] or values["GPUPORTAL_LDAP_USER_SEARCH_BASE"]),
        group_type=group_type,
        group_filter=str(values["GPUPORTAL_LDAP_GROUP_FILTER"] or GROUP_TYPES[group_type][1]),
        disabled_filter=values["GPUPORTAL_LDAP_DISABLED_FILTER"] or None,
        timeout_seconds=float(values["GPUPORTAL_LDAP_TIMEOUT_SECONDS"]),
        sync_max_deactivations=int(values["GPUPORTAL_LDAP_SYNC_MAX_DEACTIVATIONS"]),
        sync_max_deactivation_percent=int(values["GPUPORTAL_LDAP_SYNC_MAX_DEACTIVATION_PERCENT"]),
    )
