"""The payments reconciler: pending ledger rows whose outcome no request learnt (a settlement
that timed out, a process killed between settling and committing) are checked against the chain.

- Settled on chain (the facilitator's answer was noted, or the token says the authorization's
  nonce is used): the row becomes redeemable, and the same proof with the same request gets its
  work done without a second charge.
- Not settled, and untouched for `after_seconds` (longer than any settlement takes): the row is
  dropped, nothing moved, and the proof may pay again.
Each instance runs it on start and then on a timer (app/asgi.py); rows are settled at most once
whoever looks, since each step only moves a row out of `pending`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import asyncpg
from web3 import Web3
from x402.mechanisms.evm.constants import PERMIT2_ADDRESS

from app.config import X402Settings
from app.payments import repository
from app.payments.network import configured_networks, network_settings
from app.payments.offers import UPTO_SCHEME

log = logging.getLogger("engram.payments.reconcile")


def view_abi(name: str, inputs: list[tuple[str, str]], output: str) -> list[dict[str, Any]]:
    """The ABI of one view function: its name, (name, type) inputs and one output's type."""
    return [
        {
            "name": name,
            "type": "function",
            "stateMutability": "view",
            "inputs": [{"name": n, "type": t} for n, t in inputs],
            "outputs": [{"name": "", "type": output}],
        }
    ]


# EIP-3009's view of an authorization's nonce, which every x402 "exact" EVM token has
AUTHORIZATION_STATE_ABI = view_abi(
    "authorizationState", [("authorizer", "address"), ("nonce", "bytes32")], "bool"
)
# Permit2's record of spent unordered nonces (an `upto` permit's nonce, app/payments/upto.py)
NONCE_BITMAP_ABI = view_abi(
    "nonceBitmap", [("owner", "address"), ("wordPos", "uint256")], "uint256"
)
ROWS_PER_RUN = 200
RECONCILE_EVERY_SECONDS = 30.0


class ChainReader:
    """Asks the token whether a payer's authorization nonce is used (over the RPC URL of the
    network it is on: ENGRAM_X402_RPC_URL, or ENGRAM_X402_<NAME>_RPC_URL)."""

    def __init__(self, rpc_url: str) -> None:
        self.w3 = Web3(Web3.HTTPProvider(rpc_url, request_kwargs={"timeout": 10}))

    async def nonce_used(self, asset: str, payer: str, nonce: str) -> bool:
        token = self.w3.eth.contract(
            address=Web3.to_checksum_address(asset), abi=AUTHORIZATION_STATE_ABI
        )
        call = token.functions.authorizationState(
            Web3.to_checksum_address(payer), bytes.fromhex(nonce.removeprefix("0x"))
        )
        return bool(await asyncio.to_thread(call.call))

    async def permit2_nonce_used(self, payer: str, nonce: str) -> bool:
        """Whether Permit2 spent the payer's unordered nonce (an `upto` permit's): bit
        `nonce & 255` of word `nonce >> 8` in its nonceBitmap."""
        permit2 = self.w3.eth.contract(
            address=Web3.to_checksum_address(PERMIT2_ADDRESS), abi=NONCE_BITMAP_ABI
        )
        value = int(nonce, 16)
        call = permit2.functions.nonceBitmap(Web3.to_checksum_address(payer), value >> 8)
        word = int(await asyncio.to_thread(call.call))
        return bool(word >> (value & 0xFF) & 1)

    async def spent(self, row: asyncpg.Record) -> bool:
        """Whether the pending row's payment settled: its nonce used where its scheme keeps it."""
        if row["scheme"] == UPTO_SCHEME:
            return await self.permit2_nonce_used(row["payer"], row["nonce"])
        return await self.nonce_used(row["asset"], row["payer"], row["nonce"])


@dataclass
class Reconciled:
    redeemable: int = 0
    dropped: int = 0
    unresolved: int = 0


def chain_readers(x402: X402Settings) -> dict[str, ChainReader]:
    """A reader per network with an RPC URL, by CAIP-2 id (a ledger row's `network`)."""
    return {
        network.caip2: ChainReader(view.rpc_url)
        for network, view in zip(configured_networks(x402), network_settings(x402), strict=True)
        if view.rpc_url
    }


class Reconciler:
    def __init__(self, chains: Mapping[str, ChainReader], after_seconds: float) -> None:
        self.chains = chains  # by network (CAIP-2): a row is checked on its own network's chain
        self.after_seconds = after_seconds

    async def run_once(self, ledger: asyncpg.Pool) -> Reconciled:
        done = Reconciled()
        async with ledger.acquire() as conn:
            rows = await repository.pending_before(conn, self.after_seconds, ROWS_PER_RUN)
        for row in rows:
            settled = await self._settled_on_chain(row)
            async with ledger.acquire() as conn:
                if settled:
                    await repository.mark_redeemable(conn, row["wallet"], row["id"], None)
                    done.redeemable += 1
                elif settled is False:
                    await repository.drop_unsettled(conn, row["wallet"], row["id"])
                    done.dropped += 1
                else:
                    done.unresolved += 1
        if rows:
            log.info("reconciled pending payments: %s", done)
        return done

    async def _settled_on_chain(self, row: asyncpg.Record) -> bool | None:
        """True or False, or None when nothing can tell (no RPC configured for the row's network,
        or it failed)."""
        if row["tx_hash"]:
            return True
        chain = self.chains.get(row["network"])
        if chain is None:
            return None
        try:
            return await chain.spent(row)
        except Exception:
            log.exception("could not read the payment's nonce on chain; retried next run")
            return None
