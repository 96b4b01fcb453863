"""`engram serve --dev-chain`: Engram taking real x402 payments on a local chain, offline.

A local anvil chain (Base's chain id 8453) gets a USDC-like EIP-3009 token at the real Base USDC
address and x402's batch-settlement escrow with its ERC-3009 and Permit2 deposit collectors at
the scheme's addresses, so stock x402 clients pay it unchanged; a demo wallet is funded with 100
USDC and a small free tier makes the 402 arrive quickly. Keys here are public test keys, for this
chain only.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator
from dataclasses import replace

from eth_account import Account

from app.config import Settings
from app.dev.chain import DevChain
from app.dev.install import require_dev_extra

log = logging.getLogger("engram")

# anvil's well-known test accounts #1 and #2 (published with Foundry; never use on a real chain)
DEMO_WALLET_KEY = "0x59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d"
DEV_PAY_TO_KEY = "0x5de4111afa1a4b94908f83103eb1f1706367c2e68ca870fc3fb9a804cdab365a"
DEMO_WALLET_USDC = 100_000_000  # 100 USDC
DEV_FREE_TIER_CALLS = 3


@contextlib.contextmanager
def dev_chain(settings: Settings) -> Iterator[Settings]:
    require_dev_extra()  # before anvil starts: a missing extra is named, not a traceback later
    with DevChain(chain_id=8453) as chain:
        chain.install_usdc()
        escrow = chain.install_batch_settlement()
        upto_proxy = chain.install_upto_proxy()
        demo = Account.from_key(DEMO_WALLET_KEY)
        chain.fund(demo.address, DEMO_WALLET_USDC)
        pay_to = Account.from_key(DEV_PAY_TO_KEY).address
        free_calls = (
            settings.limits.free_tier_calls
            if os.environ.get("ENGRAM_FREE_TIER_CALLS")
            else DEV_FREE_TIER_CALLS
        )
        url = f"http://{settings.server.host}:{settings.server.port}"
        print(
            f"dev chain: anvil at {chain.rpc_url} (chain 8453), USDC at {chain.usdc_address}\n"
            f"  batch-settlement escrow at {escrow}, upto proxy at {upto_proxy}\n"
            f"  demo wallet {demo.address} holds 100 USDC; its key: {DEMO_WALLET_KEY}\n"
            f"  payments go to {pay_to}; free tier: {free_calls} calls per wallet\n"
            f"  try: python -m app.dev.paying_agent --url {url}",
            flush=True,
        )
        yield replace(
            settings,
            limits=replace(settings.limits, free_tier_calls=free_calls),
            x402=replace(
                settings.x402,
                network="base",
                pay_to=pay_to,
                facilitator_url=None,
                rpc_url=chain.rpc_url,
                relayer_key=chain.relayer.key.hex(),
            ),
        )
