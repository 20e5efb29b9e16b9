"""Signing in against an LDAP directory and keeping accounts in step with it (docs/identity.md, "LDAP").

- ``conf``: the settings, checked at start (``ldap_settings_check``) and read at call time
  (``ldap_config``); python-ldap is imported only when LDAP is configured.
- ``backend``: the authentication backend (django-auth-ldap), under the sign-in lockout.
- ``accounts``: linking a directory entry to a portal account, and the roles its groups give.
- ``sync``: the periodic directory sync (``ldap_directory_sync``).
"""
