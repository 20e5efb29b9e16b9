"""Talking to the directory with python-ldap (imported only here and in ``backend``): connection
options (timeouts, TLS with the configured CA, certificates always verified), the service
account's connection, the group search of the configured type, and DNs compared as the directory
compares them."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import django_auth_ldap.config as auth_ldap_config
import ldap
import ldap.dn
from django_auth_ldap.config import LDAPSearch, LDAPSettings

from tenants.ldap.conf import GROUP_TYPES, LdapConfig

LDAPError = ldap.LDAPError


def connection_options(config: LdapConfig) -> dict[int, Any]:
    """Per-connection options; ``OPT_X_TLS_NEWCTX`` last, so that the TLS options before it apply."""
    options: dict[int, Any] = {
        ldap.OPT_PROTOCOL_VERSION: ldap.VERSION3,
        ldap.OPT_REFERRALS: 0,
        ldap.OPT_NETWORK_TIMEOUT: config.timeout_seconds,
        ldap.OPT_TIMEOUT: config.timeout_seconds,
        ldap.OPT_X_TLS_REQUIRE_CERT: ldap.OPT_X_TLS_DEMAND,
    }
    if config.ca_file:
        options[ldap.OPT_X_TLS_CACERTFILE] = config.ca_file
    options[ldap.OPT_X_TLS_NEWCTX] = 0
    return options


def service_connect(config: LdapConfig) -> Any:
    """A connection bound as the service account (``GPUPORTAL_LDAP_BIND_DN``), StartTLS first when
    configured; any failure, a refused StartTLS included, raises ``ldap.LDAPError``."""
    connection = ldap.initialize(config.server_uri, bytes_mode=False)
    for option, value in connection_options(config).items():
        connection.set_option(option, value)
    if config.start_tls:
        connection.start_tls_s()
    connection.simple_bind_s(config.bind_dn, config.bind_password)
    return connection


def group_type(config: LdapConfig) -> Any:
    return getattr(auth_ldap_config, GROUP_TYPES[config.group_type][0])()


def group_search(config: LdapConfig) -> LDAPSearch:
    return LDAPSearch(config.group_search_base, ldap.SCOPE_SUBTREE, config.group_filter)


def user_search(config: LdapConfig) -> LDAPSearch:
    return LDAPSearch(config.user_search_base, ldap.SCOPE_SUBTREE, config.user_filter)


def backend_settings(config: LdapConfig) -> LDAPSettings:
    """django-auth-ldap's settings object, built from ours (no ``AUTH_LDAP_*`` settings exist)."""
    return LDAPSettings(
        prefix="_GPUPORTAL_LDAP_UNUSED_",
        defaults={
            "SERVER_URI": config.server_uri,
            "START_TLS": config.start_tls,
            "CONNECTION_OPTIONS": connection_options(config),
            "BIND_DN": config.bind_dn,
            "BIND_PASSWORD": config.bind_password,
            "USER_SEARCH": user_search(config),
            "USER_ATTR_MAP": config.user_attr_map,
            "GROUP_SEARCH": group_search(config),
            "GROUP_TYPE": group_type(config),
            "ALWAYS_UPDATE_USER": True,
            "CACHE_TIMEOUT": 0,
        },
    )


def dn_normal(dn: str) -> str:
    """A DN as the directory compares it: attribute types and values lower-cased, spaces around
    separators dropped; a string that is not a DN is only trimmed and lower-cased."""
    try:
        parts = ldap.dn.str2dn(dn.strip())
    except ldap.DECODING_ERROR:
        return dn.strip().lower()
    return str(ldap.dn.dn2str([[(kind.lower(), value.lower(), flags) for kind, value, flags in rdn] for rdn in parts]))


class _Entry:
    """What django-auth-ldap's group types read of a user: the DN, the attributes, a bound connection."""

    def __init__(self, dn: str, attrs: dict[str, list[str]], connection: Any) -> None:
        self.dn = dn
        self.attrs = attrs
        self.connection = connection


def entry_groups(config: LdapConfig, *, dn: str, attrs: dict[str, list[str]], connection: Any) -> set[str]:
    """The DNs of the groups of the entry (nested ones resolved for the nested types)."""
    infos: Iterable[tuple[str, Any]] = group_type(config).user_groups(_Entry(dn, attrs, connection), group_search(config))
    return {info[0] for info in infos}


def entry_read(connection: Any, dn: str, filterstr: str = "(objectClass=*)") -> dict[str, list[str]] | None:
    """The entry's attributes, or ``None`` when no such entry exists or it does not match ``filterstr``."""
    try:
        results = LDAPSearch(dn, ldap.SCOPE_BASE, filterstr).execute(connection, escape=False)
    except ldap.NO_SUCH_OBJECT:
        return None
    return dict(results[0][1]) if results else None


def users_exist(config: LdapConfig, connection: Any) -> bool:
    """Whether the user search finds anyone at all (a missing base or an empty result: no)."""
    filterstr = config.user_filter % {"user": "*"}
    try:
        found = connection.search_ext_s(config.user_search_base, ldap.SCOPE_SUBTREE, filterstr, ["1.1"], sizelimit=1)
    except ldap.SIZELIMIT_EXCEEDED:
        return True
    except ldap.NO_SUCH_OBJECT:
        return False
    return any(dn is not None for dn, _ in found)
