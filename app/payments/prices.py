"""What each paid call costs: the handler declares its kind of price (`opt={"price": kind}`), and
the price list maps kinds to USD amounts (contract defaults, each overridable by configuration).

The kinds and their default prices are the contract's (app/kit/contract.py, from
docs/api-contract.md, "Prices"); only endpoints that call an embedding model or an LLM are paid.
Middleware and the payment gate read the kind from the route handler, so there is no path→price
table to drift.
"""

from __future__ import annotations

from typing import Any

from app.kit.contract import (
    BATCH_UPDATE,
    DEFAULT_PRICES_USD,
    LLM_CALL,
    RECALL,
    STORE,
    STORE_BATCH,
    UPDATE,
)

__all__ = [
    "BATCH_UPDATE",
    "DEFAULT_PRICES_USD",
    "LLM_CALL",
    "PRICE_OPT_KEY",
    "RECALL",
    "STORE",
    "STORE_BATCH",
    "UPDATE",
    "paid",
    "price_of",
]

PRICE_OPT_KEY = "price"


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
