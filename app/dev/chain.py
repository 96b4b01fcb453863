"""An offline local EVM chain for x402 payment tests and `engram serve --dev-chain`: `DevChain`,
the face its callers use, over the parts in their own modules.

`DevChain` runs anvil (process.py; the binary from the npm package `@foundry-rs/anvil`, npm.py),
can place a USDC-like EIP-3009 token at the REAL USDC address of the chain (usdc.py), and x402's
batch-settlement escrow with its deposit collectors and its upto Permit2 proxy at the schemes'
addresses (install.py), so that stock x402 clients and facilitators work against it unchanged.

Everything here is synchronous (web3 HTTPProvider); async callers run it in a worker thread.
"""

from __future__ import annotations

import atexit
import threading
from pathlib import Path
from typing import Any

from eth_account import Account
from eth_account.signers.local import LocalAccount
from eth_typing import ChecksumAddress
from web3 import Web3

from app.dev import install, usdc
from app.dev.npm import anvil_binary
from app.dev.process import STARTUP_TIMEOUT_S, Anvil

DEFAULT_CHAIN_ID = 8453
RELAYER_ETH_WEI = 1_000 * 10**18


class DevChain:
    """A throwaway anvil chain (context manager).

    `relayer` is a fresh account (or `relayer_key`) funded with ETH, meant to pay gas for
    settlement (x402's `FacilitatorWeb3Signer(private_key=..., rpc_url=chain.rpc_url)`). Setup
    transactions (`initialize`, `mint`) are sent from anvil's own unlocked dev account, so they
    never race the relayer's nonces.
    """

    def __init__(
        self,
        chain_id: int = DEFAULT_CHAIN_ID,
        port: int | None = None,
        *,
        relayer_key: str | None = None,
        log_file: Path | None = None,
        project_root: Path | None = None,  # default: devtools_root()
        startup_timeout: float = STARTUP_TIMEOUT_S,
    ) -> None:
        self.chain_id = chain_id
        self.relayer: LocalAccount = (
            Account.from_key(relayer_key) if relayer_key else Account.create()
        )
        self.usdc_address: ChecksumAddress | None = None
        self.escrow_address: ChecksumAddress | None = None
        self._project_root = project_root
        self._anvil = Anvil(chain_id, port, log_file=log_file, startup_timeout=startup_timeout)
        self._lock = threading.RLock()

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> DevChain:
        with self._lock:
            if self._anvil.started:
                return self
            binary = anvil_binary(self._project_root)
            self.usdc_address = None
            self.escrow_address = None
            try:
                self._anvil.start(binary)
                atexit.register(self.stop)
                self.set_eth_balance(self.relayer.address, RELAYER_ETH_WEI)
            except BaseException:
                self.stop()
                raise
            return self

    def stop(self) -> None:
        """Terminate anvil (its state is gone) and remove its temporary log. Idempotent."""
        with self._lock:
            if self._anvil.stop():
                atexit.unregister(self.stop)

    def __enter__(self) -> DevChain:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    @property
    def running(self) -> bool:
        return self._anvil.running

    @property
    def port(self) -> int:
        return self._anvil.port

    @property
    def rpc_url(self) -> str:
        return self._anvil.rpc_url

    @property
    def network(self) -> str:
        """CAIP-2 id as x402 v2 spells it (e.g. "eip155:8453")."""
        return f"eip155:{self.chain_id}"

    @property
    def w3(self) -> Web3:
        return self._anvil.w3

    # -- raw helpers ---------------------------------------------------------------------------

    def rpc(self, method: str, params: list[Any]) -> Any:
        """Call any JSON-RPC method (e.g. anvil_*, evm_*); raises on an error response."""
        return self._anvil.rpc(method, params)

    def set_eth_balance(self, address: str, wei: int) -> None:
        self._anvil.set_eth_balance(address, wei)

    def eth_balance(self, address: str) -> int:
        return self._anvil.eth_balance(address)

    # -- the token (usdc.py) -------------------------------------------------------------------

    def install_usdc(
        self,
        address: str | None = None,
        *,
        name: str | None = None,
        version: str | None = None,
    ) -> ChecksumAddress:
        """usdc.install_usdc on this chain, remembered as `usdc_address` for fund() and the
        balances. Idempotent. Returns the checksummed token address."""
        with self._lock:
            token = usdc.install_usdc(self._anvil, address, name=name, version=version)
            self.usdc_address = token
            return token

    def fund(self, address: str, usdc_atomic: int, eth_wei: int = 10**18) -> None:
        """Mint `usdc_atomic` dev USDC to `address` and add `eth_wei` to its ETH balance."""
        with self._lock:
            usdc.fund(self._anvil, self.usdc_address, address, usdc_atomic, eth_wei)

    def usdc_balance(self, address: str) -> int:
        return usdc.usdc_balance(self._anvil, self.usdc_address, address)

    def authorization_used(self, address: str, nonce_hex: str) -> bool:
        """EIP-3009 `authorizationState(authorizer, nonce)`: has this nonce been used?"""
        return usdc.authorization_used(self._anvil, self.usdc_address, address, nonce_hex)

    # -- the batch-settlement escrow and the upto proxy (install.py) ---------------------------

    def install_batch_settlement(self) -> ChecksumAddress:
        """Place the batch-settlement escrow at the scheme's deterministic address and its
        ERC-3009 and Permit2 deposit collectors at theirs, plus Permit2's and Multicall3's
        subsets when the chain has no code there. Idempotent. Returns the escrow's address."""
        with self._lock:
            escrow = install.install_batch_settlement(self._anvil)
            self.escrow_address = escrow
            return escrow

    def install_upto_proxy(self) -> ChecksumAddress:
        """Place x402's upto Permit2 proxy at the scheme's deterministic address (and Permit2's
        subset when the chain has none). Idempotent. Returns the proxy's address."""
        with self._lock:
            return install.install_upto_proxy(self._anvil)

    def escrow(self) -> Any:
        """The installed escrow as a web3 contract (the project's own ABI)."""
        return install.escrow_contract(self._anvil, self.escrow_address)


__all__ = ["DEFAULT_CHAIN_ID", "DevChain"]
