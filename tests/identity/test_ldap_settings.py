"""The LDAP settings are checked when the portal starts: no plain-text passwords unless allowed, a
clear message when python-ldap is missing, and nothing of LDAP at all when it is not configured."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured

from tenants.ldap.conf import attr_map_parse, ldap_settings_check

ROOT = Path(__file__).resolve().parents[2]


def _values(**overrides: Any) -> dict[str, Any]:
    values = {
        "GPUPORTAL_LDAP_SERVER_URI": "ldap://directory.example.org",
        "GPUPORTAL_LDAP_START_TLS": True,
        "GPUPORTAL_LDAP_ALLOW_PLAIN": False,
        "GPUPORTAL_LDAP_USER_SEARCH_BASE": "ou=people,dc=example,dc=org",
        "GPUPORTAL_LDAP_USER_FILTER": "(uid=%(user)s)",
        "GPUPORTAL_LDAP_GROUP_TYPE": "nestedGroupOfNames",
        "GPUPORTAL_LDAP_USER_ATTR_MAP": "email=mail",
    }
    values.update({f"GPUPORTAL_LDAP_{key}": value for key, value in overrides.items()})
    return values


needs_python_ldap = pytest.mark.skipif(
    importlib.util.find_spec("ldap") is None and os.environ.get("GPUPORTAL_REQUIRE_LDAP") != "1",
    reason="python-ldap is not installed (the `ldap` extra)",
)


@needs_python_ldap
def test_plain_ldap_without_starttls_is_refused_unless_explicitly_allowed() -> None:
    ldap_settings_check(_values())
    ldap_settings_check(_values(SERVER_URI="ldaps://directory.example.org", START_TLS=False))
    with pytest.raises(ImproperlyConfigured, match="in the clear"):
        ldap_settings_check(_values(START_TLS=False))
    ldap_settings_check(_values(START_TLS=False, ALLOW_PLAIN=True))


@needs_python_ldap
@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"SERVER_URI": "http://directory.example.org"}, "must be an ldap://"),
        ({"USER_SEARCH_BASE": ""}, "USER_SEARCH_BASE must be set"),
        ({"USER_FILTER": "(uid=alice)"}, "must contain %\\(user\\)s"),
        ({"GROUP_TYPE": "wheel"}, "GROUP_TYPE must be one of"),
        ({"USER_ATTR_MAP": "is_superuser=admin"}, "FIELD=attribute"),
        ({"CA_FILE": "/nonexistent/ca.pem"}, "not a readable file"),
    ],
)
def test_settings_that_cannot_work_are_refused(overrides: dict[str, Any], message: str) -> None:
    with pytest.raises(ImproperlyConfigured, match=message):
        ldap_settings_check(_values(**overrides))


def test_ldap_configured_without_python_ldap_names_the_missing_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "ldap" else real(name, *a))
    with pytest.raises(ImproperlyConfigured, match="`ldap` extra"):
        ldap_settings_check(_values())
    ldap_settings_check(_values(SERVER_URI=None))  # not configured: python-ldap is not needed


def test_the_attribute_map_is_parsed() -> None:
    assert attr_map_parse("first_name=givenName, last_name = sn,email=mail") == {
        "first_name": "givenName", "last_name": "sn", "email": "mail",
    }  # fmt: skip
    assert attr_map_parse("") == {}


def _settings_in_a_new_process(**env: str) -> subprocess.CompletedProcess[str]:
    code = (
        "import django; django.setup(); from django.conf import settings; "
        "print(' '.join(b for b in settings.AUTHENTICATION_BACKENDS if 'ldap' in b) or 'no-ldap-backend'); "
        "print('tenants-ldap-sync' in settings.CELERY_BEAT_SCHEDULE)"
    )
    environment = {k: v for k, v in os.environ.items() if not k.startswith("GPUPORTAL_LDAP_")}
    environment.update({"DJANGO_SETTINGS_MODULE": "gpuportal.settings", "GPUPORTAL_DEBUG": "true", **env})
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=environment, capture_output=True, text=True,
                          timeout=120, check=False)


def test_the_portal_starts_without_ldap_and_adds_the_backend_and_sync_only_when_configured() -> None:
    plain = _settings_in_a_new_process()
    assert plain.returncode == 0, plain.stderr
    assert plain.stdout.split() == ["no-ldap-backend", "False"]
    if importlib.util.find_spec("ldap") is None and os.environ.get("GPUPORTAL_REQUIRE_LDAP") != "1":
        return
    configured = _settings_in_a_new_process(
        GPUPORTAL_LDAP_SERVER_URI="ldap://directory.example.org", GPUPORTAL_LDAP_USER_SEARCH_BASE="dc=example,dc=org"
    )
    assert configured.returncode == 0, configured.stderr
    assert configured.stdout.split() == ["tenants.ldap.backend.DirectoryBackend", "True"]
    refused = _settings_in_a_new_process(
        GPUPORTAL_LDAP_SERVER_URI="ldap://directory.example.org", GPUPORTAL_LDAP_USER_SEARCH_BASE="dc=example,dc=org",
        GPUPORTAL_LDAP_START_TLS="false",
    )  # fmt: skip
    assert refused.returncode != 0 and "in the clear" in refused.stderr
