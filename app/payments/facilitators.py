"""Who verifies and settles a payment: Engram itself with a relayer key, or a remote facilitator.

- `LocalFacilitator`: x402's in-process facilitator (`ExactEvmFacilitatorScheme` over
  `FacilitatorWeb3Signer`): signature recovery, nonce unused on chain, balance, simulation, then
  `transferWithAuthorization` sent and mined by Engram's own relayer. web3 is synchronous, so
  every call runs in a worker thread, never on the event loop.
- `HTTPFacilitatorClient` (x402's): x402.org for testnets, CDP or another one for mainnet.
"""

from __future__ import annotations

import asyncio
from typing import Protocol

from x402 import x402FacilitatorSync
from x402.http import FacilitatorConfig, HTTPFacilitatorClient
from x402.mechanisms.evm.exact import ExactEvmFacilitatorScheme, ExactEvmSchemeConfig
from x402.mechanisms.evm.signers import FacilitatorWeb3Signer
from x402.schemas import PaymentPayload, PaymentRequirements, SettleResponse, VerifyResponse


class Facilitator(Protocol):
    async def verify(
        self, payload: PaymentPayload, requirements: PaymentRequirements
    ) -> VerifyResponse: ...

    async def settle(
        self, payload: PaymentPayload, requirements: PaymentRequirements
    ) -> SettleResponse: ...


class LocalFacilitator:
    def __init__(self, relayer_key: str, rpc_url: str, network_caip2: str) -> None:
        signer = FacilitatorWeb3Signer(private_key=relayer_key, rpc_url=rpc_url)
        self._facilitator = x402FacilitatorSync()
        # simulate_in_settle: without it x402 2.25 sends a replayed nonce on chain, where it
        # reverts at the relayer's cost; with it the replay is refused before anything is sent.
        scheme = ExactEvmFacilitatorScheme(signer, ExactEvmSchemeConfig(simulate_in_settle=True))
        self._facilitator.register([network_caip2], scheme)
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
    facilitator_url: str | None, relayer_key: str | None, rpc_url: str | None, network_caip2: str
) -> Facilitator | None:
    """The configured facilitator, or None when payments cannot be settled here."""
    if facilitator_url:
        client: Facilitator = HTTPFacilitatorClient(FacilitatorConfig(url=facilitator_url))
        return client
    if relayer_key and rpc_url:
        return LocalFacilitator(relayer_key, rpc_url, network_caip2)
    return None
