"""An agent with nothing but a wallet key: it spends its free tier, meets the 402, pays it with
the x402 package's reference client, and gets its memory stored.

Run against `engram serve --dev-chain` (offline; the default key is that chain's demo wallet):
    python -m app.dev.paying_agent --url http://127.0.0.1:8000
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Mapping

import httpx
from eth_account import Account
from eth_account.signers.local import LocalAccount
from x402 import x402Client
from x402.http.utils import (
    decode_payment_required_header,
    decode_payment_response_header,
    encode_payment_signature_header,
)
from x402.mechanisms.evm.exact import ExactEvmClientScheme
from x402.mechanisms.evm.signers import EthAccountSigner
from x402.schemas import PaymentPayload, PaymentRequired

from app.auth.signature import sign_header
from app.dev.mode import DEMO_WALLET_KEY


def wallet_header(account: LocalAccount) -> dict[str, str]:
    return {"x-wallet-auth": sign_header(account.key.hex(), int(time.time()))}


async def pay(account: LocalAccount, challenge: httpx.Response) -> dict[str, str]:
    required = decode_payment_required_header(challenge.headers["PAYMENT-REQUIRED"])
    assert isinstance(required, PaymentRequired)
    client = x402Client()
    client.register(required.accepts[0].network, ExactEvmClientScheme(EthAccountSigner(account)))
    payload = await client.create_payment_payload(required)
    assert isinstance(payload, PaymentPayload)
    return {"PAYMENT-SIGNATURE": encode_payment_signature_header(payload)}


async def post_paying(
    http: httpx.AsyncClient, account: LocalAccount, path: str, body: Mapping[str, object]
) -> httpx.Response:
    """POST with the wallet header; on a 402, pay it once with the reference client and retry."""
    r = await http.post(path, json=body, headers=wallet_header(account))
    if r.status_code != 402:
        return r
    offer = r.json()["accepts"][0]
    print(f"402 on {path}: {int(offer['maxAmountRequired']) / 1e6} USDC on {offer['network']}"
          f" to {offer['payTo']}; paying")  # fmt: skip
    return await http.post(
        path, json=body, headers={**wallet_header(account), **await pay(account, r)}
    )


async def run(url: str, key: str) -> str:
    account: LocalAccount = Account.from_key(key)
    print(f"agent wallet {account.address}")
    async with httpx.AsyncClient(base_url=url, timeout=60) as http:
        status = (await http.get("/v1/free-tier/status", headers=wallet_header(account))).json()
        left = int(status["free_tier_remaining"])
        print(f"free tier: {left} of {status['free_tier_total']} calls left")
        for n in range(1, left + 1):
            memory = {"content": f"Agent note {n}: deploy #{n} went out at {time.ctime()}"}
            r = await http.post("/v1/store", json=memory, headers=wallet_header(account))
            r.raise_for_status()
            print(f"stored note {n} on the free tier ({r.headers['x-free-tier-remaining']} left)")
        memory = {"content": "The production build is green and the release is tagged v1.4"}
        r = await post_paying(http, account, "/v1/store", memory)
        if r.status_code != 201:
            raise SystemExit(f"paid store failed: {r.status_code} {r.text}")
        receipt = decode_payment_response_header(r.headers["PAYMENT-RESPONSE"])
        print(f"paid store: memory {r.json()['id']} stored; tx {receipt.transaction}")
        r = await post_paying(http, account, "/v1/recall", {"query": "is the build green?"})
        r.raise_for_status()
        print(f"recall: {r.json()['memories'][0]['content']}")
        return receipt.transaction


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    parser.add_argument("--key", default=DEMO_WALLET_KEY, help="the agent's private key")
    args = parser.parse_args()
    asyncio.run(run(args.url, args.key))


if __name__ == "__main__":
    main()
