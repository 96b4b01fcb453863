"""Route markers: what a handler declares about itself in its `opt`, and the readers the layers
around it use. Features import them from here; nothing else names an `opt` key.

- `paid(kind, metered=...)`: the route has a price (the gate charges it, OpenAPI lists 402);
- `public()`: no wallet proof is asked (the auth middleware lets it through);
- `limited(n)` / `unlimited()`: a stricter per-route rate limit, or none (health probes);
- `one_statement()`: a free route whose handler runs one SQL statement, with no BEGIN/COMMIT;
- `acts_for_owner()`: a grantee or an agent key may call it for an owner (app/access/).

The kinds of price and their units are the contract's (app/core/contract.py).
"""

from __future__ import annotations

from typing import Any

from app.core.contract import DEFAULT_PRICES_USD, DEFAULT_UNIT_PRICES_USD

PRICE_OPT_KEY = "price"
METERED_OPT_KEY = "metered"
PUBLIC_OPT_KEY = "exclude_from_auth"  # Litestar's auth middleware reads this key
RATE_LIMIT_OPT_KEY = "rate_limit"
UNLIMITED_OPT_KEY = "exclude_from_rate_limit"
ONE_STATEMENT_OPT_KEY = "one_statement"
ACTS_FOR_OWNER_OPT_KEY = "acts_for_owner"


def _opt(route_handler: Any) -> dict[str, Any]:
    return getattr(route_handler, "opt", None) or {}


def paid(kind: str, metered: str | None = None) -> dict[str, Any]:
    """Handler `opt` for a paid route; `metered` names its unit when `upto` may pay for it."""
    if kind not in DEFAULT_PRICES_USD:
        raise ValueError(f"unknown price kind {kind!r}")
    if metered is not None and metered not in DEFAULT_UNIT_PRICES_USD:
        raise ValueError(f"unknown unit {metered!r}")
    return {PRICE_OPT_KEY: kind, **({METERED_OPT_KEY: metered} if metered else {})}


def price_of(route_handler: Any) -> str | None:
    """The handler's kind of price, or None for a free route."""
    kind = _opt(route_handler).get(PRICE_OPT_KEY)
    return str(kind) if kind is not None else None


def metered_by(route_handler: Any) -> str | None:
    """The unit a variable-cost route is metered by, or None for a fixed-price one."""
    unit = _opt(route_handler).get(METERED_OPT_KEY)
    return str(unit) if unit is not None else None


def public() -> dict[str, Any]:
    """Handler `opt` for a route that asks no wallet proof."""
    return {PUBLIC_OPT_KEY: True}


def limited(per_minute: int) -> dict[str, Any]:
    """Handler `opt` for a route with its own per-wallet limit. It is counted in a bucket of its
    own IN ADDITION to the overall one, so it only ever makes the route stricter."""
    if per_minute < 1:
        raise ValueError("a route's rate limit is at least 1 request per minute")
    return {RATE_LIMIT_OPT_KEY: per_minute}


def route_limit_of(route_handler: Any) -> int | None:
    """The handler's own per-minute limit, or None when only the overall limit applies."""
    value = _opt(route_handler).get(RATE_LIMIT_OPT_KEY)
    return int(value) if value is not None else None


def unlimited() -> dict[str, Any]:
    """Handler `opt` for a route that is never rate limited (health probes)."""
    return {UNLIMITED_OPT_KEY: True}


def one_statement() -> dict[str, Any]:
    """Handler `opt` for a free route whose handler runs exactly one SQL statement
    (tests/http/test_one_statement.py counts list's, count's and read-by-id's statements, and
    checks that every route declaring it is free)."""
    return {ONE_STATEMENT_OPT_KEY: True}


def runs_as_one_statement(route_handler: Any) -> bool:
    """The route declared one statement and charges nothing."""
    return bool(_opt(route_handler).get(ONE_STATEMENT_OPT_KEY)) and price_of(route_handler) is None


def acts_for_owner() -> dict[str, Any]:
    """Handler `opt` for a route a grantee (x-memory-owner) or an agent key (x-wallet-owner) may
    call for an owner: recall, list, get, store, update and context. Every other route refuses
    them (app/access/)."""
    return {ACTS_FOR_OWNER_OPT_KEY: True}


def serves_for_owner(route_handler: Any) -> bool:
    return bool(_opt(route_handler).get(ACTS_FOR_OWNER_OPT_KEY))
