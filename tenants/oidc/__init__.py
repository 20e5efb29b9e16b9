"""Signing in through an OpenID Connect provider (docs/identity.md, "OpenID Connect").

- ``conf``: the settings, read at call time; OIDC is on when ``GPUPORTAL_OIDC_ISSUER`` is set.
- ``provider``: the provider's discovery document and signing keys, cached per process.
- ``tokens``: checking an ID token (sign-in) or an access token (the API): RS256 (and ES256 for access
  tokens) against the cached keys, ``iss`` exact, ``aud`` holding our client (or API audience), times.
- ``claims``: the groups claim (a dotted path) and the username of a new account.
- ``accounts``: the account of a subject (issuer, ``sub``), never matched by e-mail; the roles its
  groups map to; the audited sign-in.
- ``backend`` and ``views``: mozilla-django-oidc's code flow (state, nonce, PKCE S256), subclassed to
  use the above; the provider's logout URL.
- ``drf``: ``Authorization: Bearer <JWT>`` for the API.
"""
