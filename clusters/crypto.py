"""Kubeconfigs at rest: Fernet (AES-128-CBC + HMAC-SHA256) with keys derived by HKDF-SHA256.

The key material is ``GPUPORTAL_KUBECONFIG_KEY`` (or ``_FILE``); several comma-separated keys
allow rotation (the first encrypts, all decrypt). Without it the key is derived from
``SECRET_KEY``: convenient, but rotating SECRET_KEY then makes stored kubeconfigs unreadable, and
anyone with SECRET_KEY can read them, so production should set a dedicated key.
"""

from __future__ import annotations

from django.conf import settings

from clusters import conf
from kernel.sealing import Unreadable, seal, unseal

_INFO = b"gpuportal kubeconfig at rest v1"


class KubeconfigUnreadable(Exception):
    """The stored kubeconfig cannot be decrypted with any configured key."""


def _materials() -> list[str]:
    return conf.kubeconfig_keys() or [str(settings.SECRET_KEY)]


def kubeconfig_encrypt(plaintext: str) -> bytes:
    return seal(plaintext, materials=_materials(), label=_INFO)


def kubeconfig_decrypt(token: bytes) -> str:
    try:
        return unseal(token, materials=_materials(), label=_INFO)
    except Unreadable:
        raise KubeconfigUnreadable(
            "the stored kubeconfig cannot be decrypted: GPUPORTAL_KUBECONFIG_KEY (or SECRET_KEY) changed; "
            "upload the kubeconfig again"
        ) from None
