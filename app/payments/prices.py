"""What each paid call costs, declared on the handler itself (`opt={"price": ...}`).

Prices in USD, paid in USDC (memoclaw-api.md, "Prices"): only endpoints that call an embedding
model or an LLM are paid. Middleware and the payment gate read the price from the route handler,
so there is no path→price table to drift.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

PRICE_OPT_KEY = "price"

STORE = Decimal("0.005")
RECALL = Decimal("0.005")
UPDATE = Decimal("0.005")
BATCH_UPDATE = Decimal("0.005")
STORE_BATCH = Decimal("0.04")
LLM_CALL = Decimal("0.01")  # extract, consolidate, ingest, context, migrate


def paid(price: Decimal) -> dict[str, Any]:
    """Handler `opt` for a paid route."""
    return {PRICE_OPT_KEY: price}


def price_of(route_handler: Any) -> Decimal | None:
    opt = getattr(route_handler, "opt", None) or {}
    price = opt.get(PRICE_OPT_KEY)
    return Decimal(price) if price is not None else None
