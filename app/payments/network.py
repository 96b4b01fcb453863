"""The networks Engram takes USDC on, with the facts a payment is checked against.

USDC addresses and EIP-712 domains per network come from the x402 package's own defaults (they
differ: "USD Coin" on Base, "USDC" on Base Sepolia; the wrong one fails as a bad signature).

An operator may take payments on several networks at once (ENGRAM_X402_NETWORKS, app/config.py):
the default one (ENGRAM_X402_NETWORK) set up by the single-network variables, and each other
one by its own ENGRAM_X402_<NAME>_* variables. `network_settings` resolves each into the
settings the default network would have, so every network is built the same way (its token,
facilitator or relayer, payment channels, reconciler reads).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from decimal import Decimal

from x402.mechanisms.evm.default_assets import get_default_asset
from x402.mechanisms.evm.v1.constants import V1_NETWORK_CHAIN_IDS

from app.config import ExtraNetwork, X402Settings, network_prefix


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

    @property
    def v1(self) -> bool:
        """x402 v1 names this network (v1 clients know a network by name, not chain id)."""
        return V1_NETWORK_CHAIN_IDS.get(self.name) == self.chain_id


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


# The EVM networks whose USDC x402 knows (EIP-3009, so `exact` and payment channels take it),
# by the names x402 v1 gives them where it has one.
NETWORKS = {
    network.name: network
    for network in (
        _network("base", 8453),
        _network("base-sepolia", 84532),
        _network("arbitrum", 42161),
        _network("arbitrum-sepolia", 421614),
        _network("polygon", 137),
        _network("avalanche", 43114),
        _network("ethereum", 1),
    )
}


def network_named(name: str, variable: str = "ENGRAM_X402_NETWORK") -> Network:
    try:
        return NETWORKS[name]
    except KeyError:
        raise SystemExit(
            f"{variable} names {name!r}, which is not supported; use one of {sorted(NETWORKS)}"
        ) from None


def configured_network(x402: X402Settings, prefix: str = "ENGRAM_X402_") -> Network:
    """The named network, with its token replaced when one is configured (`prefix`: where its
    variables start, for the error)."""
    network = network_named(x402.network)
    if x402.asset is None:
        return network
    if not (x402.asset_name and x402.asset_version):
        raise SystemExit(
            f"{prefix}ASSET needs {prefix}ASSET_NAME and {prefix}ASSET_VERSION (the"
            " token's EIP-712 domain), or payments would fail as bad signatures"
        )
    return replace(
        network,
        asset=x402.asset,
        asset_name=x402.asset_name,
        asset_version=x402.asset_version,
        decimals=x402.asset_decimals or network.decimals,
    )


def network_settings(x402: X402Settings) -> tuple[X402Settings, ...]:
    """Each network payments are taken on, as the settings the default network would have: the
    default first (`x402` itself), then each of ENGRAM_X402_NETWORKS. A listed network takes
    the default's payTo and relayer key unless it sets its own (an EVM address and key are
    the same on every chain; the relayer needs gas money on each), and nothing else: its RPC
    URL, facilitator and token are its own, and the CDP key serves the default network only."""
    network_named(x402.network)
    for extra in x402.networks:
        network_named(extra.name, "ENGRAM_X402_NETWORKS")  # names one NETWORKS knows
        if extra.name == x402.network:
            raise SystemExit(
                f"ENGRAM_X402_NETWORKS lists {extra.name!r}, the default network"
                " (ENGRAM_X402_NETWORK): list only the others"
            )
    return (x402, *(_settings_of(x402, extra) for extra in x402.networks))


def _settings_of(x402: X402Settings, extra: ExtraNetwork) -> X402Settings:
    return replace(
        x402,
        network=extra.name,
        pay_to=extra.pay_to or x402.pay_to,
        facilitator_url=extra.facilitator_url,
        cdp_api_key_id=None,
        cdp_api_key_secret=None,
        rpc_url=extra.rpc_url,
        relayer_key=extra.relayer_key or x402.relayer_key,
        asset=extra.asset,
        asset_name=extra.asset_name,
        asset_version=extra.asset_version,
        asset_decimals=extra.asset_decimals,
        networks=(),
    )


def configured_networks(x402: X402Settings) -> tuple[Network, ...]:
    """Every network payments are taken on, the default first, each with its token. Their
    tokens must count in the same unit (usage reports and prices are in one)."""
    default, *others = network_settings(x402)
    networks = (
        configured_network(default),
        *(configured_network(view, network_prefix(view.network)) for view in others),
    )
    for network in networks[1:]:
        if network.decimals != networks[0].decimals:
            raise SystemExit(
                f"{network_prefix(network.name)}ASSET_DECIMALS: the token on {network.name} has"
                f" {network.decimals} decimals, the default network's {networks[0].decimals};"
                " every network's token must have the same"
            )
    return networks
