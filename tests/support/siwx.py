"""A Sign-In-With-X client, as an agent would write it with x402's own helpers: fetch a
challenge from GET /auth/nonce, sign it, encode the SIGN-IN-WITH-X header."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
from eth_account.signers.local import LocalAccount
from x402.extensions.sign_in_with_x import create_siwx_payload, encode_siwx_header


def challenge(base_url: str) -> dict[str, Any]:
    r = httpx.get(f"{base_url}/auth/nonce", timeout=30)
    assert r.status_code == 200, r.text
    info: dict[str, Any] = r.json()
    return info


def sign_challenge(account: LocalAccount, info: dict[str, Any], base_url: str) -> str:
    payload = asyncio.run(create_siwx_payload(info, account, f"{base_url}/auth/nonce"))
    return encode_siwx_header(payload)


def siwx_header(account: LocalAccount, base_url: str) -> dict[str, str]:
    """A fresh, single-use SIGN-IN-WITH-X header for `account` against the server at base_url."""
    return {"SIGN-IN-WITH-X": sign_challenge(account, challenge(base_url), base_url)}


def signed_payload(account: LocalAccount, info: dict[str, Any], signer: LocalAccount | None = None,
                   **changes: Any) -> str:  # fmt: skip
    """A SIGN-IN-WITH-X header for `info` with fields changed (a tampered or foreign challenge),
    signed by `signer` (default: the account it names), built without the client's own checks."""
    from eth_account.messages import encode_defunct
    from x402.extensions.sign_in_with_x import SIWxPayload, create_siwx_message

    fields = {**info, **changes}
    message = create_siwx_message(fields, account.address)
    signature = (signer or account).sign_message(encode_defunct(text=message)).signature.hex()
    payload = SIWxPayload.model_validate(
        {
            **{k: v for k, v in fields.items() if k != "header"},
            "address": account.address,
            "signature": "0x" + signature.removeprefix("0x"),
        }
    )
    return encode_siwx_header(payload)
