"""Who verifies and settles a payment: Engram itself with a relayer key, or a remote facilitator.

- `LocalFacilitator`: x402's in-process facilitator (`ExactEvmFacilitatorScheme`, and
  `UptoEvmFacilitatorScheme` for variable-cost calls, over `FacilitatorWeb3Signer`): signature
  recovery, nonce unused on chain, balance, simulation, then `transferWithAuthorization` (or
  the upto proxy's `settle`) sent and mined by Engram's own relayer. web3 is synchronous, so
  every call runs in a worker thread, never on the event loop.
- `HTTPFacilitatorClient` (x402's): x402.org for testnets, CDP or another one for mainnet.
"""

from __future__ import annotations

import asyncio
from typing import Any, Protocol

from x402 import x402FacilitatorSync
from x402.http import FacilitatorConfig, HTTPFacilitatorClient
from x402.mechanisms.evm.exact import ExactEvmFacilitatorScheme, ExactEvmSchemeConfig
from x402.mechanisms.evm.signers import FacilitatorWeb3Signer
from x402.mechanisms.evm.upto import UptoEvmFacilitatorScheme, UptoEvmSchemeConfig
from x402.schemas import PaymentPayload, PaymentRequirements, SettleResponse, VerifyResponse

from app.config import X402Settings
from app.payments.cdp import CDP_FACILITATOR_URL, CdpAuth


class Facilitator(Protocol):
    async def verify(
        self, payload: PaymentPayload, requirements: PaymentRequirements
    ) -> VerifyResponse: ...

    async def settle(
        self, payload: PaymentPayload, requirements: PaymentRequirements
    ) -> SettleResponse: ...


class ResyncingWeb3Signer(FacilitatorWeb3Signer):
    """x402 2.25's signer reserves the relayer's next nonce before sending. When the node refuses
    the send (no gas money, a bad fee), that nonce is never used, and every later settlement
    queues behind the gap until it times out. Forgetting the reservation on a failed send makes
    the next one start again from the node's pending count."""

    def write_contract(self, *args: Any, **kwargs: Any) -> str:
        try:
            return super().write_contract(*args, **kwargs)
        except Exception:
            self._forget_reserved_nonces()
            raise

    def send_transaction(self, to: str, data: bytes) -> str:
        try:
            return super().send_transaction(to, data)
        except Exception:
            self._forget_reserved_nonces()
            raise

    def block_number(self) -> int:
        """The chain's latest block: a state read begun after it is at least this new."""
        return int(self._w3.eth.block_number)

    def mined_in(self, tx_hash: str) -> int:
        """The block a mined transaction is in."""
        return int(self._w3.eth.get_transaction_receipt(tx_hash)["blockNumber"])  # type: ignore[arg-type]

    def _forget_reserved_nonces(self) -> None:
        with self._nonce_lock:
            self._next_nonce = None


class LocalFacilitator:
    def __init__(
        self, relayer_key: str, rpc_url: str, network_caip2: str, settle_timeout_seconds: float
    ) -> None:
        signer = ResyncingWeb3Signer(
            private_key=relayer_key,
            rpc_url=rpc_url,
            confirmation_timeout_seconds=settle_timeout_seconds,
        )
        self._facilitator = x402FacilitatorSync()
        # simulate_in_settle: without it x402 2.25 sends a replayed nonce on chain, where it
        # reverts at the relayer's cost; with it the replay is refused before anything is sent.
        scheme = ExactEvmFacilitatorScheme(signer, ExactEvmSchemeConfig(simulate_in_settle=True))
        self._facilitator.register([network_caip2], scheme)
        # `upto` (app/payments/upto.py): the payer's permit names this relayer as the one
        # facilitator that may settle it; the same refusal of a replay before sending
        upto = UptoEvmFacilitatorScheme(signer, UptoEvmSchemeConfig(simulate_in_settle=True))
        self._facilitator.register([network_caip2], upto)
        self.relayer_address = signer.address

    async def verify(
        self, payload: PaymentPayload, requirements: PaymentRequirements
    ) -> VerifyResponse:
        return await asyncio.to_thread(self._facilitator.verify, payload, requirements)

    async def settle(
        self, payload: PaymentPayload, requirements: PaymentRequirements
    ) -> SettleResponse:
        return await asyncio.to_thread(self._facilitator.settle, payload, requirements)


def build_facilitator(
    x402: X402Settings, network_caip2: str, settle_timeout_seconds: float = 30
) -> Facilitator | None:
    """The configured facilitator, or None when payments cannot be settled here."""
    if x402.cdp_api_key_id and x402.cdp_api_key_secret:
        url = x402.facilitator_url or CDP_FACILITATOR_URL
        auth = CdpAuth(x402.cdp_api_key_id, x402.cdp_api_key_secret, url)
        cdp: Facilitator = HTTPFacilitatorClient(FacilitatorConfig(url=url, auth_provider=auth))
        return cdp
    if x402.facilitator_url:
        client: Facilitator = HTTPFacilitatorClient(FacilitatorConfig(url=x402.facilitator_url))
        return client
    if x402.relayer_key and x402.rpc_url:
        return LocalFacilitator(
            x402.relayer_key, x402.rpc_url, network_caip2, settle_timeout_seconds
        )
    return None
