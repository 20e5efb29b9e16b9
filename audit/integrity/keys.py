"""Ed25519 signing and verifier keys in the signed-note conventions (C2SP ``signed-note``).

A key has a name (the log's origin) and a 4-byte key id, ``SHA-256(name || 0x0A || 0x01 || public
key)[:4]``. A verifier key is written ``<name>+<key id hex>+<base64(0x01 || public key)>``; a PEM
public key is also accepted, its name then taken from the signature line that it verifies.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from dataclasses import dataclass

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

ED25519_ALGORITHM = b"\x01"


def key_id(name: str, public_bytes: bytes) -> bytes:
    return hashlib.sha256(name.encode("utf-8") + b"\n" + ED25519_ALGORITHM + public_bytes).digest()[:4]


def _raw_public(public_key: Ed25519PublicKey) -> bytes:
    return public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


@dataclass(frozen=True)
class VerifierKey:
    name: str | None  # None: a PEM key, valid for whatever name its signature line carries
    public_key: Ed25519PublicKey

    @property
    def public_bytes(self) -> bytes:
        return _raw_public(self.public_key)

    def key_id_for(self, name: str) -> bytes:
        return key_id(name, self.public_bytes)

    def matches(self, name: str, id_: bytes) -> bool:
        return (self.name is None or self.name == name) and self.key_id_for(name) == id_

    def verify(self, signature: bytes, message: bytes) -> bool:
        try:
            self.public_key.verify(signature, message)
        except InvalidSignature:
            return False
        return True

    def vkey(self, name: str | None = None) -> str:
        label = self.name or name
        if label is None:
            raise ValueError("a verifier key string needs a name")
        encoded = base64.b64encode(ED25519_ALGORITHM + self.public_bytes).decode("ascii")
        return f"{label}+{self.key_id_for(label).hex()}+{encoded}"


@dataclass(frozen=True)
class SigningKey:
    name: str
    private_key: Ed25519PrivateKey

    @property
    def verifier(self) -> VerifierKey:
        return VerifierKey(name=self.name, public_key=self.private_key.public_key())

    @property
    def key_id(self) -> bytes:
        return self.verifier.key_id_for(self.name)

    def sign(self, message: bytes) -> bytes:
        return self.private_key.sign(message)

    def private_pem(self) -> str:
        return self.private_key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        ).decode("ascii")


def signing_key_generate(name: str) -> SigningKey:
    return SigningKey(name=name, private_key=Ed25519PrivateKey.generate())


def signing_key_parse(name: str, text: str) -> SigningKey:
    """A private key as PEM (PKCS#8) or as the base64 of its 32-byte seed."""
    stripped = text.strip()
    if stripped.startswith("-----BEGIN"):
        key = serialization.load_pem_private_key(stripped.encode("ascii"), password=None)
        if not isinstance(key, Ed25519PrivateKey):
            raise ValueError("the audit signing key must be an Ed25519 private key")
        return SigningKey(name=name, private_key=key)
    try:
        seed = base64.b64decode(stripped, validate=True)
    except binascii.Error:
        raise ValueError("the audit signing key is neither PEM nor base64") from None
    if len(seed) != 32:
        raise ValueError("a base64 Ed25519 seed must decode to 32 bytes")
    return SigningKey(name=name, private_key=Ed25519PrivateKey.from_private_bytes(seed))


def verifier_key_parse(text: str) -> VerifierKey:
    """A verifier key string ``name+id+base64`` or a PEM public key."""
    stripped = text.strip()
    if stripped.startswith("-----BEGIN"):
        key = serialization.load_pem_public_key(stripped.encode("ascii"))
        if not isinstance(key, Ed25519PublicKey):
            raise ValueError("the verifier key must be an Ed25519 public key")
        return VerifierKey(name=None, public_key=key)
    parts = stripped.split("+", 2)  # the base64 part may itself contain "+"
    if len(parts) != 3:
        raise ValueError("a verifier key is 'name+keyid+base64' or a PEM public key")
    name, id_hex, encoded = parts
    try:
        raw = base64.b64decode(encoded, validate=True)
        id_ = bytes.fromhex(id_hex)
    except (binascii.Error, ValueError):
        raise ValueError("the verifier key is not valid base64 / hex") from None
    if len(raw) != 33 or raw[:1] != ED25519_ALGORITHM:
        raise ValueError("the verifier key is not an Ed25519 key")
    verifier = VerifierKey(name=name, public_key=Ed25519PublicKey.from_public_bytes(raw[1:]))
    if verifier.key_id_for(name) != id_:
        raise ValueError("the verifier key's id does not match its name and public key")
    return verifier
