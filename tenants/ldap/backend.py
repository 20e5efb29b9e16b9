"""The LDAP authentication backend: django-auth-ldap configured from ``GPUPORTAL_LDAP_*``.

It sits after ``tenants.signin.LockoutGateBackend`` (and Django's password backend) in
``AUTHENTICATION_BACKENDS``, so a locked username or address is refused before the directory is
asked, and a failed directory bind is counted like a wrong password. On success the account is
found by its link to the entry's DN (``tenants.ldap.accounts``), or created when no account has
that username; the user's groups, nested ones resolved, give their LDAP roles.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import User
from django.db import IntegrityError
from django_auth_ldap.backend import LDAPBackend

from tenants.ldap.accounts import (
    ldap_account_create,
    ldap_identity_find,
    ldap_link_refused,
    ldap_roles_apply,
)
from tenants.ldap.conf import ldap_config
from tenants.ldap.directory import backend_settings

_GROUPS = "_gpuportal_group_dns"


class DirectoryBackend(LDAPBackend):  # type: ignore[misc]  # django-auth-ldap has no type hints
    _settings: Any = None

    @property
    def settings(self) -> Any:
        if self._settings is None:
            self._settings = backend_settings(ldap_config())
        return self._settings

    @settings.setter
    def settings(self, value: Any) -> None:
        self._settings = value

    def get_or_build_user(self, username: str, ldap_user: Any) -> tuple[User, bool]:
        """The account linked to the entry; a new one when none has ``username``; never a local
        account that is not linked (refused: ``AuthenticationFailed``), nor a deactivated one.

        The groups are read here, before anything is written: a directory error fails the sign-in
        without creating an account or touching roles."""
        config = ldap_config()
        dn = ldap_user.dn
        setattr(ldap_user, _GROUPS, set(ldap_user.group_dns))
        identity = ldap_identity_find(issuer=config.issuer, dn=dn)
        if identity is not None:
            if not identity.user.is_active:
                raise ldap_user.AuthenticationFailed("the account is deactivated")
            return identity.user, False
        name = username.strip().lower()
        if User.objects.filter(username__iexact=name).exists():
            ldap_link_refused(username=name, issuer=config.issuer, dn=dn)
            raise ldap_user.AuthenticationFailed("a local account has this username")
        try:
            return ldap_account_create(username=name, issuer=config.issuer, dn=dn), False
        except IntegrityError:  # a first sign-in of the same entry won the race: use its account
            identity = ldap_identity_find(issuer=config.issuer, dn=dn)
            if identity is None or not identity.user.is_active:
                raise ldap_user.AuthenticationFailed("the account was taken meanwhile") from None
            return identity.user, False

    def authenticate_ldap_user(self, ldap_user: Any, password: str) -> User | None:
        user: User | None = super().authenticate_ldap_user(ldap_user, password)
        if user is None:
            return None
        identity = ldap_identity_find(issuer=ldap_config().issuer, dn=ldap_user.dn)
        if identity is None or identity.user_id != user.pk:  # unlinked meanwhile
            return None
        ldap_roles_apply(user=user, identity=identity, groups=getattr(ldap_user, _GROUPS, set()), login=True)
        return user

    def get_user(self, user_id: int) -> User | None:
        """The signed-in user of a session, while the account is active (as Django's own backend)."""
        user: User | None = super().get_user(user_id)
        return user if user is not None and user.is_active else None
