"""A real OpenLDAP ``slapd`` for the LDAP tests, through python-ldap's ``slapdtest`` (Debian's
``slapd``, on loopback, a temporary database). Tests skip when slapd or python-ldap is missing,
unless ``GPUPORTAL_REQUIRE_LDAP=1`` (``make test``) says this run must prove it."""

from __future__ import annotations

import importlib.util
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest

SUFFIX = "dc=example,dc=org"
PEOPLE = f"ou=people,{SUFFIX}"
GROUPS = f"ou=groups,{SUFFIX}"
NLP_ADMINS = f"cn=gpu-nlp-admins,{GROUPS}"
NLP_RESEARCHERS = f"cn=gpu-nlp-researchers,{GROUPS}"  # has NLP_ADMINS as a member (nested)
VISION = f"cn=gpu-vision,{GROUPS}"
PASSWORDS = {"alice": "alice-directory-pw", "bob": "bob-directory-pw", "carol": "carol-directory-pw"}


def ldap_available() -> str | None:
    """Why the LDAP tests cannot run here, or ``None``."""
    if importlib.util.find_spec("ldap") is None or importlib.util.find_spec("django_auth_ldap") is None:
        return "python-ldap or django-auth-ldap is not installed (the `ldap` extra)"
    if shutil.which("slapd", path=os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"])) is None:
        return "Debian's slapd is not installed (make ldap)"
    if not Path("/etc/ldap/schema/inetorgperson.ldif").exists():
        return "the OpenLDAP schemas are missing (/etc/ldap/schema)"
    return None


def skip_without_ldap() -> None:
    reason = ldap_available()
    if reason is not None:
        if os.environ.get("GPUPORTAL_REQUIRE_LDAP") == "1":
            pytest.fail(f"GPUPORTAL_REQUIRE_LDAP=1 but {reason}")
        pytest.skip(reason)


def _person(uid: str, given: str, surname: str, password: str | None = None) -> str:
    return (
        f"dn: uid={uid},{PEOPLE}\nobjectClass: inetOrgPerson\nuid: {uid}\ncn: {given} {surname}\n"
        f"givenName: {given}\nsn: {surname}\nmail: {uid}@example.org\n"
        f"userPassword: {password or PASSWORDS[uid]}\n\n"
    )


def person_add(server: Any, uid: str, password: str, *groups: str) -> str:
    """Add a person (and make them a member of ``groups``); their DN."""
    server.ldapadd(_person(uid, uid.title(), "Test", password))
    dn = f"uid={uid},{PEOPLE}"
    for group in groups:
        member_set(server, group, dn, present=True)
    return dn


def member_set(server: Any, group: str, member: str, *, present: bool) -> None:
    change = "add" if present else "delete"
    server.ldapmodify(f"dn: {group}\nchangetype: modify\n{change}: member\nmember: {member}\n")


def _group(dn: str, *members: str) -> str:
    cn = dn.split(",", 1)[0].split("=", 1)[1]
    return f"dn: {dn}\nobjectClass: groupOfNames\ncn: {cn}\n" + "".join(f"member: {m}\n" for m in members) + "\n"


DIRECTORY_LDIF = (
    f"dn: {SUFFIX}\nobjectClass: dcObject\nobjectClass: organization\ndc: example\no: Example\n\n"
    f"dn: {PEOPLE}\nobjectClass: organizationalUnit\nou: people\n\n"
    f"dn: {GROUPS}\nobjectClass: organizationalUnit\nou: groups\n\n"
    + _person("alice", "Alice", "Liddell") + _person("bob", "Bob", "Builder") + _person("carol", "Carol", "Danvers")
    + _group(NLP_ADMINS, f"uid=alice,{PEOPLE}")
    + _group(NLP_RESEARCHERS, NLP_ADMINS, f"uid=carol,{PEOPLE}")
    + _group(VISION, f"uid=bob,{PEOPLE}")
)  # fmt: skip


def directory_start(*, tls: bool) -> Any:
    """A started slapd holding ``DIRECTORY_LDIF``. With ``tls`` it offers StartTLS (slapdtest's test
    certificates) and refuses simple binds on a connection without TLS (``olcSecurity:
    simple_bind=64``), so that a successful sign-in proves the bind went over TLS; without, it has no
    TLS at all."""
    from slapdtest import SlapdObject
    from slapdtest._slapdtest import SLAPD_CONF_TEMPLATE

    template = SLAPD_CONF_TEMPLATE
    if tls:
        template = template.replace("olcTLSVerifyClient: try\n", "olcTLSVerifyClient: try\nolcSecurity: simple_bind=64\n")
    else:
        template = "".join(line for line in template.splitlines(keepends=True) if not line.startswith("olcTLS"))

    class Directory(SlapdObject):  # type: ignore[misc]  # python-ldap has no type hints
        slapd_conf_template = template
        suffix = SUFFIX
        openldap_schema_files = ("core.ldif", "cosine.ldif", "inetorgperson.ldif", "nis.ldif")
        TMPDIR = tempfile.gettempdir()  # not slapdtest's default, the working directory (the checkout)

    server = Directory()
    server.start()
    server.ldapadd(DIRECTORY_LDIF)
    return server


def portal_settings(server: Any, **overrides: Any) -> dict[str, Any]:
    """The portal's LDAP settings for ``server`` (StartTLS with slapdtest's CA; the manager binds)."""
    values: dict[str, Any] = {
        "GPUPORTAL_LDAP_SERVER_URI": server.ldap_uri.rstrip("/"),
        "GPUPORTAL_LDAP_ISSUER": None,
        "GPUPORTAL_LDAP_START_TLS": True,
        "GPUPORTAL_LDAP_ALLOW_PLAIN": False,
        "GPUPORTAL_LDAP_CA_FILE": server.cafile,
        "GPUPORTAL_LDAP_BIND_DN": server.root_dn,
        "GPUPORTAL_LDAP_BIND_PASSWORD": server.root_pw,
        "GPUPORTAL_LDAP_USER_SEARCH_BASE": PEOPLE,
        "GPUPORTAL_LDAP_USER_FILTER": "(uid=%(user)s)",
        "GPUPORTAL_LDAP_USER_ATTR_MAP": "first_name=givenName,last_name=sn,email=mail",
        "GPUPORTAL_LDAP_GROUP_SEARCH_BASE": GROUPS,
        "GPUPORTAL_LDAP_GROUP_TYPE": "nestedGroupOfNames",
        "GPUPORTAL_LDAP_GROUP_FILTER": None,
        "GPUPORTAL_LDAP_DISABLED_FILTER": None,
        "GPUPORTAL_LDAP_TIMEOUT_SECONDS": 3.0,
        "GPUPORTAL_LDAP_SYNC_EVERY": 3600,
        "GPUPORTAL_LDAP_SYNC_MAX_DEACTIVATIONS": 5,
        "GPUPORTAL_LDAP_SYNC_MAX_DEACTIVATION_PERCENT": 10,
    }
    values.update(overrides)
    return values


def posix_group_add(server: Any, cn: str, gid: int, *member_uids: str) -> str:
    dn = f"cn={cn},{GROUPS}"
    server.ldapadd(
        f"dn: {dn}\nobjectClass: posixGroup\ncn: {cn}\ngidNumber: {gid}\n" + "".join(f"memberUid: {u}\n" for u in member_uids)
    )
    return dn
