"""Self-contained kubeconfig files (certificates embedded as data)."""

from __future__ import annotations

import base64
from pathlib import Path

import yaml

from kube_testenv.certs import KeyPair


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def render_kubeconfig(
    server: str,
    ca_pem: bytes,
    client: KeyPair,
    user: str,
    cluster: str = "gpuportal-test",
) -> str:
    """A kubeconfig with one cluster, one user and one current context."""
    context = f"{user}@{cluster}"
    document = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": cluster,
                "cluster": {
                    "server": server,
                    "certificate-authority-data": _b64(ca_pem),
                },
            }
        ],
        "users": [
            {
                "name": user,
                "user": {
                    "client-certificate-data": _b64(client.cert_pem),
                    "client-key-data": _b64(client.key_pem),
                },
            }
        ],
        "contexts": [{"name": context, "context": {"cluster": cluster, "user": user}}],
        "current-context": context,
        "preferences": {},
    }
    return yaml.safe_dump(document, sort_keys=False)


def write_kubeconfig(path: Path, server: str, ca_pem: bytes, client: KeyPair, user: str) -> Path:
    path.write_text(render_kubeconfig(server, ca_pem, client, user))
    path.chmod(0o600)
    return path
