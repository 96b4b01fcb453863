"""Engram's settings, read once from ENGRAM_* environment variables, with embedded defaults.

No variable set means: embedded PostgreSQL, local embedder, in-process limits, no keys needed.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path

from app.api.ratelimit import OVERALL_PER_MINUTE
from app.payments.prices import DEFAULT_PRICES_USD, price_list

# Dimensions of the two embedders Engram knows out of the box (contract: text-embedding-3-small
# at 512 dims; offline default: all-MiniLM-L6-v2, 384 dims).
LOCAL_EMBED_DIMS = 384
OPENAI_EMBED_MODEL = "text-embedding-3-small"
OPENAI_EMBED_DIMS = 512


def _env(name: str, default: str | None = None) -> str | None:
    value = os.environ.get(name)
    return value if value not in (None, "") else default


def _env_int(name: str, default: int) -> int:
    raw = _env(name)
    if raw is None:
        return default
    try:
        return int(raw)
    except ValueError as exc:
        raise SystemExit(f"{name} must be an integer, got {raw!r}") from exc


def _env_flag(name: str, default: bool) -> bool:
    raw = _env(name)
    return default if raw is None else raw.lower() not in ("0", "false", "off", "no")


@dataclass(frozen=True)
class Settings:
    database_url: str | None = None  # None -> embedded PostgreSQL
    redis_url: str | None = None  # None -> in-process equivalents
    data_dir: Path | None = None  # parent of the embedded database's data directory
    host: str = "127.0.0.1"
    port: int = 8000
    free_tier_calls: int = 100
    auth_window_seconds: int = 300  # x-wallet-auth validity; 1..300 (app/auth/signature.py)
    # The origin clients reach this server at (scheme://host[:port]), which Sign-In-With-X
    # proofs must name; unset: the origin each request was sent to (its Host header).
    public_url: str | None = None
    # Session JWT keys, `kid:secret` or `secret`; the first signs, all verify (app/auth/session.py).
    # Empty: one secret generated on first start and kept in the database's engram_settings.
    jwt_secrets: tuple[str, ...] = field(default=(), repr=False)
    session_ttl_seconds: int = 7 * 86_400
    # Requests per minute per wallet (IP when anonymous), all routes together; 0 disables this
    # overall limit. Routes' own limits (`limited(n)` in the handler's opt) apply regardless.
    rate_limit_per_minute: int = OVERALL_PER_MINUTE
    max_body_bytes: int = 64 * 1024
    openai_api_key: str | None = None
    embed_base_url: str | None = None
    embed_model: str | None = None
    embed_dims: int | None = None
    # the local MiniLM run as a dynamically quantized int8 model (app/ai/int8.py), else float
    embed_int8: bool = True
    recall_access_boost: bool = True  # the contract's access boost; see app/memory/scoring.py
    # MemoClaw's accounting: every memory a recall returns counts as accessed (off: only uses)
    recall_counts_access: bool = False
    # A use counts as an access at most once per memory per this many seconds (0: every use)
    access_counted_once_per_seconds: int = 86_400
    recall_second_round: bool = True  # continuation and relations of the top hits
    recall_event_time: bool = True  # boost memories whose event time the query names
    llm_base_url: str | None = None  # any OpenAI-compatible chat endpoint
    llm_model: str | None = None  # default gpt-4o-mini
    db_pool_min: int = 2
    db_pool_max: int = 20
    # x402: where payments go and who settles them (see app/payments/). Payments are accepted
    # when pay_to is set and either a facilitator URL or an RPC URL + relayer key is.
    x402_network: str = "base"  # base | base-sepolia
    x402_pay_to: str | None = None
    x402_facilitator_url: str | None = None
    x402_rpc_url: str | None = None
    x402_relayer_key: str | None = None
    x402_max_timeout_seconds: int = 300
    # A token other than the network's USDC (address, EIP-712 name and version, decimals)
    x402_asset: str | None = None
    x402_asset_name: str | None = None
    x402_asset_version: str | None = None
    x402_asset_decimals: int | None = None
    prices_usd: dict[str, Decimal] = field(default_factory=lambda: dict(DEFAULT_PRICES_USD))

    @property
    def uses_remote_embedder(self) -> bool:
        return bool(self.openai_api_key or self.embed_base_url)

    @property
    def expected_embed_dims(self) -> int:
        """The vector dimension this configuration's embedder produces."""
        if self.embed_dims:
            return self.embed_dims
        return OPENAI_EMBED_DIMS if self.uses_remote_embedder else LOCAL_EMBED_DIMS

    @classmethod
    def from_env(cls) -> Settings:
        data_dir = _env("ENGRAM_DATA_DIR")
        return cls(
            database_url=_env("ENGRAM_DATABASE_URL"),
            redis_url=_env("ENGRAM_REDIS_URL"),
            data_dir=Path(data_dir) if data_dir else None,
            host=_env("ENGRAM_HOST", "127.0.0.1") or "127.0.0.1",
            port=_env_int("ENGRAM_PORT", 8000),
            free_tier_calls=_env_int("ENGRAM_FREE_TIER_CALLS", 100),
            jwt_secrets=tuple(
                entry.strip()
                for entry in (_env("ENGRAM_JWT_SECRETS") or "").split(",")
                if entry.strip()
            ),
            session_ttl_seconds=_env_int("ENGRAM_SESSION_TTL_SECONDS", 7 * 86_400),
            auth_window_seconds=_env_int("ENGRAM_AUTH_WINDOW_SECONDS", 300),
            public_url=_env("ENGRAM_PUBLIC_URL"),
            rate_limit_per_minute=_env_int("ENGRAM_RATE_LIMIT_PER_MINUTE", OVERALL_PER_MINUTE),
            openai_api_key=_env("OPENAI_API_KEY"),
            embed_base_url=_env("ENGRAM_EMBED_BASE_URL"),
            embed_model=_env("ENGRAM_EMBED_MODEL"),
            embed_dims=_env_int("ENGRAM_EMBED_DIMS", 0) or None,
            embed_int8=_env("ENGRAM_EMBED_INT8", "1") not in ("0", "false", "off"),
            recall_access_boost=_env_flag("ENGRAM_RECALL_ACCESS_BOOST", True),
            recall_counts_access=_env_flag("ENGRAM_RECALL_COUNTS_ACCESS", False),
            access_counted_once_per_seconds=_env_int(
                "ENGRAM_ACCESS_COUNTED_ONCE_PER_SECONDS", 86_400
            ),
            recall_second_round=_env_flag("ENGRAM_RECALL_SECOND_ROUND", True),
            recall_event_time=_env_flag("ENGRAM_RECALL_EVENT_TIME", True),
            llm_base_url=_env("ENGRAM_LLM_BASE_URL"),
            llm_model=_env("ENGRAM_LLM_MODEL"),
            db_pool_min=_env_int("ENGRAM_DB_POOL_MIN", 2),
            db_pool_max=_env_int("ENGRAM_DB_POOL_MAX", 20),
            x402_network=_env("ENGRAM_X402_NETWORK", "base") or "base",
            x402_pay_to=_env("ENGRAM_X402_PAY_TO"),
            x402_facilitator_url=_env("ENGRAM_X402_FACILITATOR_URL"),
            x402_rpc_url=_env("ENGRAM_X402_RPC_URL"),
            x402_relayer_key=_env("ENGRAM_X402_RELAYER_KEY"),
            x402_max_timeout_seconds=_env_int("ENGRAM_X402_MAX_TIMEOUT_SECONDS", 300),
            x402_asset=_env("ENGRAM_X402_ASSET"),
            x402_asset_name=_env("ENGRAM_X402_ASSET_NAME"),
            x402_asset_version=_env("ENGRAM_X402_ASSET_VERSION"),
            x402_asset_decimals=_env_int("ENGRAM_X402_ASSET_DECIMALS", 0) or None,
            prices_usd=price_list(os.environ),
        )
