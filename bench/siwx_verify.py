"""What checking a SIGN-IN-WITH-X proof costs at the field limits of app/auth/siwx.py: signed
proofs with every field at its limit (the header's 8 KiB and the console body's larger mix),
proofs past a limit or outside the grammar, and, with --x402, x402's own verify_siwx_signature
(siwe's ABNF parser) on growing statements for comparison. No server, no database: the checks
before the nonce is looked at.

Run: .venv/bin/python bench/siwx_verify.py [--x402]
"""

from __future__ import annotations

import asyncio
import base64
import json
import statistics
import sys
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from eth_account import Account
from eth_account.messages import encode_defunct
from x402.extensions.sign_in_with_x import SIWxPayload, verify_siwx_signature

from app.auth import siwx
from app.auth.signature import WalletAuthError

ORIGIN = "http://127.0.0.1:8000"
CHAIN = "eip155:8453"
RUNS = 50


def fields(**changes: Any) -> dict[str, Any]:
    now = datetime.now(UTC).replace(microsecond=0)
    base = {
        "domain": "127.0.0.1:8000", "uri": ORIGIN, "version": "1", "chainId": CHAIN,
        "type": "eip191", "nonce": "0123456789abcdef0123456789abcdef",
        "issuedAt": now.isoformat().replace("+00:00", "Z"), "statement": siwx.STATEMENT,
        "expirationTime": (now + timedelta(seconds=300)).isoformat().replace("+00:00", "Z"),
    }  # fmt: skip
    return {**base, **changes}


def signed(values: dict[str, Any]) -> SIWxPayload:
    account = Account.create()
    unsigned = SIWxPayload.model_validate({**values, "address": account.address, "signature": ""})
    text = siwx.siwe_message(unsigned)
    signature = account.sign_message(encode_defunct(text=text)).signature.hex()
    return unsigned.model_copy(update={"signature": "0x" + signature.removeprefix("0x")})


def header(payload: SIWxPayload) -> str:
    document = payload.model_dump(by_alias=True, exclude_none=True)
    return base64.b64encode(json.dumps(document).encode()).decode()


def url(length: int, prefix: str = ORIGIN + "/") -> str:
    return prefix + "p" * (length - len(prefix))


def timed(check: Any) -> tuple[float, float, str]:
    """(median ms, max ms, outcome) of RUNS calls."""
    verifier = siwx.SiwxVerifier(CHAIN, 300)
    times, outcome = [], ""
    for _ in range(RUNS):
        started = time.perf_counter()
        try:
            asyncio.run(check(verifier))
            outcome = "accepted"
        except WalletAuthError as exc:
            outcome = str(exc)[:70]
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times), max(times), outcome


def as_header(payload: SIWxPayload) -> Any:
    raw = header(payload)
    return lambda v: v.signer_of(raw, ORIGIN)


def as_body(payload: SIWxPayload) -> Any:
    return lambda v: v.signer_of_payload(payload, ORIGIN)  # verify_payload before the nonce


def cases() -> list[tuple[str, Any]]:
    at_limits = {
        "statement": "s" * siwx.MAX_STATEMENT_CHARS, "uri": url(siwx.MAX_URI_CHARS),
        "requestId": "r" * siwx.MAX_REQUEST_ID_CHARS,
        "resources": [url(siwx.MAX_RESOURCE_CHARS, "https://r.example/")] * siwx.MAX_RESOURCES,
    }  # fmt: skip
    # The most of that mix one 8 KiB header holds: the resources are what must give.
    in_header = {**at_limits, "resources": [url(siwx.MAX_RESOURCE_CHARS, "https://r.example/")]}
    full_header = header(signed(fields(**in_header)))
    assert len(full_header) <= siwx.MAX_HEADER_CHARS, len(full_header)
    bad_tail = "s" * (siwx.MAX_STATEMENT_CHARS - 1) + "\n"
    return [
        ("header: Engram's own challenge, signed", as_header(signed(fields()))),
        (f"header: {len(full_header)} chars, fields at limits, signed",
         as_header(signed(fields(**in_header)))),
        ("header: the same, signed by someone else",
         as_header(signed(fields(**in_header)).model_copy(update={"address": "0x" + "1" * 40}))),
        ("header: statement at limit, its last char a line break",
         as_header(signed(fields(statement=bad_tail)))),
        ("header: statement one over its limit", as_header(signed(
            fields(statement="s" * (siwx.MAX_STATEMENT_CHARS + 1))))),
        ("body: every field at its limit, 16 resources, signed",
         as_body(signed(fields(**at_limits)))),
        ("body: 60,000-character statement", as_body(signed(fields(statement="s" * 60_000)))),
        ("body: 17 resources", as_body(signed(fields(resources=["urn:x"] * 17)))),
    ]  # fmt: skip


def x402_comparison() -> None:
    asyncio.run(verify_siwx_signature(signed(fields())))  # its grammar is built on first use
    for n in (400, 800, 1600, 3200):
        payload = signed(fields(statement="s" * n))
        started = time.perf_counter()
        result = asyncio.run(verify_siwx_signature(payload))
        took = (time.perf_counter() - started) * 1000
        print(f"x402 verify_siwx_signature, statement {n:5d}: {took:8.1f} ms  {result.is_valid}")


def main() -> None:
    print(f"{'case':58s} {'median':>9s} {'max':>9s}  outcome")
    for name, check in cases():
        median, worst, outcome = timed(check)
        print(f"{name:58s} {median:7.2f}ms {worst:7.2f}ms  {outcome}")
    if "--x402" in sys.argv:
        x402_comparison()


if __name__ == "__main__":
    main()
