"""Engram's settings, read once from ENGRAM_* environment variables, with embedded defaults.

No variable set means: embedded PostgreSQL, local embedder, in-process limits, no keys needed.
Each setting is declared once, in a small group, with its variable, default and parser
(`env(...)`); `Settings.from_env` reads every group from those declarations, and the docs'
configuration table is tested against them. This module imports nothing from the app but the
contract's defaults (app/core/contract.py), so loading settings loads no framework.
"""

from __future__ import annotations

import ipaddress
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any, Generic, Self, TypeVar, get_type_hints

from app.core.contract import DEFAULT_PRICES_USD, DEFAULT_UNIT_PRICES_USD, OVERALL_PER_MINUTE

# Dimensions of the two embedders Engram knows out of the box (contract: text-embedding-3-small
# at 512 dims; offline default: all-MiniLM-L6-v2, 384 dims).
LOCAL_EMBED_DIMS = 384
STATIC_MODEL_NAMES = frozenset({"potion-base-8M"})  # app/ai/static.py STATIC_MODELS
OPENAI_EMBED_MODEL = "text-embedding-3-small"
OPENAI_EMBED_DIMS = 512

T = TypeVar("T")


# Parsers: (the variable's name, its value, never empty) -> the setting.


def text(name: str, raw: str) -> str:
    return raw


def integer(name: str, raw: str) -> int:
    try:
        return int(raw)
    except ValueError as exc:
        raise SystemExit(f"{name} must be an integer, got {raw!r}") from exc


def positive_integer(name: str, raw: str) -> int:
    value = integer(name, raw)
    if value < 1:
        raise SystemExit(f"{name} must be 1 or more, got {raw!r}")
    return value


def integer_or_none(name: str, raw: str) -> int | None:
    """An integer, 0 meaning unset."""
    return integer(name, raw) or None


def flag(name: str, raw: str) -> bool:
    return raw.lower() not in ("0", "false", "off", "no")


def int8_flag(name: str, raw: str) -> bool:
    """ENGRAM_EMBED_INT8's own spelling, kept as it was: case-sensitive, and "no" means yes."""
    return raw not in ("0", "false", "off")


def import_duty_percent(name: str, raw: str) -> int:
    value = integer(name, raw)
    if not 1 <= value <= 100:
        raise SystemExit(f"{name} must be 1..100, got {raw!r}")
    return value


def log_format(name: str, raw: str) -> str:
    if raw not in ("json", "text"):
        raise SystemExit(f"{name} must be json or text, got {raw!r}")
    return raw


def path(name: str, raw: str) -> Path:
    return Path(raw)


def comma_list(name: str, raw: str) -> tuple[str, ...]:
    """Comma-separated entries, blanks dropped."""
    return tuple(entry.strip() for entry in raw.split(",") if entry.strip())


def proxy_list(name: str, raw: str) -> tuple[str, ...]:
    """Comma-separated IP addresses or networks (CIDR), or `*` alone."""
    entries = comma_list(name, raw)
    if entries == ("*",):
        return entries
    for entry in entries:
        try:
            ipaddress.ip_network(entry, strict=False)
        except ValueError:
            raise SystemExit(f"{name} lists {entry!r}: an IP address or network, or *") from None
    return entries


# x402 schemes Engram can take: `exact` always; `batch-settlement` (payment channels) on request,
# or by default where it can be settled here (AUTO_SCHEMES)
X402_SCHEMES = ("exact", "batch-settlement", "upto")
AUTO_SCHEMES = "auto"


def x402_schemes(name: str, raw: str) -> str:
    """Comma-separated x402 schemes, `exact` among them; kept as written, blanks dropped; or
    `auto`."""
    if raw.strip() == AUTO_SCHEMES:
        return AUTO_SCHEMES
    schemes = comma_list(name, raw)
    unknown = [s for s in schemes if s not in X402_SCHEMES]
    if unknown or "exact" not in schemes:
        raise SystemExit(
            f"{name} must list exact, and may add batch-settlement and upto; got {raw!r}"
        )
    return ",".join(schemes)


def usd_amount(name: str, raw: str) -> Decimal:
    try:
        value = Decimal(raw)
    except InvalidOperation:
        raise SystemExit(f"{name} must be a USD amount") from None
    if value <= 0:
        raise SystemExit(f"{name} must be positive")
    return value


@dataclass(frozen=True)
class EnvVar(Generic[T]):
    """The environment variable a setting is read from: unset or empty means the default."""

    name: str
    default: T
    parse: Callable[[str, str], T]

    def variables(self) -> list[EnvVar[Any]]:
        """The variables read (this one; an EnvFamily has several)."""
        return [self]

    def read(self, environ: Mapping[str, str]) -> T:
        raw = environ.get(self.name)
        return self.parse(self.name, raw) if raw else self.default


@dataclass(frozen=True)
class EnvFamily(Generic[T]):
    """One variable per key of `defaults` (`prefix` + the key in upper case), read into a dict."""

    prefix: str
    defaults: Mapping[str, T]
    parse: Callable[[str, str], T]

    def variables(self) -> list[EnvVar[Any]]:
        return [
            EnvVar(self.prefix + key.upper(), default, self.parse)
            for key, default in self.defaults.items()
        ]

    def read(self, environ: Mapping[str, str]) -> dict[str, T]:
        return {
            key: var.read(environ) for key, var in zip(self.defaults, self.variables(), strict=True)
        }


ENV_KEY = "env"  # the field metadata key holding a setting's EnvVar or EnvFamily


def env(name: str, default: T, parse: Callable[[str, str], T], *, secret: bool = False) -> T:
    """A setting read from the variable `name`; `secret` keeps it out of repr().

    It returns a dataclass Field (typed as the setting, as `field()` is), which ruff's RUF009
    takes for a default evaluated once: hence its noqa where the type is not immutable."""
    declared = EnvVar(name, default, parse)
    return field(default=default, repr=not secret, metadata={ENV_KEY: declared})


def env_family(
    prefix: str, defaults: Mapping[str, T], parse: Callable[[str, str], T]
) -> dict[str, T]:
    """A dict setting, each of its keys read from a variable of its own (see EnvFamily)."""
    declared = EnvFamily(prefix, defaults, parse)
    return field(default_factory=lambda: dict(defaults), metadata={ENV_KEY: declared})


@dataclass(frozen=True)
class SettingsGroup:
    """A group of settings; fields declared with `env` are read from the environment, the others
    keep their default."""

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> Self:
        return cls(
            **{
                f.name: f.metadata[ENV_KEY].read(environ)
                for f in fields(cls)
                if ENV_KEY in f.metadata
            }
        )


@dataclass(frozen=True)
class ServerSettings(SettingsGroup):
    host: str = env("ENGRAM_HOST", "127.0.0.1", text)
    port: int = env("ENGRAM_PORT", 8000, integer)
    # The origin clients reach this server at (scheme://host[:port]), which Sign-In-With-X
    # proofs and agent-key delegations must name. Unset: Sign-In-With-X takes the origin each
    # request was sent to (its Host header); a delegation names the server's own loopback origin
    # (http://127.0.0.1:8000), and on a server listening beyond loopback none registers.
    public_url: str | None = env("ENGRAM_PUBLIC_URL", None, text)
    # The proxies whose X-Forwarded-For and X-Forwarded-Proto `engram serve` believes (IPs or
    # CIDRs, `*` for any peer); none: those headers change nothing, whoever sends them.
    trusted_proxies: tuple[str, ...] = env("ENGRAM_TRUSTED_PROXIES", (), proxy_list)
    # `engram serve`'s logs: one JSON object per line (request lines: app/http/observe.py), or text
    log_format: str = env("ENGRAM_LOG_FORMAT", "json", log_format)
    # On SIGTERM the server stops accepting connections and lets in-flight requests finish for
    # up to this long; what is still running then is cancelled (a paid call that began settling
    # runs to its commit regardless: app/http/transaction.py)
    shutdown_grace_seconds: int = env("ENGRAM_SHUTDOWN_GRACE_SECONDS", 30, positive_integer)


@dataclass(frozen=True)
class DatabaseSettings(SettingsGroup):
    url: str | None = env("ENGRAM_DATABASE_URL", None, text)  # None -> embedded PostgreSQL
    # parent of the embedded database's data directory; None -> a per-user data directory
    data_dir: Path | None = env("ENGRAM_DATA_DIR", None, path)  # noqa: RUF009
    pool_min: int = env("ENGRAM_DB_POOL_MIN", 2, integer)
    pool_max: int = env("ENGRAM_DB_POOL_MAX", 20, integer)
    # state shared by every instance (rate limits, payments in flight); None -> in-process
    redis_url: str | None = env("ENGRAM_REDIS_URL", None, text)
    # How long one Redis call may take before it counts as a failure (app/infra/instance_state.py):
    # a local Redis answers in well under a millisecond; a remote one, or a saturated host, may
    # need more before the circuit opens and rate limits fall back to per-process counts.
    redis_timeout_ms: int = env("ENGRAM_REDIS_TIMEOUT_MS", 250, positive_integer)


@dataclass(frozen=True)
class AuthSettings(SettingsGroup):
    # x-wallet-auth (and Sign-In-With-X) validity; 1..300 (app/auth/signature.py)
    window_seconds: int = env("ENGRAM_AUTH_WINDOW_SECONDS", 300, integer)
    # Session JWT keys, `kid:secret` or `secret`; the first signs, all verify (app/auth/session.py).
    # Empty: one secret generated on first start and kept in the database's engram_settings.
    jwt_secrets: tuple[str, ...] = env("ENGRAM_JWT_SECRETS", (), comma_list, secret=True)
    session_ttl_seconds: int = env("ENGRAM_SESSION_TTL_SECONDS", 7 * 86_400, integer)
    # How long a console sign-in lasts (app/console/service.py); signing out ends it sooner.
    console_session_ttl_seconds: int = env("ENGRAM_CONSOLE_SESSION_TTL_SECONDS", 8 * 3600, integer)


@dataclass(frozen=True)
class LimitsSettings(SettingsGroup):
    free_tier_calls: int = env("ENGRAM_FREE_TIER_CALLS", 100, integer)
    # Requests per minute per wallet (IP when anonymous), all routes together; 0 disables this
    # overall limit. Routes' own limits (`limited(n)` in the handler's opt) apply regardless.
    rate_limit_per_minute: int = env("ENGRAM_RATE_LIMIT_PER_MINUTE", OVERALL_PER_MINUTE, integer)
    max_body_bytes: int = 64 * 1024  # not read from the environment
    # Namespaces where a keyed store that read an older version merges by default (on_conflict
    # "merge" instead of "reject"): the server resolves its writers' conflicts itself
    merge_namespaces: tuple[str, ...] = env("ENGRAM_MERGE_NAMESPACES", (), comma_list)
    # The share of its time an import works, in percent (app/transfer/service.py); the rest it
    # rests, so that imports never crowd out stores and recalls. 100: imports run flat out.
    import_duty_percent: int = env("ENGRAM_IMPORT_DUTY_PERCENT", 30, import_duty_percent)


@dataclass(frozen=True)
class RecallSettings(SettingsGroup):
    # the contract's access boost; see app/memory/scoring.py
    access_boost: bool = env("ENGRAM_RECALL_ACCESS_BOOST", True, flag)
    # MemoClaw's accounting: every memory a recall returns counts as accessed (off: only uses)
    counts_access: bool = env("ENGRAM_RECALL_COUNTS_ACCESS", False, flag)
    # A use counts as an access at most once per memory per this many seconds (0: every use)
    access_counted_once_per_seconds: int = env(
        "ENGRAM_ACCESS_COUNTED_ONCE_PER_SECONDS", 86_400, integer
    )
    second_round: bool = env("ENGRAM_RECALL_SECOND_ROUND", True, flag)  # continuation, relations
    event_time: bool = env("ENGRAM_RECALL_EVENT_TIME", True, flag)  # boost the named event time
    speaker: bool = env("ENGRAM_RECALL_SPEAKER", True, flag)  # boost what the named people said
    # keyword_match: each word's IDF less ln(the memory's passages); off: the plain IDF sum,
    # its form before issue 37 (app/memory/repository/recall.py KEYWORD_FORMS)
    keyword_passages: bool = env("ENGRAM_RECALL_KEYWORD_PASSAGES", True, flag)
    # the keyword side weighted by the share of the query's nearest candidates holding one of
    # its words (app/memory/ranking.py keyword_share); off: full weight in every recall
    keyword_agreement: bool = env("ENGRAM_RECALL_KEYWORD_AGREEMENT", True, flag)
    # on: a memory past the embedding model's window is stored with its later windows (its
    # passages, migration 0021) and scores its best window's vector_sim; off (the default: it
    # lowered BEAM dev R@10, docs/pages/concepts/recall.md): its first window only, nothing
    # more stored
    passages: bool = env("ENGRAM_RECALL_PASSAGES", False, flag)
    # The optional rerank stage (app/ai/rerank.py): a cross-encoder served over HTTP in the
    # rerank wire format (`POST {base_url}/rerank`, as TEI, vLLM, llama.cpp and Infinity serve
    # it) orders the best `rerank_candidates`; every recall when `rerank`, else when asked.
    rerank: bool = env("ENGRAM_RECALL_RERANK", False, flag)
    rerank_base_url: str | None = env("ENGRAM_RERANK_BASE_URL", None, text)
    rerank_model: str | None = env("ENGRAM_RERANK_MODEL", None, text)
    rerank_api_key: str | None = env("ENGRAM_RERANK_API_KEY", None, text, secret=True)
    rerank_candidates: int = env("ENGRAM_RERANK_CANDIDATES", 30, positive_integer)
    rerank_timeout_seconds: int = env("ENGRAM_RERANK_TIMEOUT_SECONDS", 5, positive_integer)


@dataclass(frozen=True)
class EmbedderSettings(SettingsGroup):
    """The local MiniLM unless an OpenAI key or an OpenAI-compatible base URL is set."""

    # OPENAI_API_KEY serves the LLM too (LLMSettings reads the same variable)
    openai_api_key: str | None = env("OPENAI_API_KEY", None, text, secret=True)
    base_url: str | None = env("ENGRAM_EMBED_BASE_URL", None, text)
    model: str | None = env("ENGRAM_EMBED_MODEL", None, text)  # None -> text-embedding-3-small
    dims: int | None = env("ENGRAM_EMBED_DIMS", None, integer_or_none)  # None -> the model's
    # the local MiniLM run as a dynamically quantized int8 model (app/ai/int8.py), else float
    int8: bool = env("ENGRAM_EMBED_INT8", True, int8_flag)
    # Another local model instead of MiniLM: a directory with a sentence-transformers model
    # exported to ONNX (model.onnx, tokenizer.json; mean pooling), run as given
    onnx_dir: Path | None = env("ENGRAM_EMBED_ONNX_DIR", None, path)  # noqa: RUF009
    # A model2vec static model instead of MiniLM (app/ai/static.py): its directory (
    # model.safetensors, tokenizer.json), or none with ENGRAM_EMBED_MODEL=potion-base-8M, read
    # from the model cache where `engram prepare-model --static` put it. Padded to 384 unless
    # ENGRAM_EMBED_DIMS says otherwise (256: its own size, for a database made for it).
    static_dir: Path | None = env("ENGRAM_EMBED_STATIC_DIR", None, path)  # noqa: RUF009
    # Threads one local model run may use. One: a text's run is too short to share well (on 2
    # cores, 2 threads cost 6.2-6.7 ms of CPU per text for 5.3-6.1 ms of wall time, 1 thread
    # 4.6-5.1 ms for 4.7-5.6 ms), and concurrent requests and workers use the other cores.
    threads: int = env("ENGRAM_EMBED_THREADS", 1, positive_integer)

    @property
    def is_remote(self) -> bool:
        return bool(self.openai_api_key or self.base_url)

    @property
    def is_static(self) -> bool:
        """A local model2vec model: by its directory, or by a known static model's name."""
        if self.is_remote:
            return False
        return self.static_dir is not None or self.model in STATIC_MODEL_NAMES

    @property
    def expected_dims(self) -> int:
        """The vector dimension this configuration's embedder produces."""
        if self.dims:
            return self.dims
        return OPENAI_EMBED_DIMS if self.is_remote else LOCAL_EMBED_DIMS


@dataclass(frozen=True)
class LLMSettings(SettingsGroup):
    """The offline heuristics unless an OpenAI key or an OpenAI-compatible base URL is set."""

    openai_api_key: str | None = env("OPENAI_API_KEY", None, text, secret=True)
    base_url: str | None = env("ENGRAM_LLM_BASE_URL", None, text)  # any OpenAI-compatible chat
    model: str | None = env("ENGRAM_LLM_MODEL", None, text)  # None -> gpt-4o-mini


# ---- x402 on more than one network ------------------------------------------------------------
# ENGRAM_X402_NETWORKS lists networks taken beside the default one (ENGRAM_X402_NETWORK, set up by
# the single-network variables of X402Settings, which keep their meaning). Each listed network
# is set up by variables of its own, ENGRAM_X402_<NAME>_<SETTING> (<NAME> upper-cased, `-` as
# `_`: ENGRAM_X402_ARBITRUM_RPC_URL); app/payments/network.py resolves what each one leaves
# unset. Per-network variables rather than one JSON value: a relayer key can then come from a
# secret store on its own, and each value is read (and refused) by name.

NETWORK_SETTINGS = {  # <SETTING> -> ExtraNetwork field
    "PAY_TO": "pay_to",
    "FACILITATOR_URL": "facilitator_url",
    "RPC_URL": "rpc_url",
    "RELAYER_KEY": "relayer_key",
    "ASSET": "asset",
    "ASSET_NAME": "asset_name",
    "ASSET_VERSION": "asset_version",
    "ASSET_DECIMALS": "asset_decimals",
}
NETWORK_NAME_RE = re.compile(r"^[a-z][a-z0-9-]*[a-z0-9]$")


@dataclass(frozen=True)
class ExtraNetwork:
    """A network payments are also taken on: its ENGRAM_X402_<NAME>_* values as written (None:
    unset)."""

    name: str
    pay_to: str | None = None
    facilitator_url: str | None = None
    rpc_url: str | None = None
    relayer_key: str | None = field(default=None, repr=False)
    asset: str | None = None
    asset_name: str | None = None
    asset_version: str | None = None
    asset_decimals: int | None = None


def network_prefix(name: str) -> str:
    """Where a listed network's own variables start: `arbitrum-sepolia` ->
    `ENGRAM_X402_ARBITRUM_SEPOLIA_`."""
    return f"ENGRAM_X402_{name.upper().replace('-', '_')}_"


def network_names(name: str, raw: str) -> tuple[str, ...]:
    names = comma_list(name, raw)
    for entry in names:
        if not NETWORK_NAME_RE.match(entry):
            raise SystemExit(f"{name} lists {entry!r}: a network name such as arbitrum")
    if len(set(names)) != len(names):
        raise SystemExit(f"{name} lists a network twice: {raw!r}")
    return names


@dataclass(frozen=True)
class EnvNetworks:
    """ENGRAM_X402_NETWORKS and each listed network's own variables, read into ExtraNetworks.

    Strict: a per-network variable with a setting Engram does not know, or for a network the
    list does not name, stops the start (a typo would otherwise leave a network unconfigured,
    or configured on the wrong chain)."""

    name: str = "ENGRAM_X402_NETWORKS"

    def variables(self) -> list[EnvVar[Any]]:
        return [EnvVar(self.name, (), network_names)]

    def read(self, environ: Mapping[str, str]) -> tuple[ExtraNetwork, ...]:
        names = self.variables()[0].read(environ)
        prefixes = {network_prefix(n): n for n in names}
        for key in environ:
            self._check_variable(key, prefixes)
        return tuple(self._network(name, environ) for name in names)

    def _network(self, name: str, environ: Mapping[str, str]) -> ExtraNetwork:
        values: dict[str, Any] = {}
        for setting, attribute in NETWORK_SETTINGS.items():
            variable = network_prefix(name) + setting
            raw = environ.get(variable)
            if raw:
                parse = integer_or_none if setting == "ASSET_DECIMALS" else text
                values[attribute] = parse(variable, raw)
        return ExtraNetwork(name, **values)

    def _check_variable(self, key: str, prefixes: Mapping[str, str]) -> None:
        if not key.startswith("ENGRAM_X402_") or key in _declared_variables():
            return
        listed = [p for p in prefixes if key.startswith(p)]
        if listed:  # the longest: ARBITRUM_SEPOLIA_ before ARBITRUM_
            setting = key.removeprefix(max(listed, key=len))
            if setting not in NETWORK_SETTINGS:
                raise SystemExit(
                    f"{key}: {setting} is not a network setting; a network listed in {self.name}"
                    f" takes {', '.join(NETWORK_SETTINGS)}"
                )
            return
        for setting in NETWORK_SETTINGS:
            network = key.removeprefix("ENGRAM_X402_").removesuffix("_" + setting)
            if key.endswith("_" + setting) and network:
                raise SystemExit(
                    f"{key} is set, but {self.name} does not list the network"
                    f" {network.lower().replace('_', '-')!r} (the default network,"
                    " ENGRAM_X402_NETWORK, is set up by ENGRAM_X402_PAY_TO, ENGRAM_X402_RPC_URL"
                    " and the other single-network variables)"
                )


def _declared_variables() -> set[str]:
    """Every variable a settings group declares (the default network's among them)."""
    return {
        var.name
        for group in Settings.groups().values()
        for f in fields(group)
        if ENV_KEY in f.metadata
        for var in f.metadata[ENV_KEY].variables()
    }


def env_networks() -> tuple[ExtraNetwork, ...]:
    """The networks setting (see EnvNetworks)."""
    return field(default=(), metadata={ENV_KEY: EnvNetworks()})


@dataclass(frozen=True)
class X402Settings(SettingsGroup):
    """Where payments go and who settles them (see app/payments/). Payments are accepted when
    pay_to is set and either a facilitator URL (or a CDP API key) or an RPC URL + relayer key
    is."""

    network: str = env("ENGRAM_X402_NETWORK", "base", text)  # base | base-sepolia
    pay_to: str | None = env("ENGRAM_X402_PAY_TO", None, text)
    facilitator_url: str | None = env("ENGRAM_X402_FACILITATOR_URL", None, text)
    # Coinbase CDP's facilitator (Base mainnet): an API key signs a JWT per request
    # (app/payments/cdp.py); the facilitator URL defaults to CDP's when a key is set.
    cdp_api_key_id: str | None = env("ENGRAM_CDP_API_KEY_ID", None, text)
    cdp_api_key_secret: str | None = env("ENGRAM_CDP_API_KEY_SECRET", None, text, secret=True)
    rpc_url: str | None = env("ENGRAM_X402_RPC_URL", None, text)
    relayer_key: str | None = env("ENGRAM_X402_RELAYER_KEY", None, text, secret=True)
    max_timeout_seconds: int = env("ENGRAM_X402_MAX_TIMEOUT_SECONDS", 300, integer)
    # `exact,batch-settlement` also offers x402 payment channels (app/payments/channels.py): a
    # deposit settled once, then vouchers with no on-chain step, claimed later by the claimer
    # (app/payments/claimer.py). Needs pay_to, rpc_url and relayer_key. `auto` (the default):
    # channels are offered whenever those are set; `exact` opts out.
    schemes: str = env("ENGRAM_X402_SCHEMES", AUTO_SCHEMES, x402_schemes)
    # A pending payment untouched this long has no settlement in flight: the reconciler asks
    # the chain (over rpc_url) whether it settled (app/payments/reconcile.py).
    reconcile_after_seconds: int = env("ENGRAM_X402_RECONCILE_AFTER_SECONDS", 120, integer)
    # The channel claimer (app/payments/claimer.py) collects what vouchers paid. It looks every
    # `claim_every_seconds` at each channel on chain and claims at once when the payer started a
    # withdrawal: the channel's withdraw delay (15 min, x402's least, which Engram offers) is the
    # receiver's window, so a minute's look leaves ~14 min to land the claim. Otherwise it
    # claims a channel once $2 is unclaimed (two minimum deposits' worth, 400 calls at the
    # default price: two top-ups and one claim per 400 calls, 0.75 transactions per 100 calls,
    # under the 1; a row of a batched claim, ~41k gas, costs well under 1% of it on
    # Base) or its oldest unclaimed voucher is an hour old (how long money sits uncollected when
    # calls are few). A payer's withdrawal is claimed at once whatever the amount.
    claim_every_seconds: int = env("ENGRAM_X402_CLAIM_EVERY_SECONDS", 60, positive_integer)
    claim_min_usd: Decimal = env("ENGRAM_X402_CLAIM_MIN_USD", Decimal("2"), usd_amount)  # noqa: RUF009
    claim_after_seconds: int = env("ENGRAM_X402_CLAIM_AFTER_SECONDS", 3600, positive_integer)
    # Claimed funds sit in the escrow as the receiver's until a settle moves them to payTo: one
    # settle per receiver and token once its oldest unsettled claim is an hour old, or a claim
    # batch's worth (8) is waiting, so settles add ~1 transaction an hour, not one per claim.
    settle_after_seconds: int = env("ENGRAM_X402_SETTLE_AFTER_SECONDS", 3600, integer)
    # A channel with no payment for this long gets its unspent escrow back (x402's cooperative
    # refund, with a claim of what it owes): a day, so an agent that paused for the night keeps
    # its channel, while one that left is not made to wait out the withdraw delay.
    refund_idle_seconds: int = env("ENGRAM_X402_REFUND_IDLE_SECONDS", 86_400, positive_integer)
    # A token other than the network's USDC (address, EIP-712 name and version, decimals)
    asset: str | None = env("ENGRAM_X402_ASSET", None, text)
    asset_name: str | None = env("ENGRAM_X402_ASSET_NAME", None, text)
    asset_version: str | None = env("ENGRAM_X402_ASSET_VERSION", None, text)
    asset_decimals: int | None = env("ENGRAM_X402_ASSET_DECIMALS", None, integer_or_none)

    @property
    def channels(self) -> bool:
        """Payment channels (x402 batch-settlement) are offered beside `exact`: when listed, or
        by default when this server can settle them itself (a relayer key over an RPC URL)."""
        if self.schemes == AUTO_SCHEMES:
            return bool(self.pay_to and self.relayer_key and self.rpc_url)
        return "batch-settlement" in self.schemes.split(",")

    @property
    def upto(self) -> bool:
        """x402's `upto` scheme is offered on variable-cost routes (app/payments/upto.py): when
        listed, or by default when this server settles itself (the payer's permit names the
        relayer as the one facilitator that may settle it)."""
        if self.schemes == AUTO_SCHEMES:
            return bool(self.pay_to and self.relayer_key and self.rpc_url)
        return "upto" in self.schemes.split(",")

    # USD per kind of paid call (app/http/markers.py declares them), each ENGRAM_PRICE_<KIND>
    prices_usd: dict[str, Decimal] = env_family(  # noqa: RUF009
        "ENGRAM_PRICE_", DEFAULT_PRICES_USD, usd_amount
    )
    # USD per unit of a variable-cost call paid with `upto`, each ENGRAM_UNIT_PRICE_<UNIT>
    unit_prices_usd: dict[str, Decimal] = env_family(  # noqa: RUF009
        "ENGRAM_UNIT_PRICE_", DEFAULT_UNIT_PRICES_USD, usd_amount
    )
    # Networks taken beside ENGRAM_X402_NETWORK, each with its own ENGRAM_X402_<NAME>_* variables
    networks: tuple[ExtraNetwork, ...] = env_networks()


@dataclass(frozen=True)
class Settings:
    """All of Engram's settings, one group per concern; `from_env` reads every group."""

    server: ServerSettings = field(default_factory=ServerSettings)
    database: DatabaseSettings = field(default_factory=DatabaseSettings)
    auth: AuthSettings = field(default_factory=AuthSettings)
    limits: LimitsSettings = field(default_factory=LimitsSettings)
    recall: RecallSettings = field(default_factory=RecallSettings)
    embedder: EmbedderSettings = field(default_factory=EmbedderSettings)
    llm: LLMSettings = field(default_factory=LLMSettings)
    x402: X402Settings = field(default_factory=X402Settings)

    @classmethod
    def groups(cls) -> dict[str, type[SettingsGroup]]:
        """Each group's name and class, in declaration order."""
        hints = get_type_hints(cls)
        return {f.name: hints[f.name] for f in fields(cls)}

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        """Every group read from `environ` (default: the process environment)."""
        source = os.environ if environ is None else environ
        groups: dict[str, Any] = {
            name: group.from_env(source) for name, group in cls.groups().items()
        }
        return cls(**groups)
