"""Secrets at rest: Fernet (AES-128-CBC + HMAC-SHA256) with keys derived by HKDF-SHA256 from
configured key material and a label per use, so one key material never yields the same key for two
kinds of secret. Several materials allow rotation: the first encrypts, all decrypt.
(``clusters.crypto`` uses it for kubeconfigs, ``notifications`` for webhooks.)
"""

from __future__ import annotations

import base64
import functools
from collections.abc import Sequence

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF


class Unreadable(Exception):
    """The stored secret cannot be decrypted with any configured key."""


@functools.lru_cache(maxsize=16)
def _cipher(materials: tuple[str, ...], label: bytes) -> MultiFernet:
    """The keys derived once per (materials, label): a list of webhooks opens every row's URL."""
    if not materials:
        raise ValueError("no key material")
    fernets = []
    for material in materials:
        derived = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=label).derive(material.encode())
        fernets.append(Fernet(base64.urlsafe_b64encode(derived)))
    return MultiFernet(fernets)


def seal(plaintext: str, *, materials: Sequence[str], label: bytes) -> bytes:
    return _cipher(tuple(materials), label).encrypt(plaintext.encode())


def unseal(token: bytes, *, materials: Sequence[str], label: bytes) -> str:
    try:
        return _cipher(tuple(materials), label).decrypt(bytes(token)).decode()
    except InvalidToken:
        raise Unreadable("cannot be decrypted with the configured key(s)") from None
