"""The contract's numbers that settings and features both need, kept free of imports from the
app so that loading settings (app/config.py reads its defaults here) loads nothing else.

Sources: docs/api-contract.md, "Prices" (USD, paid in USDC) and "Rate limits".
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal

# Requests per minute per wallet, every route together (app/http/ratelimit.py counts them;
# ENGRAM_RATE_LIMIT_PER_MINUTE overrides).
OVERALL_PER_MINUTE = 100

# The kinds of paid call: a handler declares its kind (`opt=paid(STORE)`, app/http/markers.py).
STORE = "store"
RECALL = "recall"
UPDATE = "update"
BATCH_UPDATE = "batch_update"
STORE_BATCH = "store_batch"
LLM_CALL = "llm_call"  # extract, consolidate, ingest, context, migrate

# What a variable-cost call is metered by when it is paid with x402's `upto` scheme
# (app/payments/upto.py): the items it stores, or the thousands of LLM tokens it used, rounded up.
PER_ITEM = "item"
PER_1K_TOKENS = "1k_tokens"
# USD per unit (ENGRAM_UNIT_PRICE_ITEM, ENGRAM_UNIT_PRICE_1K_TOKENS). An item is a hundredth of a
# batch's $0.04 (a full batch of 100 costs what `exact` charges); 1k tokens cost $0.002, so an LLM
# call's $0.01 buys 5k tokens. The route's fixed price stays the most an `upto` payment signs for.
DEFAULT_UNIT_PRICES_USD: Mapping[str, Decimal] = {
    PER_ITEM: Decimal("0.0004"),
    PER_1K_TOKENS: Decimal("0.002"),
}

# Only endpoints that call an embedding model or an LLM are paid (ENGRAM_PRICE_<KIND> overrides).
DEFAULT_PRICES_USD: Mapping[str, Decimal] = {
    STORE: Decimal("0.005"),
    RECALL: Decimal("0.005"),
    UPDATE: Decimal("0.005"),
    BATCH_UPDATE: Decimal("0.005"),
    STORE_BATCH: Decimal("0.04"),
    LLM_CALL: Decimal("0.01"),
}

# The namespace a memory lands in when a request names none.
DEFAULT_NAMESPACE = "default"
