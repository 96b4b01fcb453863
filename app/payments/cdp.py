"""Coinbase CDP's facilitator authentication: every request to it carries a fresh JWT signed
with the CDP API key (ES256 for an EC key in PEM, EdDSA for a base64 Ed25519 key), naming the
one request it is for (`uris`), valid for two minutes. CDP's facilitator settles on Base mainnet.

Given to x402's HTTP facilitator client as its AuthProvider (ENGRAM_CDP_API_KEY_ID and
ENGRAM_CDP_API_KEY_SECRET); the claims follow CDP's own SDK (cdp-sdk, `generate_jwt`), signed
with PyJWT.
"""

from __future__ import annotations

import base64
import secrets
import time
from urllib.parse import urlsplit

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519
from x402.http import AuthHeaders

CDP_FACILITATOR_URL = "https://api.cdp.coinbase.com/platform/v2/x402"
TOKEN_SECONDS = 120

PrivateKey = ec.EllipticCurvePrivateKey | ed25519.Ed25519PrivateKey


def parse_key(secret: str) -> PrivateKey:
    """A CDP API key secret: an EC key in PEM (newlines may come escaped, as in an env file), or
    64 bytes of base64 (an Ed25519 seed and its public key)."""
    text = secret.replace("\\n", "\n")
    if "BEGIN" in text:
        key = serialization.load_pem_private_key(text.encode(), password=None)
        if isinstance(key, ec.EllipticCurvePrivateKey):
            return key
        raise ValueError("the CDP API key secret's PEM holds no EC private key")
    try:
        raw = base64.b64decode(text, validate=True)
    except ValueError as exc:
        raise ValueError("the CDP API key secret is neither PEM nor base64") from exc
    if len(raw) != 64:
        raise ValueError("a base64 CDP API key secret holds 64 bytes (an Ed25519 key)")
    return ed25519.Ed25519PrivateKey.from_private_bytes(raw[:32])


class CdpAuth:
    """x402's AuthProvider for CDP's facilitator: a new token per request."""

    def __init__(self, key_id: str, secret: str, facilitator_url: str) -> None:
        self.key_id = key_id
        self.key = parse_key(secret)
        self.algorithm = "ES256" if isinstance(self.key, ec.EllipticCurvePrivateKey) else "EdDSA"
        parts = urlsplit(facilitator_url.rstrip("/"))
        self.host, self.path = parts.netloc, parts.path

    def token(self, method: str, endpoint: str, now: int | None = None) -> str:
        issued = int(time.time()) if now is None else now
        claims = {
            "sub": self.key_id,
            "iss": "cdp",
            "nbf": issued,
            "exp": issued + TOKEN_SECONDS,
            "uris": [f"{method} {self.host}{self.path}/{endpoint}"],
        }
        headers = {"kid": self.key_id, "typ": "JWT", "nonce": secrets.token_hex(8)}
        return jwt.encode(claims, self.key, algorithm=self.algorithm, headers=headers)

    def _bearer(self, method: str, endpoint: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token(method, endpoint)}"}

    def get_auth_headers(self) -> AuthHeaders:
        return AuthHeaders(
            verify=self._bearer("POST", "verify"),
            settle=self._bearer("POST", "settle"),
            supported=self._bearer("GET", "supported"),
        )
