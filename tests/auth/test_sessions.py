"""Sessions: POST /auth/session trades a wallet signature for a JWT, and `Authorization: Bearer`
then stands in for x-wallet-auth everywhere (same wallet, same free tier). Keys rotate through
ENGRAM_JWT_SECRETS; with none configured, the database keeps one generated secret."""

from __future__ import annotations

import base64
import hashlib
import json
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import asyncpg
import jwt
import pytest
from eth_account import Account
from eth_account.messages import encode_defunct
from eth_account.signers.local import LocalAccount
from litestar import Litestar
from litestar.testing import AsyncTestClient

from app.auth.middleware import WalletAuthMiddleware
from app.auth.session import (
    GENERATED_SECRET_SETTING,
    SessionConfigError,
    SessionTokens,
    derived_kid,
    parse_keys,
)
from app.auth.signature import WalletVerifier
from app.config import Settings
from app.core.errors import Unauthorized
from tests.support.api import auth
from tests.support.db import count_memories

OLD = "old-key:" + "o" * 64
NEW = "new-key:" + "n" * 64
SEVEN_DAYS = 7 * 86_400


def _proof(account: LocalAccount, ts: int | None = None, prefix: str = "0x") -> dict[str, Any]:
    ts = int(time.time()) if ts is None else ts
    signed = account.sign_message(encode_defunct(text=f"memoclaw-auth:{ts}"))
    return {
        "address": account.address,
        "timestamp": ts,
        "signature": prefix + signed.signature.hex().removeprefix("0x"),
    }


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def _session(client: AsyncTestClient, account: LocalAccount) -> str:
    r = await client.post("/auth/session", json=_proof(account))
    assert r.status_code == 200, r.text
    return str(r.json()["token"])


def _craft(secret: str, kid: str | None, wallet: str, **claims: Any) -> str:
    now = int(time.time())
    payload = {"sub": wallet, "iat": now, "exp": now + 3600, "jti": "j1", **claims}
    headers = {"kid": kid} if kid is not None else None
    return jwt.encode(payload, secret, algorithm="HS256", headers=headers)


def _secret(entry: str) -> str:
    return entry.split(":", 1)[1]


def _b64(data: dict[str, Any]) -> str:
    raw = json.dumps(data, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


@asynccontextmanager
async def _app_client(
    make_app: Callable[..., Litestar], **changes: Any
) -> AsyncIterator[AsyncTestClient]:
    async with AsyncTestClient(app=make_app(**changes), timeout=60) as c:
        yield c


def _error(r) -> dict[str, Any]:
    assert {"code", "message", "details"} <= set(r.json()["error"])
    return dict(r.json()["error"])


# ---- issuing ---------------------------------------------------------------------------------


async def test_session_issues_a_7_day_jwt(client: AsyncTestClient, wallet) -> None:
    before = int(time.time())
    r = await client.post("/auth/session", json=_proof(wallet))
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["wallet"] == wallet.address.lower()
    assert body["token_type"] == "Bearer" and body["expires_in"] == SEVEN_DAYS
    header = jwt.get_unverified_header(body["token"])
    assert header["alg"] == "HS256" and header["kid"]
    claims = jwt.decode(body["token"], options={"verify_signature": False})
    assert claims["sub"] == wallet.address.lower()
    assert claims["exp"] - claims["iat"] == SEVEN_DAYS and claims["iat"] >= before
    assert len(claims["jti"]) >= 16
    assert body["expires_at"].endswith("Z")
    assert body["expires_at"].startswith(time.strftime("%Y-%m-%dT", time.gmtime(claims["exp"])))
    # each sign-in is its own token
    assert (
        claims["jti"]
        != jwt.decode(await _session(client, wallet), options={"verify_signature": False})["jti"]
    )


async def test_session_accepts_the_clients_signature_and_timestamp_forms(
    client: AsyncTestClient, wallet
) -> None:
    ts = int(time.time())
    for proof in (
        _proof(wallet, ts, prefix=""),  # the Python SDK's form
        _proof(wallet, ts, prefix="0x"),  # the CLI's and MCP's
        {**_proof(wallet, ts), "timestamp": str(ts)},
        {**_proof(wallet, ts), "address": wallet.address.lower()},
    ):
        r = await client.post("/auth/session", json=proof)
        assert r.status_code == 200, (proof, r.text)
        assert r.json()["wallet"] == wallet.address.lower()


async def test_session_refuses_bad_proofs(client: AsyncTestClient, wallet, database_url) -> None:
    impostor = Account.create()
    forged = {**_proof(impostor), "address": wallet.address}
    stale = _proof(wallet, int(time.time()) - 1000)
    future = _proof(wallet, int(time.time()) + 1000)
    for body, says in ((forged, "not made by"), (stale, "Stale"), (future, "future")):
        r = await client.post("/auth/session", json=body)
        assert r.status_code == 401, r.text
        err = _error(r)
        assert err["code"] == "UNAUTHORIZED" and says in err["message"]
        assert "token" not in r.json()

    good = _proof(wallet)
    malformed: list[Any] = [
        {},
        {"address": good["address"], "timestamp": good["timestamp"]},
        {**good, "address": "0x1234"},
        {**good, "address": None},
        {**good, "signature": "zz" * 65},
        {**good, "signature": good["signature"][:-2]},
        {**good, "timestamp": "soon"},
        {**good, "timestamp": -5},
        {**good, "timestamp": 1.5},
        [good],
    ]
    for body in malformed:
        r = await client.post("/auth/session", json=body)
        assert r.status_code == 422, (body, r.text)
        assert _error(r)["code"] == "VALIDATION_ERROR"
    r = await client.post(
        "/auth/session", content=b"{not json", headers={"content-type": "application/json"}
    )
    assert r.status_code == 422  # malformed JSON: the contract's VALIDATION_ERROR
    assert await count_memories(database_url, wallet.address) == 0


async def test_session_route_is_public_and_free(client: AsyncTestClient, wallet) -> None:
    # no header needed (the body is the proof), and signing in costs no free call
    r = await client.post("/auth/session", json=_proof(wallet))
    assert r.status_code == 200
    status = await client.get("/v1/free-tier/status", headers=_bearer(r.json()["token"]))
    assert status.json()["free_tier_used"] == 0


# ---- using a token -----------------------------------------------------------------------------


async def test_bearer_counts_like_the_wallet_header(
    client: AsyncTestClient, wallet, database_url
) -> None:
    token = await _session(client, wallet)
    r = await client.get("/v1/memories", headers=_bearer(token))
    assert r.status_code == 200 and r.headers["x-free-tier-remaining"] == "100"

    r = await client.post(
        "/v1/store", json={"content": "stored with a token"}, headers=_bearer(token)
    )
    assert r.status_code == 201, r.text
    assert r.headers["x-free-tier-remaining"] == "99"
    by_token = r.json()["id"]
    r = await client.post(
        "/v1/store", json={"content": "stored with the header"}, headers=auth(wallet)
    )
    assert r.headers["x-free-tier-remaining"] == "98"

    # one wallet, one set of memories, one free-tier count, whichever way it is identified
    listed = (await client.get("/v1/memories", headers=auth(wallet))).json()
    assert listed["total"] == 2 and by_token in {m["id"] for m in listed["memories"]}
    memory = (await client.get(f"/v1/memories/{by_token}", headers=_bearer(token))).json()
    assert memory["user_id"] == wallet.address.lower()
    status = (await client.get("/v1/free-tier/status", headers=_bearer(token))).json()
    assert status["free_tier_used"] == 2 and status["wallet"] == wallet.address.lower()


async def test_bearer_pays_past_the_free_tier_like_the_header(make_app, wallet) -> None:
    async with _app_client(make_app, limits={"free_tier_calls": 1}) as small:
        token = await _session(small, wallet)
        r = await small.post(
            "/v1/store", json={"content": "the one free call"}, headers=_bearer(token)
        )
        assert r.status_code == 201 and r.headers["x-free-tier-remaining"] == "0"
        r = await small.post("/v1/store", json={"content": "one too many"}, headers=_bearer(token))
        assert r.status_code == 402 and _error(r)["code"] == "PAYMENT_REQUIRED"
        r = await small.post("/v1/store", json={"content": "one too many"}, headers=auth(wallet))
        assert r.status_code == 402


async def test_both_headers_must_name_the_same_wallet(
    client: AsyncTestClient, wallet, other_wallet
) -> None:
    token = await _session(client, wallet)
    r = await client.get("/v1/memories", headers={**_bearer(token), **auth(wallet)})
    assert r.status_code == 200
    for path, method in (("/v1/memories", "GET"), ("/v1/store", "POST")):
        r = await client.request(
            method, path, json={"content": "x"}, headers={**_bearer(token), **auth(other_wallet)}
        )
        assert r.status_code == 401, r.text
        assert "different wallets" in _error(r)["message"]
    # a bad wallet header is refused even beside a good token
    r = await client.get("/v1/memories", headers={**_bearer(token), "x-wallet-auth": "garbage"})
    assert r.status_code == 401


async def test_other_authorization_schemes_are_ignored(client: AsyncTestClient, wallet) -> None:
    basic = {"Authorization": "Basic dXNlcjpwYXNz"}
    r = await client.get("/v1/memories", headers={**basic, **auth(wallet)})
    assert r.status_code == 200
    r = await client.get("/v1/memories", headers=basic)
    assert r.status_code == 401 and "Missing x-wallet-auth" in _error(r)["message"]
    # the scheme name is case-insensitive
    token = await _session(client, wallet)
    r = await client.get("/v1/memories", headers={"Authorization": f"bearer {token}"})
    assert r.status_code == 200


async def test_bad_tokens_are_401_on_free_and_paid_routes(
    make_app, wallet, other_wallet, database_url
) -> None:
    secret = _secret(NEW)
    me = wallet.address.lower()
    good = _craft(secret, "new-key", me)
    payload = good.split(".")[1]
    claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    tampered = ".".join(
        [
            good.split(".")[0],
            _b64({**claims, "sub": other_wallet.address.lower()}),
            good.split(".")[2],
        ]
    )
    now = int(time.time())
    cases = {
        "garbage": ("not-a-jwt", "Malformed"),
        "empty": ("", "Malformed"),
        "expired": (_craft(secret, "new-key", me, iat=now - 8 * 86400, exp=now - 86400), "expired"),
        "tampered": (tampered, "Invalid bearer token"),
        "alg none": (
            f"{_b64({'alg': 'none', 'typ': 'JWT', 'kid': 'new-key'})}.{_b64(claims)}.",
            "HS256",
        ),
        "HS512": (
            jwt.encode(claims, secret, algorithm="HS512", headers={"kid": "new-key"}),
            "HS256",
        ),
        "wrong secret": (_craft("w" * 40, "new-key", me), "Invalid bearer token"),
        "unknown kid": (_craft(secret, "who", me), "unknown or retired"),
        "no kid": (_craft(secret, None, me), "unknown or retired"),
        "no jti": (
            jwt.encode(
                {"sub": me, "iat": now, "exp": now + 60},
                secret,
                algorithm="HS256",
                headers={"kid": "new-key"},
            ),
            "jti",
        ),
        "not a wallet": (_craft(secret, "new-key", "alice"), "not a wallet"),
    }
    async with _app_client(make_app, auth={"jwt_secrets": (NEW,)}) as c:
        assert (await c.get("/v1/memories", headers=_bearer(good))).status_code == 200
        for name, (token, says) in cases.items():
            for method, path in (("GET", "/v1/memories"), ("POST", "/v1/store")):
                r = await c.request(method, path, json={"content": "x"}, headers=_bearer(token))
                assert r.status_code == 401, (name, path, r.text)
                err = _error(r)
                assert err["code"] == "UNAUTHORIZED" and says in err["message"], (name, err)
                assert r.headers["www-authenticate"].startswith("Bearer")
    assert await count_memories(database_url, wallet.address) == 0
    assert await count_memories(database_url, other_wallet.address) == 0


# ---- keys and rotation -------------------------------------------------------------------------


async def test_rotation_first_key_signs_every_key_verifies(make_app, wallet) -> None:
    async with _app_client(make_app, auth={"jwt_secrets": (OLD,)}) as before:
        old_token = await _session(before, wallet)
    assert jwt.get_unverified_header(old_token)["kid"] == "old-key"

    # step 1: the new key goes first, the old one stays to verify what it signed
    async with _app_client(make_app, auth={"jwt_secrets": (NEW, OLD)}) as during:
        assert (await during.get("/v1/memories", headers=_bearer(old_token))).status_code == 200
        new_token = await _session(during, wallet)
        assert jwt.get_unverified_header(new_token)["kid"] == "new-key"
        assert (await during.get("/v1/memories", headers=_bearer(new_token))).status_code == 200

    # step 2, once old tokens have expired: the old key is dropped, its tokens are refused
    async with _app_client(make_app, auth={"jwt_secrets": (NEW,)}) as after:
        assert (await after.get("/v1/memories", headers=_bearer(new_token))).status_code == 200
        r = await after.get("/v1/memories", headers=_bearer(old_token))
        assert r.status_code == 401 and "unknown or retired" in _error(r)["message"]


async def test_generated_secret_is_kept_in_the_database(
    client: AsyncTestClient, make_app, wallet, database_url
) -> None:
    token = await _session(client, wallet)  # the session app: no keys configured
    conn = await asyncpg.connect(database_url)
    try:
        stored = await conn.fetchval(
            "SELECT value FROM engram_settings WHERE key = $1", GENERATED_SECRET_SETTING
        )
    finally:
        await conn.close()
    assert stored and len(stored) >= 32
    assert jwt.get_unverified_header(token)["kid"] == derived_kid(stored.encode())
    jwt.decode(token, stored, algorithms=["HS256"])  # signed with the stored secret

    # another instance (a restart, another worker) on the same database accepts it
    async with _app_client(make_app) as second:
        r = await second.get("/v1/memories", headers=_bearer(token))
        assert r.status_code == 200
        assert jwt.get_unverified_header(await _session(second, wallet))["kid"] == derived_kid(
            stored.encode()
        )
    # configured keys replace the generated secret
    async with _app_client(make_app, auth={"jwt_secrets": (NEW,)}) as configured:
        assert (await configured.get("/v1/memories", headers=_bearer(token))).status_code == 401


async def test_bearer_without_loaded_keys_is_refused(wallet) -> None:
    """Without keys (an app whose startup never ran) tokens are refused, not a crash."""
    sessions = SessionTokens()
    assert not sessions.ready
    with pytest.raises(RuntimeError):
        sessions.issue(wallet.address.lower())
    middleware = WalletAuthMiddleware(WalletVerifier(300), sessions)
    scope: Any = {
        "type": "http",
        "path": "/v1/memories",
        "headers": [(b"authorization", b"Bearer x")],
    }
    with pytest.raises(Unauthorized, match="not available"):
        await middleware._identify(scope)


def test_key_list_parsing() -> None:
    keys = parse_keys([NEW, OLD, " " + "s" * 40 + " ", ""])
    assert [k.kid for k in keys] == ["new-key", "old-key", derived_kid(b"s" * 40)]
    assert keys[0].secret == b"n" * 64
    assert "n" * 64 not in repr(keys[0])
    colon = parse_keys(["k:" + "a:b" * 20])[0]  # only the first colon separates
    assert colon.kid == "k" and colon.secret == ("a:b" * 20).encode()
    for bad in (["short"], ["k:short"], ["bad kid!:" + "x" * 40], [NEW, NEW], [":" + "x" * 40]):
        with pytest.raises(SessionConfigError):
            parse_keys(bad)


def test_settings_read_the_key_list(monkeypatch) -> None:
    monkeypatch.setenv("ENGRAM_JWT_SECRETS", f" {NEW} , {OLD},")
    monkeypatch.setenv("ENGRAM_SESSION_TTL_SECONDS", "3600")
    settings = Settings.from_env()
    assert settings.auth.jwt_secrets == (NEW, OLD)
    assert settings.auth.session_ttl_seconds == 3600
    assert _secret(NEW) not in repr(settings)
    monkeypatch.delenv("ENGRAM_JWT_SECRETS")
    assert Settings.from_env().auth.jwt_secrets == ()


async def test_session_ttl_is_configurable(make_app, wallet) -> None:
    async with _app_client(make_app, auth={"jwt_secrets": (NEW,), "session_ttl_seconds": 60}) as c:
        r = await c.post("/auth/session", json=_proof(wallet))
        claims = jwt.decode(r.json()["token"], _secret(NEW), algorithms=["HS256"])
        assert claims["exp"] - claims["iat"] == 60 and r.json()["expires_in"] == 60


def test_derived_kid_is_stable() -> None:
    assert derived_kid(b"x" * 40) == hashlib.sha256(b"x" * 40).hexdigest()[:16]
