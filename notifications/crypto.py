"""Webhook URLs and secrets at rest (``kernel.sealing``, with this use's own label)."""

from __future__ import annotations

from kernel.sealing import seal, unseal
from notifications import conf

_LABEL = b"gpuportal webhook at rest v1"


def close_text(plaintext: str) -> bytes:
    return seal(plaintext, materials=conf.encryption_keys(), label=_LABEL)


def open_text(token: bytes) -> str:
    return unseal(token, materials=conf.encryption_keys(), label=_LABEL)
