"""What a payment costs in time on the local dev chain: anvil start, token install, and x402's
verify and settle (the two facilitator calls a paid request adds).

Run: .venv/bin/python bench/payments.py [N]
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time

from eth_account import Account
from x402 import x402Client, x402FacilitatorSync
from x402.mechanisms.evm.exact import (
    ExactEvmClientScheme,
    ExactEvmFacilitatorScheme,
    ExactEvmSchemeConfig,
)
from x402.mechanisms.evm.signers import EthAccountSigner, FacilitatorWeb3Signer
from x402.schemas import PaymentPayload, PaymentRequired, PaymentRequirements, ResourceInfo

from app.dev.chain import DevChain
from app.dev.usdc import usdc_defaults


def _ms(samples: list[float]) -> str:
    ordered = sorted(samples)
    p95 = ordered[int(0.95 * (len(ordered) - 1))]
    return f"p50 {statistics.median(ordered) * 1e3:6.1f} ms  p95 {p95 * 1e3:6.1f} ms"


async def main(n: int) -> None:
    t0 = time.perf_counter()
    with DevChain(chain_id=8453) as chain:
        t1 = time.perf_counter()
        chain.install_usdc()
        t2 = time.perf_counter()
        print(f"anvil start {t1 - t0:.3f} s, token install (compile + setCode) {t2 - t1:.3f} s")
        signer = FacilitatorWeb3Signer(private_key=chain.relayer.key.hex(), rpc_url=chain.rpc_url)
        facilitator = x402FacilitatorSync()
        config = ExactEvmSchemeConfig(simulate_in_settle=True)
        facilitator.register([chain.network], ExactEvmFacilitatorScheme(signer, config))
        payer = Account.create()
        chain.fund(payer.address, 10_000_000, eth_wei=0)
        client = x402Client()
        client.register(chain.network, ExactEvmClientScheme(EthAccountSigner(payer)))
        asset, name, version = usdc_defaults(chain.chain_id)
        requirements = PaymentRequirements(
            scheme="exact", network=chain.network, asset=asset, amount="5000",
            pay_to=Account.create().address, max_timeout_seconds=300,
            extra={"name": name, "version": version},
        )  # fmt: skip
        verify, settle = [], []
        for _ in range(n):
            payload = await client.create_payment_payload(
                PaymentRequired(accepts=[requirements], resource=ResourceInfo(url="http://b"))
            )
            assert isinstance(payload, PaymentPayload)
            t = time.perf_counter()
            assert facilitator.verify(payload, requirements).is_valid
            verify.append(time.perf_counter() - t)
            t = time.perf_counter()
            assert facilitator.settle(payload, requirements).success
            settle.append(time.perf_counter() - t)
        print(f"verify ({n}): {_ms(verify)}")
        print(f"settle ({n}): {_ms(settle)}")


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 50))
