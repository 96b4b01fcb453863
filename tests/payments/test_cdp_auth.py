"""CDP facilitator authentication (ENGRAM_CDP_API_KEY_ID / _SECRET): every request to the
facilitator carries a fresh JWT, signed with the API key, naming that request. A local
facilitator checks each token with the key's public half, as CDP does, and a paid store settles
through it on the dev chain; a wrong key is refused there, and Engram charges nothing."""

from __future__ import annotations

import base64
import uuid
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519
from eth_account import Account
from eth_account.signers.local import LocalAccount
from litestar.testing import AsyncTestClient

from app.asgi import create_app
from app.config import Settings
from app.dev.chain import DevChain
from app.payments.cdp import TOKEN_SECONDS, CdpAuth, parse_key
from tests.support.api import auth
from tests.support.db import count_memories
from tests.support.facilitator_wire import LocalFacilitatorServer
from tests.support.settings import changed
from tests.support.x402 import offer_of, sign_proof

KEY_ID = "organizations/test-org/apiKeys/" + str(uuid.uuid4())


def ec_secret() -> tuple[str, Any]:
    key = ec.generate_private_key(ec.SECP256R1())
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption(),
    ).decode()
    return pem.replace("\n", "\\n"), key.public_key()  # as an env file holds it


def ed25519_secret() -> tuple[str, Any]:
    key = ed25519.Ed25519PrivateKey.generate()
    seed = key.private_bytes(
        serialization.Encoding.Raw, serialization.PrivateFormat.Raw, serialization.NoEncryption()
    )
    public = key.public_key().public_bytes(
        serialization.Encoding.Raw, serialization.PublicFormat.Raw
    )
    return base64.b64encode(seed + public).decode(), key.public_key()


class CdpChecker:
    """What CDP checks of a request's token: signed by the key, for this very request, fresh,
    never reused."""

    def __init__(self, public_key: Any, host: str) -> None:
        self.public_key, self.host = public_key, host
        self.seen: list[dict[str, Any]] = []
        self.nonces: set[str] = set()

    def __call__(self, method: str, path: str, headers: dict[str, str]) -> bool:
        bearer = headers.get("Authorization", "")
        if not bearer.startswith("Bearer "):
            return False
        token = bearer.removeprefix("Bearer ")
        try:
            header = jwt.get_unverified_header(token)
            claims = jwt.decode(token, self.public_key, algorithms=["ES256", "EdDSA"],
                                options={"require": ["exp", "nbf", "sub", "iss"]})  # fmt: skip
        except jwt.PyJWTError:
            return False
        fresh = header["nonce"] not in self.nonces
        self.nonces.add(header["nonce"])
        self.seen.append({"header": header, "claims": claims, "path": path})
        return (
            fresh
            and header["kid"] == claims["sub"] == KEY_ID
            and claims["iss"] == "cdp"
            and claims["exp"] - claims["nbf"] == TOKEN_SECONDS
            and claims["uris"] == [f"{method} {self.host}{path}"]
        )


@pytest.fixture
def payer(chain: DevChain) -> LocalAccount:
    account: LocalAccount = Account.create()
    chain.fund(account.address, 1_000_000, eth_wei=0)
    return account


async def _pay_once(
    settings: Settings, chain: DevChain, payer: LocalAccount, secret: str, checker_key: Any
) -> tuple[Any, CdpChecker]:
    """One paid store through a local facilitator that checks CDP tokens against
    `checker_key`, Engram holding the API key `secret`: the paid call's response."""
    with LocalFacilitatorServer(chain.relayer.key.hex(), chain.rpc_url, "eip155:8453") as remote:
        checker = CdpChecker(checker_key, remote.url.removeprefix("http://"))
        remote.authorize = checker
        app = create_app(changed(settings, limits={"free_tier_calls": 0}, x402={
            "pay_to": str(Account.create().address), "facilitator_url": remote.url,
            "cdp_api_key_id": KEY_ID, "cdp_api_key_secret": secret,
        }))  # fmt: skip
        async with AsyncTestClient(app=app, timeout=60) as client:
            body = {"content": f"Paid through CDP {uuid.uuid4()}"}
            r = await client.post("/v1/store", json=body, headers=auth(payer))
            name, value = sign_proof(payer, offer_of(r))
            r = await client.post("/v1/store", json=body, headers={**auth(payer), name: value})
    return r, checker


@pytest.mark.parametrize("make_secret", [ec_secret, ed25519_secret], ids=["ES256", "EdDSA"])
async def test_a_paid_call_settles_through_a_facilitator_that_checks_cdp_tokens(
    settings: Settings, chain: DevChain, payer: LocalAccount, database_url: str, make_secret: Any
) -> None:
    secret, public_key = make_secret()
    r, checker = await _pay_once(settings, chain, payer, secret, public_key)
    assert r.status_code == 201, r.text
    assert [s["path"] for s in checker.seen] == ["/verify", "/settle"]
    assert all(s["header"]["alg"] == ("ES256" if make_secret is ec_secret else "EdDSA")
               for s in checker.seen)  # fmt: skip
    assert chain.usdc_balance(payer.address) == 1_000_000 - 5000
    assert await count_memories(database_url, payer.address) == 1


async def test_a_token_of_another_key_is_refused_and_nothing_is_charged(
    settings: Settings, chain: DevChain, payer: LocalAccount, database_url: str
) -> None:
    secret, _ = ec_secret()
    _, other_public = ec_secret()
    r, _ = await _pay_once(settings, chain, payer, secret, other_public)
    assert r.status_code == 402, r.text
    assert r.json()["error"]["details"]["reason"] == "unexpected_verify_error"
    assert chain.usdc_balance(payer.address) == 1_000_000
    assert await count_memories(database_url, payer.address) == 0


def test_the_token_names_cdps_own_facilitator_by_default() -> None:
    secret, public_key = ec_secret()
    cdp = CdpAuth(KEY_ID, secret, "https://api.cdp.coinbase.com/platform/v2/x402")
    claims = jwt.decode(cdp.token("POST", "settle"), public_key, algorithms=["ES256"])
    assert claims["uris"] == ["POST api.cdp.coinbase.com/platform/v2/x402/settle"]


@pytest.mark.parametrize(
    "secret",
    [
        "",
        "not base64 !",
        base64.b64encode(b"short").decode(),
        "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----",
    ],
)
def test_a_malformed_secret_is_refused_with_a_reason(secret: str) -> None:
    with pytest.raises(ValueError):
        parse_key(secret)
