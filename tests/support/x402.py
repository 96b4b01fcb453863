"""Test support for payments: a paying agent's side of x402, made with real signatures.

`sign_proof` builds an EIP-3009 authorization by hand so every field can be wrong on purpose;
`reference_payment` goes through the x402 package's own client, unmodified.
"""

from __future__ import annotations

import json
import secrets
import time
from typing import Any

from eth_account.messages import encode_typed_data
from eth_account.signers.local import LocalAccount
from x402.http.utils import (
    decode_payment_required_header,
    safe_base64_encode,
)
from x402.schemas import PaymentRequired

from app.config import Settings
from app.dev.chain import DevChain
from app.dev.paying_agent import pay
from tests.support.settings import changed

TRANSFER_TYPES = {
    "EIP712Domain": [
        {"name": "name", "type": "string"},
        {"name": "version", "type": "string"},
        {"name": "chainId", "type": "uint256"},
        {"name": "verifyingContract", "type": "address"},
    ],
    "TransferWithAuthorization": [
        {"name": "from", "type": "address"},
        {"name": "to", "type": "address"},
        {"name": "value", "type": "uint256"},
        {"name": "validAfter", "type": "uint256"},
        {"name": "validBefore", "type": "uint256"},
        {"name": "nonce", "type": "bytes32"},
    ],
}


def offer_of(response: Any) -> dict[str, Any]:
    """The v2 offer in a 402's PAYMENT-REQUIRED header, as JSON (camelCase)."""
    required = decode_payment_required_header(response.headers["PAYMENT-REQUIRED"])
    assert isinstance(required, PaymentRequired)
    return required.accepts[0].model_dump(by_alias=True)


def sign_proof(
    payer: LocalAccount,
    offer: dict[str, Any],
    *,
    version: int = 2,
    value: int | None = None,
    to: str | None = None,
    valid_after: int = 0,
    valid_before: int | None = None,
    nonce: str | None = None,
    chain_id: int | None = None,
    name: str | None = None,
    network: str | None = None,
    signer: LocalAccount | None = None,
    extensions: dict[str, Any] | None = None,
) -> tuple[str, str]:
    """(header name, header value) for an EIP-3009 payment of `offer`, with any field overridden."""
    authorization = {
        "from": payer.address,
        "to": to or offer["payTo"],
        "value": str(int(offer["amount"]) if value is None else value),
        "validAfter": str(valid_after),
        "validBefore": str(valid_before if valid_before is not None else int(time.time()) + 300),
        "nonce": nonce or "0x" + secrets.token_hex(32),
    }
    typed = {
        "types": TRANSFER_TYPES,
        "primaryType": "TransferWithAuthorization",
        "domain": {
            "name": name or offer["extra"]["name"],
            "version": offer["extra"]["version"],
            "chainId": chain_id or int(offer["network"].split(":")[1]),
            "verifyingContract": offer["asset"],
        },
        "message": {**authorization, "value": int(authorization["value"]),
                    "validAfter": int(authorization["validAfter"]),
                    "validBefore": int(authorization["validBefore"])},
    }  # fmt: skip
    signature = (signer or payer).sign_message(encode_typed_data(full_message=typed)).signature
    inner = {"signature": "0x" + signature.hex().removeprefix("0x"), "authorization": authorization}
    if version == 1:
        v1_network = (
            network or {"eip155:8453": "base", "eip155:84532": "base-sepolia"}[offer["network"]]
        )
        body = {"x402Version": 1, "scheme": "exact", "network": v1_network, "payload": inner}
        return "X-PAYMENT", safe_base64_encode(json.dumps(body))
    accepted = {**offer, **({"network": network} if network else {})}
    body = {"x402Version": 2, "accepted": accepted, "payload": inner}
    if extensions is not None:
        body["extensions"] = extensions
    return "PAYMENT-SIGNATURE", safe_base64_encode(json.dumps(body))


async def reference_payment(payer: LocalAccount, response: Any) -> dict[str, str]:
    """What x402's reference client sends to pay the 402 `response` (the example agent's way)."""
    return await pay(payer, response)


def paid_only(settings: Settings, chain: DevChain) -> Settings:
    """`settings` with no free tier, paid on the dev chain to a fresh address."""
    from eth_account import Account

    return changed(settings, limits={"free_tier_calls": 0}, x402={
        "pay_to": str(Account.create().address), "rpc_url": chain.rpc_url,
        "relayer_key": chain.relayer.key.hex(),
    })  # fmt: skip


async def paid_store(client: Any, payer: LocalAccount, body: dict[str, Any]) -> Any:
    """POST /v1/store paid by `payer`: its 402, then the same request with a signed payment;
    the paid answer (201) and the payment header it carried, for a replay."""
    from tests.support.api import auth

    r = await client.post("/v1/store", json=body, headers=auth(payer))
    name, value = sign_proof(payer, offer_of(r))
    r = await client.post("/v1/store", json=body, headers={**auth(payer), name: value})
    assert r.status_code == 201, r.text
    return r, {name: value}
