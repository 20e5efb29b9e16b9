"""Fixtures of the identity tests: a real slapd (``ldap_server``) and the portal pointed at it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.core.cache import cache

from tests.identity.ldap_server import directory_start, portal_settings, skip_without_ldap

LDAP_BACKEND = "tenants.ldap.backend.DirectoryBackend"


@pytest.fixture(scope="module")
def directory() -> Iterator[Any]:
    """A slapd offering StartTLS and refusing simple binds without it, for the module's tests."""
    skip_without_ldap()
    server = directory_start(tls=True)
    yield server
    server.stop()


@pytest.fixture
def directory_signin(settings: Any, directory: Any) -> Any:
    """The portal signing in against ``directory`` (the LDAP backend after the lockout gate and the
    password backend, as the settings place it); a fresh lockout count."""
    for name, value in portal_settings(directory).items():
        setattr(settings, name, value)
    settings.AUTHENTICATION_BACKENDS = [*settings.AUTHENTICATION_BACKENDS, LDAP_BACKEND]
    cache.clear()
    return directory
