"""The dev USDC: a USDC-like EIP-3009 token (`contracts/usdc_eip3009.vy`) placed at the REAL USDC
address of the chain, so that stock x402 defaults (asset address and EIP-712 domain
name/version per network) apply unchanged; minting to fund wallets, and its balances and used
authorizations.

Name/version per network: the token has no constructor (its runtime code is installed with
`anvil_setCode`), so it keeps name/version in storage, set once by an `initialize(name, version)`
call right after the code is installed. The values come from x402's own default-asset table:
"USD Coin"/"2" on Base (8453), "USDC"/"2" on Base Sepolia (84532).

(Named usdc, not token: a module `token` beside a script run from this folder would shadow the
standard library's.)
"""

from __future__ import annotations

from typing import Any

from eth_typing import ChecksumAddress
from web3 import Web3

from app.dev.errors import DevChainError
from app.dev.install import CONTRACTS, compiled
from app.dev.process import Anvil

TOKEN_SOURCE = CONTRACTS / "usdc_eip3009.vy"


def token_abi() -> list[dict[str, Any]]:
    """ABI of the dev USDC (the bytes-signature `transferWithAuthorization` overload is served
    by the fallback, so it is not listed: x402's own ABI constant covers it)."""
    return compiled(TOKEN_SOURCE)[1]


def usdc_defaults(chain_id: int) -> tuple[str, str, str]:
    """(address, EIP-712 name, EIP-712 version) of USDC on `chain_id`, from x402's defaults."""
    from x402.mechanisms.evm.default_assets import get_default_asset

    try:
        asset = get_default_asset(f"eip155:{chain_id}")
    except Exception as exc:
        raise DevChainError(
            f"x402 knows no default USDC for chain {chain_id}: pass address/name/version"
        ) from exc
    return str(asset["asset"]), str(asset["name"]), str(asset["version"])


def install_usdc(
    anvil: Anvil,
    address: str | None = None,
    *,
    name: str | None = None,
    version: str | None = None,
) -> ChecksumAddress:
    """Place the dev USDC at the real USDC address of this chain (or `address`) and store
    its EIP-712 name/version (x402's defaults for this chain unless given). Idempotent.
    Returns the checksummed token address."""
    if address is None or name is None or version is None:
        default_address, default_name, default_version = usdc_defaults(anvil.chain_id)
        address = address or default_address
        name = name if name is not None else default_name
        version = version if version is not None else default_version
    token = Web3.to_checksum_address(address)
    runtime, abi = compiled(TOKEN_SOURCE)
    contract = anvil.w3.eth.contract(address=token, abi=abi)
    anvil.set_code(token, runtime)
    if contract.functions.initialized().call():
        stored = (contract.functions.name().call(), contract.functions.version().call())
        if stored != (name, version):
            raise DevChainError(
                f"token at {token} is already initialised as {stored}, not {(name, version)}"
            )
    else:
        data = contract.encode_abi("initialize", args=[name, version])
        anvil.send_setup_tx(token, data)
    return token


def fund(
    anvil: Anvil, token: ChecksumAddress | None, address: str, usdc_atomic: int, eth_wei: int
) -> None:
    """Mint `usdc_atomic` dev USDC to `address` and add `eth_wei` to its ETH balance."""
    account = Web3.to_checksum_address(address)
    if eth_wei:
        anvil.set_eth_balance(account, anvil.eth_balance(account) + eth_wei)
    if usdc_atomic:
        usdc = _usdc(anvil, token)
        data = usdc.encode_abi("mint", args=[account, usdc_atomic])
        anvil.send_setup_tx(usdc.address, data)


def usdc_balance(anvil: Anvil, token: ChecksumAddress | None, address: str) -> int:
    return int(_usdc(anvil, token).functions.balanceOf(Web3.to_checksum_address(address)).call())


def authorization_used(
    anvil: Anvil, token: ChecksumAddress | None, address: str, nonce_hex: str
) -> bool:
    """EIP-3009 `authorizationState(authorizer, nonce)`: has this nonce been used?"""
    nonce = bytes.fromhex(nonce_hex.removeprefix("0x"))
    if len(nonce) != 32:
        raise ValueError(f"nonce must be 32 bytes, got {len(nonce)}")
    usdc = _usdc(anvil, token)
    return bool(usdc.functions.authorizationState(Web3.to_checksum_address(address), nonce).call())


def _usdc(anvil: Anvil, token: ChecksumAddress | None) -> Any:
    if token is None:
        raise DevChainError("call install_usdc() first")
    return anvil.w3.eth.contract(address=token, abi=token_abi())
