"""Paid tools over MCP on `engram serve --dev-chain`: the REST price and free tier, then x402's
MCP transport, paid with x402's own MCP client helper (`x402.mcp.x402MCPSession`): the payment
requirement in the tool result, the paid retry settling on the local chain with the receipt in
the result's `_meta` and in GET /v1/payments, and a replay of that payment not charged again."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from eth_account import Account
from eth_account.signers.local import LocalAccount
from x402 import x402Client
from x402.mcp import MCP_PAYMENT_META_KEY, MCP_PAYMENT_RESPONSE_META_KEY, x402MCPSession
from x402.mechanisms.evm.batch_settlement.client import BatchSettlementEvmScheme
from x402.mechanisms.evm.exact import ExactEvmClientScheme
from x402.mechanisms.evm.signers import EthAccountSigner
from x402.schemas import PaymentPayload, SettleResponse
from x402.schemas.hooks import PaymentResponseContext

from app.dev.mode import DEMO_WALLET_KEY, DEV_FREE_TIER_CALLS
from tests.support.api import auth
from tests.support.mcp import WalletAuth, http_session, stdio_session
from tests.support.server import start_serve, stop_serve

STORE_PRICE_UNITS = 5000  # $0.005 in USDC's 6 decimals, as REST charges for /v1/store


class RecordingClient(x402Client):
    """x402's client, keeping the payloads it signs so a test can replay one."""

    def __init__(self) -> None:
        super().__init__()
        self.payloads: list[PaymentPayload] = []

    async def create_payment_payload(self, *args: Any, **kwargs: Any) -> Any:
        payload = await super().create_payment_payload(*args, **kwargs)
        self.payloads.append(payload)
        return payload


@pytest.fixture(scope="module")
def dev_serve(
    tmp_path_factory: pytest.TempPathFactory, database_url: str
) -> Iterator[tuple[str, str]]:
    """A real `engram serve --dev-chain` (on the session's database); yields (url, its log)."""
    data = tmp_path_factory.mktemp("mcp-dev")
    log = data / "serve.log"
    proc, url = start_serve(data, log, "--dev-chain", ENGRAM_DATABASE_URL=database_url)
    try:
        yield url, log.read_text()
    finally:
        stop_serve(proc, data, log)


def usdc_balance(serve_log: str, address: str) -> int:
    rpc = re.search(r"anvil at (http://127\.0\.0\.1:\d+)", serve_log)
    token = re.search(r"USDC at (0x[0-9a-fA-F]{40})", serve_log)
    assert rpc and token, serve_log
    data = "0x70a08231" + address.lower().removeprefix("0x").rjust(64, "0")  # balanceOf(address)
    r = httpx.post(rpc.group(1), json={"jsonrpc": "2.0", "id": 1, "method": "eth_call",
                                       "params": [{"to": token.group(1), "data": data}, "latest"]})  # fmt: skip
    return int(r.json()["result"], 16)


def payments_of(url: str, wallet: LocalAccount) -> list[dict[str, Any]]:
    r = httpx.get(f"{url}/v1/payments", headers=auth(wallet))
    r.raise_for_status()
    return list(r.json()["payments"])


def paying_client(payer: LocalAccount) -> RecordingClient:
    client = RecordingClient()
    client.register("eip155:8453", ExactEvmClientScheme(EthAccountSigner(payer)))
    return client


async def test_paid_tool_past_the_free_tier(dev_serve: tuple[str, str]) -> None:
    url, serve_log = dev_serve
    wallet = Account.create()  # the identity; the demo wallet pays for it (payer != wallet)
    payer: LocalAccount = Account.from_key(DEMO_WALLET_KEY)
    payer_before = usdc_balance(serve_log, payer.address)
    async with http_session(url, WalletAuth(wallet.key.hex())) as session:
        for n in range(DEV_FREE_TIER_CALLS):  # the same free tier as REST
            free = await session.call_tool("memoclaw_store", {"content": f"Free note {n}"})
            assert not free.isError, free.content
        status = await session.call_tool("memoclaw_status", {})
        assert status.structuredContent is not None
        assert status.structuredContent["free_tier_remaining"] == 0

        # 1. past the free tier: x402's payment requirement, in the tool result
        args = {"content": "The release train leaves every second Tuesday"}
        refused = await session.call_tool("memoclaw_store", args)
        assert refused.isError and refused.structuredContent is not None
        required = refused.structuredContent
        assert required["x402Version"] == 2
        offer = required["accepts"][0]
        async with httpx.AsyncClient() as http:
            rest = await http.post(f"{url}/v1/store", json=args, headers=auth(wallet))
        assert rest.status_code == 402  # REST asks the same price, to the same payee
        rest_offer = rest.json()["accepts"][0]
        assert int(offer["amount"]) == int(rest_offer["maxAmountRequired"]) == STORE_PRICE_UNITS
        assert offer["payTo"] == rest_offer["payTo"] and offer["network"] == "eip155:8453"

        # 2. x402's own MCP client pays it: the retry carries the payment in _meta, settles
        client = paying_client(payer)
        paid = await x402MCPSession(session, client).call_tool("memoclaw_store", args)
        assert paid.payment_made and not paid.is_error, paid.content
        receipt = paid.payment_response
        assert isinstance(receipt, SettleResponse) and receipt.success, receipt
        assert re.fullmatch(r"0x[0-9a-f]{64}", receipt.transaction)
        memory = paid.raw_result.structuredContent["memory"]
        assert memory["content"] == args["content"]
        ledger = payments_of(url, wallet)
        assert [(p["tx_hash"], p["endpoint"], p["payer"]) for p in ledger] == [
            (receipt.transaction, "POST /v1/store", payer.address.lower())
        ]
        assert usdc_balance(serve_log, payer.address) == payer_before - STORE_PRICE_UNITS

        # 3. a replay of the same payment (a lost answer, retried): same answer, not charged
        (payload,) = client.payloads
        meta = {MCP_PAYMENT_META_KEY: payload.model_dump(by_alias=True, exclude_none=True)}
        replay = await session.call_tool("memoclaw_store", args, meta=meta)
        assert not replay.isError, replay.content
        assert replay.structuredContent is not None
        assert replay.structuredContent["memory"]["id"] == memory["id"]
        assert replay.meta is not None
        assert replay.meta[MCP_PAYMENT_RESPONSE_META_KEY]["transaction"] == receipt.transaction
        # the same payment for another call is refused, with a fresh requirement
        reused = await session.call_tool("memoclaw_store", {"content": "Something else"}, meta=meta)
        assert reused.isError and reused.structuredContent is not None
        assert reused.structuredContent["error"] == "invalid_exact_evm_nonce_already_used"
        assert len(payments_of(url, wallet)) == 1
        assert usdc_balance(serve_log, payer.address) == payer_before - STORE_PRICE_UNITS
        listed = await session.call_tool("memoclaw_list", {})
        assert listed.structuredContent is not None
        assert listed.structuredContent["total"] == DEV_FREE_TIER_CALLS + 1


async def test_paid_tool_over_stdio(dev_serve: tuple[str, str], tmp_path: Path) -> None:
    """`engram mcp` relays the same transport: requirement out, payment in, receipt back."""
    url, _ = dev_serve
    wallet = Account.create()
    async with stdio_session(url, tmp_path, ENGRAM_PRIVATE_KEY=wallet.key.hex()) as session:
        for n in range(DEV_FREE_TIER_CALLS):
            await session.call_tool("memoclaw_recall", {"query": f"note {n}"})
        paid = await x402MCPSession(session, paying_client(Account.from_key(DEMO_WALLET_KEY))
                                    ).call_tool("memoclaw_recall", {"query": "release train"})  # fmt: skip
        assert paid.payment_made and not paid.is_error, paid.content
        assert isinstance(paid.payment_response, SettleResponse) and paid.payment_response.success
    assert [p["endpoint"] for p in payments_of(url, wallet)] == ["POST /v1/recall"]


async def test_malformed_payment_meta_is_refused(dev_serve: tuple[str, str]) -> None:
    url, _ = dev_serve
    wallet = Account.create()
    async with http_session(url, WalletAuth(wallet.key.hex())) as session:
        bad = await session.call_tool("memoclaw_store", {"content": "x y z"},
                                      meta={MCP_PAYMENT_META_KEY: {"nonsense": 1}})  # fmt: skip
        assert bad.isError
        assert "not an x402 payment payload" in bad.content[0].text  # type: ignore[union-attr]
    assert payments_of(url, wallet) == []


def block_number(serve_log: str) -> int:
    rpc = re.search(r"anvil at (http://127\.0\.0\.1:\d+)", serve_log)
    assert rpc, serve_log
    r = httpx.post(rpc.group(1), json={"jsonrpc": "2.0", "id": 1, "method": "eth_blockNumber",
                                       "params": []})  # fmt: skip
    return int(r.json()["result"], 16)


async def test_paid_tools_through_a_payment_channel(dev_serve: tuple[str, str]) -> None:
    """x402's MCP client helper with x402's batch-settlement client scheme: the first paid call
    deposits (one transaction), the next ones carry vouchers and touch no chain."""
    url, serve_log = dev_serve
    wallet: LocalAccount = Account.create()
    async with httpx.AsyncClient() as http:  # x402's channel pays for the wallet's own calls
        funded = await http.get(f"{url}/v1/free-tier/status", headers=auth(wallet))
    assert funded.status_code == 200
    payer: LocalAccount = Account.from_key(DEMO_WALLET_KEY)
    client = RecordingClient()
    client.register("eip155:8453", BatchSettlementEvmScheme(EthAccountSigner(payer)))
    async with http_session(url, WalletAuth(wallet.key.hex())) as session:
        for n in range(DEV_FREE_TIER_CALLS):
            assert not (await session.call_tool("memoclaw_store", {"content": f"Free {n}"})).isError
        first_block = block_number(serve_log)
        paying = x402MCPSession(session, client)
        receipts = []
        for n in range(4):
            args = {"content": f"Channel-paid note {n} on the release train schedule"}
            paid = await paying.call_tool("memoclaw_store", args)
            assert paid.payment_made and not paid.is_error, paid.content
            receipts.append(paid.payment_response)
            # x402's MCP helper hands the receipt to no client hook: the channel's running
            # total reaches the client scheme as its HTTP client would pass it
            payload = client.payloads[-1]
            await client.handle_payment_response(
                PaymentResponseContext(
                    payment_payload=payload, requirements=payload.accepted,
                    settle_response=paid.payment_response,
                )
            )  # fmt: skip
    kinds = [p.payload["type"] for p in client.payloads]
    assert kinds == ["deposit", "voucher", "voucher", "voucher"]
    assert all(isinstance(r, SettleResponse) and r.success for r in receipts)
    assert receipts[0].transaction and not any(r.transaction for r in receipts[1:])
    charged = [r.extra["channelState"]["chargedCumulativeAmount"] for r in receipts]
    assert charged == [str(STORE_PRICE_UNITS * n) for n in range(1, 5)]
    assert block_number(serve_log) == first_block + 1  # the deposit alone
