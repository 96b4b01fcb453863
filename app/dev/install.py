"""The dev chain's contracts, compiled offline with vyper (the `dev` extra) and placed with
`anvil_setCode`: x402's batch-settlement escrow (`contracts/batch_settlement.vy`) and its two
deposit collectors, ERC-3009 (`contracts/erc3009_deposit_collector.vy`) and Permit2
(`contracts/permit2_deposit_collector.vy`), at the scheme's deterministic addresses; x402's upto
Permit2 proxy (`contracts/upto_permit2_proxy.vy`) at its address; and, when the chain has none,
the parts of Permit2 (`contracts/permit2_subset.vy`) and of Multicall3
(`contracts/multicall3_subset.vy`, which x402's facilitator reads through) that x402 uses, at
their well-known addresses. So x402's stock batch-settlement and upto clients and facilitator
work unchanged. All are written for the dev chain from the published interfaces.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any, cast

from eth_typing import ChecksumAddress
from web3 import Web3
from x402.mechanisms.evm.batch_settlement.constants import (
    BATCH_SETTLEMENT_ADDRESS,
    ERC3009_DEPOSIT_COLLECTOR_ADDRESS,
    PERMIT2_DEPOSIT_COLLECTOR_ADDRESS,
)
from x402.mechanisms.evm.constants import (
    MULTICALL3_ADDRESS,
    PERMIT2_ADDRESS,
    X402_UPTO_PERMIT2_PROXY_ADDRESS,
)

from app.dev.errors import DevChainError
from app.dev.process import Anvil

CONTRACTS = Path(__file__).with_name("contracts")
ESCROW_SOURCE = CONTRACTS / "batch_settlement.vy"
ERC3009_COLLECTOR_SOURCE = CONTRACTS / "erc3009_deposit_collector.vy"
PERMIT2_COLLECTOR_SOURCE = CONTRACTS / "permit2_deposit_collector.vy"
PERMIT2_SOURCE = CONTRACTS / "permit2_subset.vy"
MULTICALL3_SOURCE = CONTRACTS / "multicall3_subset.vy"
UPTO_PROXY_SOURCE = CONTRACTS / "upto_permit2_proxy.vy"

# How to get the Python side of these tools (vyper); anvil comes from npm (see app/dev/npm.py).
DEV_EXTRA_INSTALL = "pip install 'engram-x402[dev]' (in a checkout: pip install -e '.[dev]')"


def require_dev_extra() -> None:
    """Raise DevChainError naming the `dev` extra when its packages are not installed: a
    production install of Engram leaves them out."""
    _vyper()


def _vyper() -> Any:
    try:
        import vyper  # type: ignore[import-untyped]  # no type information published
    except ImportError as exc:
        raise DevChainError(
            f"the dev chain needs the dev extra ({exc.name or 'vyper'} is not installed): "
            f"{DEV_EXTRA_INSTALL}"
        ) from exc
    return vyper


@functools.cache
def compiled(source: Path) -> tuple[bytes, list[dict[str, Any]]]:
    """(runtime bytecode, ABI) of one of the dev contracts, compiled once per process."""
    out = _vyper().compile_code(
        source.read_text(),
        contract_path=str(source),
        output_formats=["bytecode_runtime", "abi"],
    )
    runtime = bytes.fromhex(str(out["bytecode_runtime"]).removeprefix("0x"))
    return runtime, cast(list[dict[str, Any]], out["abi"])


def escrow_abi() -> list[dict[str, Any]]:
    """ABI of the dev batch-settlement escrow (its reverts are the scheme's custom errors,
    raised as raw data, so they are not listed)."""
    return compiled(ESCROW_SOURCE)[1]


def deposit_collector_abi() -> list[dict[str, Any]]:
    """ABI of the dev ERC-3009 deposit collector."""
    return compiled(ERC3009_COLLECTOR_SOURCE)[1]


def permit2_deposit_collector_abi() -> list[dict[str, Any]]:
    """ABI of the dev Permit2 deposit collector."""
    return compiled(PERMIT2_COLLECTOR_SOURCE)[1]


def permit2_abi() -> list[dict[str, Any]]:
    """ABI of the dev chain's Permit2 subset."""
    return compiled(PERMIT2_SOURCE)[1]


def upto_proxy_abi() -> list[dict[str, Any]]:
    """ABI of the dev chain's x402 upto Permit2 proxy (its reverts are raw custom errors)."""
    return compiled(UPTO_PROXY_SOURCE)[1]


def install_batch_settlement(anvil: Anvil) -> ChecksumAddress:
    """Place the batch-settlement escrow at the scheme's deterministic address and its
    ERC-3009 and Permit2 deposit collectors at theirs (each bound to the escrow by
    `initialize`), plus Permit2's and Multicall3's subsets at their addresses when the
    chain has no code there. Idempotent. Returns the escrow's checksummed address."""
    escrow = Web3.to_checksum_address(BATCH_SETTLEMENT_ADDRESS)
    permit2 = Web3.to_checksum_address(PERMIT2_ADDRESS)
    for address, source in (
        (MULTICALL3_ADDRESS, MULTICALL3_SOURCE),
        (PERMIT2_ADDRESS, PERMIT2_SOURCE),
    ):
        if not bytes(anvil.w3.eth.get_code(Web3.to_checksum_address(address))):
            anvil.set_code(Web3.to_checksum_address(address), compiled(source)[0])
    anvil.set_code(escrow, compiled(ESCROW_SOURCE)[0])
    _install_collector(anvil, ERC3009_DEPOSIT_COLLECTOR_ADDRESS, ERC3009_COLLECTOR_SOURCE, escrow)
    _install_collector(
        anvil, PERMIT2_DEPOSIT_COLLECTOR_ADDRESS, PERMIT2_COLLECTOR_SOURCE, escrow, permit2
    )
    return escrow


def install_upto_proxy(anvil: Anvil) -> ChecksumAddress:
    """Place x402's upto Permit2 proxy at the scheme's deterministic address, and Permit2's
    subset at its address when the chain has no code there, so that x402's stock `upto`
    client and facilitator work unchanged. Idempotent. Returns the proxy's address."""
    permit2 = Web3.to_checksum_address(PERMIT2_ADDRESS)
    if not bytes(anvil.w3.eth.get_code(permit2)):
        anvil.set_code(permit2, compiled(PERMIT2_SOURCE)[0])
    proxy = Web3.to_checksum_address(X402_UPTO_PERMIT2_PROXY_ADDRESS)
    anvil.set_code(proxy, compiled(UPTO_PROXY_SOURCE)[0])
    return proxy


def _install_collector(
    anvil: Anvil, address: str, source: Path, *bound_to: ChecksumAddress
) -> None:
    """A deposit collector's code, then `initialize(escrow[, permit2])` once."""
    collector_address = Web3.to_checksum_address(address)
    runtime, abi = compiled(source)
    anvil.set_code(collector_address, runtime)
    collector = anvil.w3.eth.contract(address=collector_address, abi=abi)
    serves = collector.functions.x402BatchSettlement().call()
    if int(serves, 16) == 0:
        data = collector.encode_abi("initialize", args=list(bound_to))
        anvil.send_setup_tx(collector_address, data)
    elif Web3.to_checksum_address(serves) != bound_to[0]:
        raise DevChainError(f"collector at {collector_address} serves {serves}")


def escrow_contract(anvil: Anvil, escrow: ChecksumAddress | None) -> Any:
    """The installed escrow as a web3 contract (the project's own ABI)."""
    if escrow is None:
        raise DevChainError("call install_batch_settlement() first")
    return anvil.w3.eth.contract(address=escrow, abi=escrow_abi())
