"""Kubeconfigs at rest: Fernet (AES-128-CBC + HMAC-SHA256) with keys derived by HKDF-SHA256.

The key material is ``GPUPORTAL_KUBECONFIG_KEY`` (or ``_FILE``); several comma-separated keys
allow rotation (the first encrypts, all decrypt). Without it the key is derived from
``SECRET_KEY``: convenient, but rotating SECRET_KEY then makes stored kubeconfigs unreadable, and
anyone with SECRET_KEY can read them, so production should set a dedicated key.
"""

from __future__ import annotations

import base64

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from django.conf import settings

from clusters import conf

_INFO = b"gpuportal kubeconfig at rest v1"


class KubeconfigUnreadable(Exception):
    """The stored kubeconfig cannot be decrypted with any configured key."""


def _fernet_for(material: str) -> Fernet:
    derived = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=_INFO).derive(material.encode())
    return Fernet(base64.urlsafe_b64encode(derived))


def _cipher() -> MultiFernet:
    keys = conf.kubeconfig_keys() or [str(settings.SECRET_KEY)]
    return MultiFernet([_fernet_for(key) for key in keys])


def kubeconfig_encrypt(plaintext: str) -> bytes:
    return _cipher().encrypt(plaintext.encode())


def kubeconfig_decrypt(token: bytes) -> str:
    try:
        return _cipher().decrypt(bytes(token)).decode()
    except InvalidToken:
        raise KubeconfigUnreadable(
            "the stored kubeconfig cannot be decrypted: GPUPORTAL_KUBECONFIG_KEY (or SECRET_KEY) changed; "
            "upload the kubeconfig again"
        ) from None
