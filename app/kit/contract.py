"""The contract's numbers that settings and features both need, kept free of imports from the
app so that loading settings (app/config.py reads its defaults here) loads nothing else.

Sources: docs/api-contract.md, "Prices" (USD, paid in USDC) and "Rate limits".
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal

# Requests per minute per wallet, every route together (app/api/ratelimit.py counts them;
# ENGRAM_RATE_LIMIT_PER_MINUTE overrides).
OVERALL_PER_MINUTE = 100

# The kinds of paid call: a handler declares its kind (`opt=paid(STORE)`, app/payments/prices.py).
STORE = "store"
RECALL = "recall"
UPDATE = "update"
BATCH_UPDATE = "batch_update"
STORE_BATCH = "store_batch"
LLM_CALL = "llm_call"  # extract, consolidate, ingest, context, migrate

# Only endpoints that call an embedding model or an LLM are paid (ENGRAM_PRICE_<KIND> overrides).
DEFAULT_PRICES_USD: Mapping[str, Decimal] = {
    STORE: Decimal("0.005"),
    RECALL: Decimal("0.005"),
    UPDATE: Decimal("0.005"),
    BATCH_UPDATE: Decimal("0.005"),
    STORE_BATCH: Decimal("0.04"),
    LLM_CALL: Decimal("0.01"),
}
