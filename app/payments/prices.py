"""What each paid call costs: the handler declares its kind of price (`opt={"price": kind}`), and
the price list maps kinds to USD amounts (contract defaults, each overridable by configuration).

The kinds and their default prices are the contract's (app/kit/contract.py, from
docs/api-contract.md, "Prices"); only endpoints that call an embedding model or an LLM are paid.
Middleware and the payment gate read the kind from the route handler, so there is no path→price
table to drift.
"""

from __future__ import annotations

from decimal import Decimal
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

# What a variable-cost call is metered by when it is paid with x402's `upto` scheme (upto.py):
# the items it stores, or the thousands of LLM tokens it used (rounded up). The route's fixed
# price stays the most an `upto` payment is signed for, so `upto` never costs more than `exact`.
PER_ITEM = "item"
PER_1K_TOKENS = "1k_tokens"
# USD per unit (ENGRAM_UNIT_PRICE_ITEM, ENGRAM_UNIT_PRICE_1K_TOKENS). An item is a hundredth
# of a batch's $0.04 (a full batch of 100 costs what `exact` charges); 1k tokens cost $0.002,
# so the $0.01 of an LLM call buys 5k tokens, a long conversation's extraction.
DEFAULT_UNIT_PRICES_USD: dict[str, Decimal] = {
    PER_ITEM: Decimal("0.0004"),
    PER_1K_TOKENS: Decimal("0.002"),
}


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
