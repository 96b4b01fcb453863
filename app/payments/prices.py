"""What each paid call costs: the handler declares its kind of price (`opt={"price": kind}`), and
the price list maps kinds to USD amounts (contract defaults, each overridable by configuration).

The kinds and their default prices are the contract's (app/core/contract.py, from
docs/api-contract.md, "Prices"); only endpoints that call an embedding model or an LLM are paid.
Middleware and the payment gate read the kind from the route handler, so there is no path→price
table to drift.
"""

from __future__ import annotations

from typing import Any

from app.core.contract import (
    BATCH_UPDATE,
    DEFAULT_PRICES_USD,
    DEFAULT_UNIT_PRICES_USD,
    LLM_CALL,
    PER_1K_TOKENS,
    PER_ITEM,
    RECALL,
    STORE,
    STORE_BATCH,
    UPDATE,
)

__all__ = [
    "BATCH_UPDATE",
    "DEFAULT_PRICES_USD",
    "DEFAULT_UNIT_PRICES_USD",
    "LLM_CALL",
    "PER_1K_TOKENS",
    "PER_ITEM",
    "PRICE_OPT_KEY",
    "RECALL",
    "STORE",
    "STORE_BATCH",
    "UPDATE",
    "metered_by",
    "paid",
    "price_of",
]

PRICE_OPT_KEY = "price"
METERED_OPT_KEY = "metered"


def paid(kind: str, metered: str | None = None) -> dict[str, Any]:
    """Handler `opt` for a paid route; `metered` names its unit when `upto` may pay for it."""
    if kind not in DEFAULT_PRICES_USD:
        raise ValueError(f"unknown price kind {kind!r}")
    if metered is not None and metered not in DEFAULT_UNIT_PRICES_USD:
        raise ValueError(f"unknown unit {metered!r}")
    return {PRICE_OPT_KEY: kind, **({METERED_OPT_KEY: metered} if metered else {})}


def metered_by(route_handler: Any) -> str | None:
    """The unit a variable-cost route is metered by, or None for a fixed-price one."""
    opt = getattr(route_handler, "opt", None) or {}
    unit = opt.get(METERED_OPT_KEY)
    return str(unit) if unit is not None else None


def price_of(route_handler: Any) -> str | None:
    """The handler's kind of price, or None for a free route."""
    opt = getattr(route_handler, "opt", None) or {}
    kind = opt.get(PRICE_OPT_KEY)
    return str(kind) if kind is not None else None
