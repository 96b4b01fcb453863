"""Engram checks a SIGN-IN-WITH-X signature itself (app/auth/siwx.py), with linear grammar checks
and its own EIP-4361 formatter, in place of x402's `verify_siwx_signature` and siwe's ABNF
parser: the same text and the same verdict as x402's on every message EIP-4361 allows, each
field refused past its limit with its name and the limit, and the cost linear in the size."""

from __future__ import annotations

import asyncio
import base64
import json
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec
import pytest
from eth_account import Account
from eth_account.messages import encode_defunct
from eth_account.signers.local import LocalAccount
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from x402.extensions.sign_in_with_x import (
    SIWxPayload,
    create_siwx_message,
    verify_siwx_signature,
)
from x402.extensions.sign_in_with_x.evm import format_siwe_message

from app.auth import siwx
from app.auth.schemas import SiwxChallenge
from app.auth.signature import WalletAuthError

ORIGIN = "http://127.0.0.1:8000"
CHAIN = "eip155:8453"
VERIFIER = siwx.SiwxVerifier(CHAIN, 300)
# x402's side parses with siwe's ABNF grammar, tens of milliseconds a message: few examples.
PARITY = settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))


def iso(moment: datetime) -> str:
    return moment.isoformat().replace("+00:00", "Z")


def fields(**changes: Any) -> dict[str, Any]:
    now = datetime.now(UTC).replace(microsecond=0)
    base = {
        "domain": "127.0.0.1:8000", "uri": ORIGIN, "version": "1", "chainId": CHAIN,
        "type": "eip191", "nonce": "0123456789abcdef", "issuedAt": iso(now),
        "expirationTime": iso(now + timedelta(seconds=300)), "statement": siwx.STATEMENT,
    }  # fmt: skip
    return {k: v for k, v in {**base, **changes}.items() if v is not ...}


def signed(values: dict[str, Any], account: LocalAccount | None = None,
           by_x402: bool = True) -> SIWxPayload:  # fmt: skip
    """A payload signed over x402's own text of it (as x402's client signs), or Engram's text
    where x402's would take seconds (fields at their limits)."""
    account = account or Account.create()
    unsigned = SIWxPayload.model_validate({**values, "address": account.address, "signature": ""})
    text = (
        format_siwe_message(unsigned, account.address) if by_x402 else siwx.siwe_message(unsigned)
    )
    signature = account.sign_message(encode_defunct(text=text)).signature.hex()
    return unsigned.model_copy(update={"signature": "0x" + signature.removeprefix("0x")})


def ours(payload: SIWxPayload) -> str | None:
    """Engram's verdict: the wallet, or None when refused."""
    try:
        return asyncio.run(VERIFIER.signer_of_payload(payload, ORIGIN))
    except WalletAuthError:
        return None


def x402s(payload: SIWxPayload) -> str | None:
    """x402's verdict on the signature (its own validation of the fields included)."""
    try:
        result = asyncio.run(verify_siwx_signature(payload))
    except ValueError:  # siwe's model refusing a field, before any signature check
        return None
    return result.payer.lower() if result.is_valid and result.payer else None


def refusal(payload: SIWxPayload) -> str:
    with pytest.raises(WalletAuthError) as refused:
        asyncio.run(VERIFIER.signer_of_payload(payload, ORIGIN))
    return str(refused.value)


# ---- the same text, the same verdict as x402's ----------------------------------------------

STATEMENT_CHARS = "abcXYZ019-._~:/?#[]@!$&'()*+,;= "
PCHARS = [*"aZ9-._~!$&'()*+,;=:@", "%20", "%aF"]
uris = st.builds(
    lambda scheme, host, path, query: f"{scheme}://{host}/{path}{query}",
    st.sampled_from(["https", "ipfs", "http"]),
    st.sampled_from(["r.example", "127.0.0.1:9", "user@h.example"]),
    st.lists(st.sampled_from([*"az09-._~!$&'()*+,;=:@/", "%2F"]), max_size=12).map("".join),
    st.sampled_from(["", "?a=b&c", "#frag", "?q#f"]),
)
optional_fields = st.fixed_dictionaries(
    {},
    optional={
        "statement": st.none() | st.text(alphabet=STATEMENT_CHARS, max_size=40),
        "requestId": st.lists(st.sampled_from(PCHARS), max_size=10).map("".join),
        "resources": st.lists(uris, max_size=3),
        "notBefore": st.sampled_from([iso(datetime.now(UTC) - timedelta(seconds=60))]),
        "expirationTime": st.sampled_from([None, iso(datetime.now(UTC) + timedelta(days=1))]),
        "uri": st.sampled_from([ORIGIN, ORIGIN + "/auth/nonce", ORIGIN + "/a?b=c#d"]),
    },
)


@PARITY
@given(extra=optional_fields)
def test_a_message_eip_4361_allows_reads_as_x402_reads_it(extra: dict[str, Any]) -> None:
    account = Account.create()
    payload = signed(fields(**extra), account)
    assert siwx.siwe_message(payload) == format_siwe_message(payload, payload.address)
    assert ours(payload) == x402s(payload) == account.address.lower()
    forged = payload.model_copy(update={"address": Account.create().address})
    assert ours(forged) is None and x402s(forged) is None


SPACED_NOW = "now, with a space for the T"


@pytest.mark.parametrize(
    "changes",
    [
        {"statement": "two\nlines"}, {"statement": "100%"}, {"statement": "caf\u00e9"},
        {"statement": 'a "quote"'}, {"requestId": "a/b"}, {"requestId": "%zz"},
        {"requestId": "a b"}, {"resources": ["https://r.example/a b"]}, {"resources": ["nope"]},
        {"resources": ["https://r.example/\n- https://evil.example"]},
        {"uri": ORIGIN + "/a b"}, {"issuedAt": SPACED_NOW},
        {"notBefore": "2026-01-01"}, {"version": "2"}, {"nonce": "short"},
    ],
    ids=repr,
)  # fmt: skip
def test_what_eip_4361_refuses_both_refuse(changes: dict[str, Any]) -> None:
    if changes.get("issuedAt") == SPACED_NOW:  # the time is the test's, not collection's:
        changes = {"issuedAt": iso(datetime.now(UTC)).replace("T", " ")}  # same ids on every worker
    payload = signed(fields())
    payload = SIWxPayload.model_validate({**payload.model_dump(by_alias=True), **changes})
    assert x402s(payload) is None
    assert refusal(payload).startswith("Malformed SIGN-IN-WITH-X proof:")


def test_an_address_with_a_wrong_checksum_is_refused_as_siwe_refuses_it() -> None:
    payload = signed(fields())
    flipped = payload.address[:2] + payload.address[2:].swapcase()
    if flipped[2:] in (flipped[2:].lower(), flipped[2:].upper()):
        pytest.skip("an address of digits only has no checksum to get wrong")
    wrong = payload.model_copy(update={"address": flipped})
    assert x402s(wrong) is None
    assert "EIP-55 checksum" in refusal(wrong)


def test_the_console_challenge_reads_as_x402_writes_it() -> None:
    challenge = SiwxChallenge(
        domain="127.0.0.1:8000", uri=ORIGIN, version="1", statement=siwx.STATEMENT,
        nonce="0123456789abcdef", issuedAt="2026-12-06T03:00:00Z",
        expirationTime="2026-12-06T03:05:00Z", chainId=CHAIN, type="eip191",
        header="SIGN-IN-WITH-X",
    )  # fmt: skip
    address = Account.create().address
    expected = create_siwx_message(msgspec.to_builtins(challenge), address)
    assert VERIFIER.message_for(challenge, address) == expected


# ---- the limits ------------------------------------------------------------------------------

OVER = {
    "domain": "d" * (siwx.MAX_DOMAIN_CHARS + 1),
    "uri": ORIGIN + "/" + "u" * siwx.MAX_URI_CHARS,
    "statement": "s" * (siwx.MAX_STATEMENT_CHARS + 1),
    "requestId": "r" * (siwx.MAX_REQUEST_ID_CHARS + 1),
    "issuedAt": "2" * (siwx.MAX_DATE_CHARS + 1),
    "expirationTime": "2" * (siwx.MAX_DATE_CHARS + 1),
    "notBefore": "2" * (siwx.MAX_DATE_CHARS + 1),
    "chainId": "eip155:" + "1" * siwx.MAX_CHAIN_ID_CHARS,
    "version": "11",
    "nonce": "n" * (siwx.MAX_NONCE_CHARS + 1),
    "signature": "0x" + "ab" * (siwx.MAX_SIGNATURE_CHARS // 2),
}


@pytest.mark.parametrize("name", list(OVER))
def test_a_field_past_its_limit_is_refused_by_name_and_limit(name: str) -> None:
    payload = SIWxPayload.model_validate({**signed(fields()).model_dump(by_alias=True),
                                          name: OVER[name]})  # fmt: skip
    limit = siwx.FIELD_LIMITS[name]
    assert refusal(payload) == (
        f"Malformed SIGN-IN-WITH-X proof: {name} is {len(OVER[name])} characters long;"
        f" the limit is {limit}"
    )


def test_resources_past_their_limits_are_refused() -> None:
    many = signed(fields(resources=["urn:x"] * (siwx.MAX_RESOURCES + 1)))
    assert f"the limit is {siwx.MAX_RESOURCES}" in refusal(many)
    long = signed(fields(resources=["urn:" + "x" * siwx.MAX_RESOURCE_CHARS]))
    assert f"the limit is {siwx.MAX_RESOURCE_CHARS}" in refusal(long)


def at_the_limits(**changes: Any) -> dict[str, Any]:
    def url(length: int, prefix: str) -> str:
        return prefix + "p" * (length - len(prefix))

    return fields(
        statement="s" * siwx.MAX_STATEMENT_CHARS, uri=url(siwx.MAX_URI_CHARS, ORIGIN + "/"),
        requestId="r" * siwx.MAX_REQUEST_ID_CHARS, nonce="n" * siwx.MAX_NONCE_CHARS,
        resources=[url(siwx.MAX_RESOURCE_CHARS, "https://r.example/")] * siwx.MAX_RESOURCES,
        **changes,
    )  # fmt: skip


def test_a_message_with_every_field_at_its_limit_signs_in() -> None:
    account = Account.create()
    assert ours(signed(at_the_limits(), account, by_x402=False)) == account.address.lower()


def test_engrams_own_challenge_fits_a_header_with_room_to_spare() -> None:
    header = base64.b64encode(json.dumps(signed(fields()).model_dump(by_alias=True)).encode())
    assert len(header) * 4 < siwx.MAX_HEADER_CHARS


def test_checking_costs_time_linear_in_the_size() -> None:
    """The bounded check, signed and all, at the limits against a twentieth of them: the cost
    grows no faster than the size (x402's parser took 12x for 4x the statement). A ratio, not a
    time, so a slow machine does not fail it."""

    def cost(payload: SIWxPayload) -> float:
        ours(payload)  # warm
        started = time.perf_counter()
        for _ in range(20):
            ours(payload)
        return time.perf_counter() - started

    small = signed(fields(statement="s" * 50, resources=["urn:" + "x" * 100]))
    large = signed(at_the_limits(), by_x402=False)
    size = len(siwx.siwe_message(large)) / len(siwx.siwe_message(small))
    assert cost(large) / cost(small) < size
