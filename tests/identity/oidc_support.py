"""OpenID Connect providers for the tests, both real HTTP servers on loopback:

- ``mock_provider``: oidc-provider-mock, a full provider (authorization form, code exchange, userinfo,
  end-session) whose users and claims the tests set over its API;
- ``TestIssuer``: a small provider of our own whose tokens the tests shape: it signs with keys the
  tests hold (RSA and EC, rotatable), checks PKCE at its token endpoint, records what it was asked,
  and mints ID and access tokens with any claims (a wrong ``aud``, another ``iss``, expired…).

``sso_login`` walks a Django test client through the redirects of a sign-in, the browser's part.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import jwt
import pytest
import requests
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from django.test import Client, override_settings
from django.test.client import Client as DjangoClient
from werkzeug.serving import BaseWSGIServer, make_server
from werkzeug.wrappers import Request, Response

from tenants.oidc.provider import provider_cache_clear

CLIENT_ID = "gpuportal"
CLIENT_SECRET = "portal-client-secret-of-the-tests-0123456789"


def oidc_settings(issuer: str, **extra: Any) -> Any:
    return override_settings(
        GPUPORTAL_OIDC_ISSUER=issuer, GPUPORTAL_OIDC_CLIENT_ID=CLIENT_ID, GPUPORTAL_OIDC_CLIENT_SECRET=CLIENT_SECRET,
        GPUPORTAL_OIDC_NAME="Campus SSO", **extra,
    )


@contextmanager
def _serving(app: Callable[..., Any]) -> Iterator[BaseWSGIServer]:
    server = make_server("localhost", 0, app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


@dataclass
class MockProvider:
    issuer: str

    def user_set(self, sub: str, claims: dict[str, Any]) -> None:
        requests.put(f"{self.issuer}/users/{sub}", json=claims, timeout=5).raise_for_status()


@pytest.fixture(name="mock_provider")
def mock_provider_fixture(monkeypatch: pytest.MonkeyPatch) -> Iterator[MockProvider]:
    from oidc_provider_mock import run_server_in_thread

    monkeypatch.setenv("AUTHLIB_INSECURE_TRANSPORT", "1")  # plain HTTP on loopback
    provider_cache_clear()
    with run_server_in_thread() as server:
        issuer = f"http://localhost:{server.server_port}"
        with oidc_settings(issuer):
            yield MockProvider(issuer=issuer)
    provider_cache_clear()


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


@dataclass
class TestIssuer:
    """A provider whose every token the test decides (see the module)."""

    __test__ = False  # not a test class

    base: str = ""
    rsa_keys: dict[str, rsa.RSAPrivateKey] = field(default_factory=dict)
    ec_keys: dict[str, ec.EllipticCurvePrivateKey] = field(default_factory=dict)
    id_claims: dict[str, Any] = field(default_factory=dict)  # merged into the next ID tokens
    id_header: dict[str, Any] = field(default_factory=dict)
    id_signer: Callable[[dict[str, Any], str], str] | None = None  # (claims, nonce) -> token, instead of mint
    authorize_requests: list[dict[str, str]] = field(default_factory=list)
    token_requests: list[dict[str, str]] = field(default_factory=list)
    hits: dict[str, int] = field(default_factory=dict)
    challenges: dict[str, tuple[str, str, str]] = field(default_factory=dict)  # code -> (challenge, nonce, sub)
    subject: str = "subject-1"
    userinfo: dict[str, Any] = field(default_factory=dict)
    down: bool = False

    @property
    def issuer(self) -> str:
        return self.base

    def key_add(self, kid: str) -> None:
        self.rsa_keys[kid] = rsa.generate_private_key(public_exponent=65537, key_size=2048)

    def jwks(self) -> dict[str, Any]:
        keys = []
        for kid, key in self.rsa_keys.items():
            data = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(key.public_key()))
            keys.append({**data, "kid": kid, "use": "sig", "alg": "RS256"})
        for kid, eckey in self.ec_keys.items():
            data = json.loads(jwt.algorithms.ECAlgorithm.to_jwk(eckey.public_key()))
            keys.append({**data, "kid": kid, "use": "sig", "alg": "ES256"})
        return {"keys": keys}

    def claims(self, **overrides: Any) -> dict[str, Any]:
        now = int(time.time())
        return {"iss": self.base, "sub": self.subject, "aud": CLIENT_ID, "iat": now, "exp": now + 300, **overrides}

    def mint(self, claims: dict[str, Any], *, kid: str = "k1", alg: str = "RS256", headers: dict[str, Any] | None = None,
             key: Any = None) -> str:
        if key is None:
            key = self.ec_keys[kid] if alg.startswith("ES") else self.rsa_keys[kid]
        return jwt.encode(claims, key, algorithm=alg, headers={"kid": kid, **(headers or {})})

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        request = Request(environ)
        self.hits[request.path] = self.hits.get(request.path, 0) + 1
        response = self._answer(request) if not self.down else Response("unavailable", status=503)
        return response(environ, start_response)

    def _answer(self, request: Request) -> Response:
        path = request.path
        if path == "/.well-known/openid-configuration":
            return self._json({
                "issuer": self.base, "authorization_endpoint": f"{self.base}/authorize",
                "token_endpoint": f"{self.base}/token", "userinfo_endpoint": f"{self.base}/userinfo",
                "jwks_uri": f"{self.base}/jwks", "end_session_endpoint": f"{self.base}/logout",
                "id_token_signing_alg_values_supported": ["RS256"],
            })
        if path == "/jwks":
            return self._json(self.jwks())
        if path == "/authorize":
            params = {key: request.args[key] for key in request.args}
            self.authorize_requests.append(params)
            code = _b64(os.urandom(16))
            self.challenges[code] = (params.get("code_challenge", ""), params.get("nonce", ""), self.subject)
            target = f"{params['redirect_uri']}?{urlencode({'code': code, 'state': params['state']})}"
            return Response(status=302, headers={"Location": target})
        if path == "/token":
            form = {key: request.form[key] for key in request.form}
            self.token_requests.append(form)
            challenge, nonce, sub = self.challenges.pop(form.get("code", ""), ("", "", ""))
            verifier = form.get("code_verifier", "")
            if not challenge or _b64(hashlib.sha256(verifier.encode()).digest()) != challenge:
                return self._json({"error": "invalid_grant", "error_description": "PKCE verification failed"}, 400)
            claims = self.claims(sub=sub, nonce=nonce, **self.id_claims)
            token = self.id_signer(claims, nonce) if self.id_signer else self.mint(claims, headers=self.id_header)
            return self._json({"access_token": "opaque-access", "token_type": "Bearer", "id_token": token})
        if path == "/userinfo":
            return self._json({"sub": self.subject, **self.userinfo})
        return Response("not found", status=404)

    @staticmethod
    def _json(body: dict[str, Any], status: int = 200) -> Response:
        return Response(json.dumps(body), status=status, content_type="application/json")


@pytest.fixture(name="test_issuer")
def issuer_fixture() -> Iterator[TestIssuer]:
    issuer = TestIssuer()
    issuer.key_add("k1")
    issuer.ec_keys["e1"] = ec.generate_private_key(ec.SECP256R1())
    provider_cache_clear()
    with _serving(issuer) as server:
        issuer.base = f"http://localhost:{server.server_port}"
        with oidc_settings(issuer.base):
            yield issuer
    provider_cache_clear()


@dataclass
class Walk:
    authorization: dict[str, str]  # the authorization request's parameters
    callback: Any  # the portal's answer to the callback


def sso_login(client: DjangoClient, *, sub: str | None = None, next_url: str = "/", consent: dict[str, str] | None = None) -> Walk:
    """Start at the portal's "Sign in with…", sign in at the provider (the mock's form takes ``sub``),
    and follow the provider's redirect back to the portal's callback."""
    start = client.get("/oidc/login/", {"next": next_url})
    assert start.status_code == 302, start
    location = start["Location"]
    authorization = {key: values[0] for key, values in parse_qs(urlsplit(location).query).items()}
    if sub is not None:
        answer = requests.post(location, data={"sub": sub, **(consent or {})}, allow_redirects=False, timeout=10)
    else:
        answer = requests.get(location, allow_redirects=False, timeout=10)
    assert answer.status_code == 302, answer.text[:500]
    back = urlsplit(answer.headers["Location"])
    assert back.path == "/oidc/callback/"
    return Walk(authorization=authorization, callback=client.get(f"{back.path}?{back.query}"))


__all__ = ["CLIENT_ID", "Client", "MockProvider", "TestIssuer", "Walk", "issuer_fixture", "mock_provider_fixture", "sso_login"]
