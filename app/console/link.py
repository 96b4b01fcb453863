"""`engram console`: sign in to a running Engram's console with a private key, without a browser
wallet. The key signs a SIGN-IN-WITH-X challenge (x402's own helpers, as any SIWX client does);
Engram trades it for a one-time link that signs a browser in and opens the memories view."""

from __future__ import annotations

import asyncio

import httpx
from eth_account import Account
from x402.extensions.sign_in_with_x import create_siwx_payload, encode_siwx_header

TIMEOUT_S = 30.0


class ConsoleLinkError(Exception):
    """Why no link could be had; the message is for the user."""


def console_link(url: str, private_key: str) -> str:
    """A one-time console sign-in link from the Engram at `url` for the key's wallet."""
    base = url.rstrip("/")
    try:
        account = Account.from_key(private_key)
    except (ValueError, TypeError) as exc:
        raise ConsoleLinkError(f"ENGRAM_PRIVATE_KEY is not a private key: {exc}") from exc
    try:
        with httpx.Client(base_url=base, timeout=TIMEOUT_S) as client:
            challenge = _answer(client.get("/auth/nonce"), "GET /auth/nonce")
            payload = asyncio.run(create_siwx_payload(challenge, account, f"{base}/auth/nonce"))
            header = {"SIGN-IN-WITH-X": encode_siwx_header(payload)}
            link = _answer(client.post("/console/auth/links", headers=header), "sign-in")
    except httpx.HTTPError as exc:
        raise ConsoleLinkError(f"Engram at {base} is not reachable: {exc}") from exc
    return str(link["url"])


def _answer(response: httpx.Response, what: str) -> dict[str, object]:
    if response.status_code != 200:
        try:
            message = response.json()["error"]["message"]
        except (ValueError, KeyError, TypeError):
            message = response.text[:200]
        raise ConsoleLinkError(f"{what} failed ({response.status_code}): {message}")
    body: dict[str, object] = response.json()
    return body
