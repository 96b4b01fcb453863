"""What each paid call costs: the handler declares its kind of price (`opt={"price": kind}`), and
the price list maps kinds to USD amounts (contract defaults, each overridable by configuration).

Defaults from docs/api-contract.md ("Prices", USD, paid in USDC): only endpoints that call an
embedding model or an LLM are paid. Middleware and the payment gate read the kind from the route
handler, so there is no path→price table to drift.
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal, InvalidOperation
from typing import Any

PRICE_OPT_KEY = "price"

STORE = "store"
RECALL = "recall"
UPDATE = "update"
BATCH_UPDATE = "batch_update"
STORE_BATCH = "store_batch"
LLM_CALL = "llm_call"  # extract, consolidate, ingest, context, migrate

DEFAULT_PRICES_USD: Mapping[str, Decimal] = {
    STORE: Decimal("0.005"),
    RECALL: Decimal("0.005"),
    UPDATE: Decimal("0.005"),
    BATCH_UPDATE: Decimal("0.005"),
    STORE_BATCH: Decimal("0.04"),
    LLM_CALL: Decimal("0.01"),
}


def paid(kind: str) -> dict[str, Any]:
    """Handler `opt` for a paid route."""
    if kind not in DEFAULT_PRICES_USD:
        raise ValueError(f"unknown price kind {kind!r}")
    return {PRICE_OPT_KEY: kind}


def price_of(route_handler: Any) -> str | None:
    """The handler's kind of price, or None for a free route."""
    opt = getattr(route_handler, "opt", None) or {}
    kind = opt.get(PRICE_OPT_KEY)
    return str(kind) if kind is not None else None


def price_list(env: Mapping[str, str]) -> dict[str, Decimal]:
    """Contract defaults, overridden by ENGRAM_PRICE_<KIND> (USD, e.g. ENGRAM_PRICE_STORE=0.01)."""
    prices = dict(DEFAULT_PRICES_USD)
    for kind in prices:
        raw = env.get(f"ENGRAM_PRICE_{kind.upper()}")
        if raw:
            try:
                value = Decimal(raw)
            except InvalidOperation:
                raise SystemExit(f"ENGRAM_PRICE_{kind.upper()} must be a USD amount") from None
            if value <= 0:
                raise SystemExit(f"ENGRAM_PRICE_{kind.upper()} must be positive")
            prices[kind] = value
    return prices
