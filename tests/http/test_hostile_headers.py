"""Every header Engram decodes itself (SIGN-IN-WITH-X, PAYMENT-SIGNATURE / X-PAYMENT, a bearer
JWT, x-wallet-auth) refuses what it cannot read with its own named error, whatever the header
holds: the decoders see nothing deeper or larger than the bounds in app/core/json_input.py.
Property tests of each reader, then the refusals through a real `engram serve`."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
import pytest
from eth_account import Account
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.auth.session import SessionTokenError, SessionTokens, SigningKey, derived_kid
from app.auth.signature import WalletAuthError, WalletVerifier, sign_header
from app.auth.siwx import MAX_HEADER_CHARS, SiwxVerifier
from app.config import X402Settings
from app.payments.network import configured_network
from app.payments.offers import Offer
from app.payments.proofs import MAX_HEADER_DEPTH, PaymentRejected, read_proof
from tests.support.server import PAY_TO, paying_serving

ORIGIN = "http://127.0.0.1:8000"
FUZZ = settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=30),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=20,
)  # fmt: skip


def b64(document: bytes, urlsafe: bool = False) -> str:
    return (base64.urlsafe_b64encode if urlsafe else base64.b64encode)(document).decode()


def nested(depth: int, opener: bytes = b"[") -> bytes:
    closer = {b"[": b"]", b'{"a":': b"}"}[opener]
    return opener * depth + b"1" + closer * depth


# Documents every header decoder meets: too deep (arrays, objects), not UTF-8, not JSON, JSON
# that is not an object, numbers past a float, and a document too large to be a header's.
HOSTILE_DOCUMENTS = [
    nested(5_000), nested(2_000, b'{"a":'), b'{"a":' * 2000, b"\xff\xfe{}", b"{bad", b"[]",
    b'"text"', b"1e999", b"NaN", b'{"x402Version": 1e999}', b'{"a": "' + b"x" * 40_000 + b'"}',
]  # fmt: skip
HOSTILE_HEADERS = [b64(d) for d in HOSTILE_DOCUMENTS] + [
    "%%%", "", "=" * 9, "a" * 100_000, b64(b"{}")[:-1] + "\u00e9",
]  # fmt: skip


# ---- SIGN-IN-WITH-X --------------------------------------------------------------------------


def siwx_fields(**values: Any) -> dict[str, Any]:
    fields = {
        "domain": "127.0.0.1:8000", "address": "0x" + "1" * 40, "uri": ORIGIN, "version": "1",
        "chainId": "eip155:8453", "type": "eip191", "nonce": "0123456789abcdef",
        "issuedAt": "2026-12-02T15:00:00Z", "signature": "0x" + "00" * 65,
    }  # fmt: skip
    return {**fields, **values}


async def refused_siwx(raw: str) -> str:
    with pytest.raises(WalletAuthError) as refused:
        await SiwxVerifier("eip155:8453", 300).signer_of(raw, ORIGIN)
    return str(refused.value)


@pytest.mark.parametrize("raw", HOSTILE_HEADERS)
async def test_a_hostile_sign_in_with_x_header_is_malformed(raw: str) -> None:
    assert (await refused_siwx(raw)).startswith("Malformed SIGN-IN-WITH-X header")


@pytest.mark.parametrize(
    "values",
    [
        {"uri": "http://["}, {"uri": "http://127.0.0.1:99999999"}, {"issuedAt": "9999-12-31T23:59:59-14:00"},
        {"issuedAt": "0001-01-01T00:00:00+14:00"}, {"expirationTime": "not a time"},
        {"signature": "0xzz"}, {"signature": ""}, {"address": "nope"}, {"chainId": "eip155:"},
        {"chainId": "solana:x"}, {"nonce": "\u0000" * 8}, {"type": "ed25519"}, {"resources": [1]},
    ],
    ids=repr,
)  # fmt: skip
async def test_values_x402_cannot_read_are_refused_not_raised(values: dict[str, Any]) -> None:
    await refused_siwx(b64(json.dumps(siwx_fields(**values)).encode()))


@FUZZ
@given(values=st.dictionaries(st.sampled_from(list(siwx_fields())), json_values, max_size=6))
async def test_any_sign_in_with_x_payload_is_refused_with_a_reason(values: dict[str, Any]) -> None:
    await refused_siwx(b64(json.dumps(siwx_fields(**values)).encode()))


def test_the_bound_leaves_room_for_a_real_header() -> None:
    assert len(b64(json.dumps(siwx_fields(statement="s" * 1000)).encode())) < MAX_HEADER_CHARS


# ---- PAYMENT-SIGNATURE / X-PAYMENT -----------------------------------------------------------


@pytest.fixture(scope="module")
def offer() -> Offer:
    return Offer(
        network=configured_network(X402Settings()), pay_to=PAY_TO, price_usd=Decimal("0.005"),
        max_timeout_seconds=300, resource_url=f"{ORIGIN}/v1/store", description="Engram store",
    )  # fmt: skip


def proof_fields(**values: Any) -> dict[str, Any]:
    authorization = {
        "from": "0x" + "1" * 40, "to": PAY_TO, "value": "1000", "validAfter": "0",
        "validBefore": "9999999999", "nonce": "0x" + "ab" * 32,
    }  # fmt: skip
    proof = {
        "x402Version": 2, "accepted": {"scheme": "exact", "network": "eip155:8453"},
        "payload": {"signature": "0x" + "00" * 65, "authorization": authorization},
    }  # fmt: skip
    for name, value in values.items():
        if name in authorization:
            authorization[name] = value
        else:
            proof[name] = value
    return proof


def refused_proof(raw: str, offer: Offer, header: str = "payment-signature") -> str:
    with pytest.raises(PaymentRejected) as refused:
        read_proof({header: raw}, offer)
    return refused.value.reason


@pytest.mark.parametrize("header", ["payment-signature", "x-payment"])
@pytest.mark.parametrize("raw", HOSTILE_HEADERS)
def test_a_hostile_payment_header_is_an_invalid_payload(
    raw: str, header: str, offer: Offer
) -> None:
    if raw == "":
        assert read_proof({header: raw}, offer) is None  # an empty header is no proof
        return
    assert refused_proof(raw, offer, header) in {"invalid_payload", "invalid_x402_version"}


def test_a_proof_deeper_than_its_bound_is_not_parsed(offer: Offer) -> None:
    deep = proof_fields(extensions=json.loads(nested(MAX_HEADER_DEPTH)))
    assert refused_proof(b64(json.dumps(deep).encode()), offer) == "invalid_payload"


@FUZZ
@given(
    values=st.dictionaries(
        st.sampled_from(["x402Version", "accepted", "payload", "scheme", "network", "from",
                         "to", "value", "validAfter", "validBefore", "nonce"]),
        json_values, max_size=4,
    )
)  # fmt: skip
def test_any_payment_proof_is_read_or_refused_with_a_reason(
    values: dict[str, Any], offer: Offer
) -> None:
    raw = b64(json.dumps(proof_fields(**values)).encode())
    try:
        read_proof({"payment-signature": raw}, offer)
    except PaymentRejected:
        pass


# ---- bearer tokens and x-wallet-auth ---------------------------------------------------------


@pytest.fixture(scope="module")
def sessions() -> SessionTokens:
    secret = b"s" * 32
    return SessionTokens([SigningKey(derived_kid(secret), secret)])


@pytest.mark.parametrize("document", HOSTILE_DOCUMENTS)
def test_a_hostile_bearer_token_is_refused(document: bytes, sessions: SessionTokens) -> None:
    part = b64(document, urlsafe=True).rstrip("=")
    for token in (f"{part}.e30.c2ln", f"{b64(b'{}', True)}.{part}.c2ln", part):
        with pytest.raises(SessionTokenError):
            sessions.verify(token)


@FUZZ
@given(
    token=st.text(max_size=200)
    | st.builds(lambda v: b64(json.dumps(v).encode(), True) + ".e30.x", json_values)
)
def test_any_bearer_token_is_refused_with_a_reason(token: str, sessions: SessionTokens) -> None:
    with pytest.raises(SessionTokenError):
        sessions.verify(token)


@FUZZ
@given(
    raw=st.text(max_size=300)
    | st.builds(
        lambda a, t, s: f"{a}:{t}:{s}",
        st.text(max_size=50),
        st.text(max_size=30),
        st.text(max_size=140),
    )
)
def test_any_wallet_auth_header_is_refused_with_a_reason(raw: str) -> None:
    with pytest.raises(WalletAuthError):
        WalletVerifier(300).verify(raw)


# ---- through a real server -------------------------------------------------------------------


@pytest.fixture(scope="module")
def paying_server(
    database_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, Path]]:
    """x402 on, no free calls: every paid call reads its payment header."""
    with paying_serving(tmp_path_factory.mktemp("headers"), database_url) as served:
        yield served


ROUTES = [("GET", "/v1/free-tier/status"), ("GET", "/v1/memories"), ("POST", "/v1/store"),
          ("POST", "/v1/recall"), ("POST", "/auth/session"), ("POST", "/mcp")]  # fmt: skip


def send(url: str, method: str, path: str, headers: dict[str, str]) -> httpx.Response:
    body = {"content": "x", "query": "x"} if method == "POST" and path != "/auth/session" else None
    return httpx.request(method, f"{url}{path}", headers=headers, timeout=30, json=body)


@pytest.mark.parametrize("raw", HOSTILE_HEADERS[:6], ids=lambda r: r[:12])
def test_a_hostile_sign_in_with_x_header_is_a_401_on_every_kind_of_route(
    paying_server: tuple[str, Path], raw: str
) -> None:
    url, _ = paying_server
    for method, path in ROUTES:
        r = send(url, method, path, {"sign-in-with-x": raw})
        assert r.status_code == 401, (path, r.status_code, r.text)
        assert "Malformed SIGN-IN-WITH-X header" in r.json()["error"]["message"], r.text
    assert httpx.get(f"{url}/health", timeout=10).status_code == 200


@pytest.mark.parametrize("header", ["payment-signature", "x-payment"])
def test_a_hostile_payment_header_is_a_402_on_a_paid_route(
    paying_server: tuple[str, Path], header: str
) -> None:
    url, _ = paying_server
    identity = {"x-wallet-auth": sign_header(Account.create().key.hex())}
    for raw in HOSTILE_HEADERS[:-1]:  # the last is larger than a server takes in a header
        if not raw:
            continue
        r = send(url, "POST", "/v1/store", {**identity, header: raw})
        assert r.status_code == 402, (raw[:20], r.status_code, r.text)
        assert (
            "The payment header is not base64 JSON" in r.json()["error"]["message"]
            or (r.json()["error"]["message"])
        ), r.text
    assert httpx.get(f"{url}/v1/memories/count", headers=identity).json()["count"] == 0
    assert httpx.get(f"{url}/health", timeout=10).status_code == 200
