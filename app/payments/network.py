"""The networks Engram takes USDC on, with the facts a payment is checked against.

USDC addresses and EIP-712 domains per network come from the x402 package's own defaults (they
differ: "USD Coin" on Base, "USDC" on Base Sepolia; the wrong one fails as a bad signature).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from decimal import Decimal

from x402.mechanisms.evm.default_assets import get_default_asset

from app.config import X402Settings


@dataclass(frozen=True)
class Network:
    name: str  # x402 v1 network name
    caip2: str  # x402 v2 network id
    chain_id: int
    asset: str  # USDC contract address
    asset_name: str  # EIP-712 domain name
    asset_version: str  # EIP-712 domain version
    decimals: int

    def atomic(self, usd: Decimal) -> int:
        """USD price in the token's smallest unit ($0.005 = 5000 with 6 decimals)."""
        units = usd * (Decimal(10) ** self.decimals)
        if units != units.to_integral_value():
            raise ValueError(f"${usd} is not a whole number of token units")
        return int(units)


def _network(name: str, chain_id: int) -> Network:
    caip2 = f"eip155:{chain_id}"
    usdc = get_default_asset(caip2)
    return Network(
        name=name,
        caip2=caip2,
        chain_id=chain_id,
        asset=usdc["asset"],
        asset_name=usdc["name"],
        asset_version=usdc["version"],
        decimals=usdc["decimals"],
    )


NETWORKS = {"base": _network("base", 8453), "base-sepolia": _network("base-sepolia", 84532)}


def network_named(name: str) -> Network:
    try:
        return NETWORKS[name]
    except KeyError:
        raise SystemExit(
            f"ENGRAM_X402_NETWORK={name!r} is not supported; use one of {sorted(NETWORKS)}"
        ) from None


def configured_network(x402: X402Settings) -> Network:
    """The named network, with its token replaced when one is configured."""
    network = network_named(x402.network)
    if x402.asset is None:
        return network
    if not (x402.asset_name and x402.asset_version):
        raise SystemExit(
            "ENGRAM_X402_ASSET needs ENGRAM_X402_ASSET_NAME and ENGRAM_X402_ASSET_VERSION (the"
            " token's EIP-712 domain), or payments would fail as bad signatures"
        )
    return replace(
        network,
        asset=x402.asset,
        asset_name=x402.asset_name,
        asset_version=x402.asset_version,
        decimals=x402.asset_decimals or network.decimals,
    )
