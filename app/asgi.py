"""create_app(): the one place that wires lifespan, middleware, routes, errors and OpenAPI."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncGenerator
from contextlib import asynccontextmanager
from datetime import timedelta
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from litestar import Litestar, Request
from litestar.config.app import AppConfig
from litestar.datastructures import State
from litestar.di import Provide
from litestar.openapi import OpenAPIConfig
from litestar.plugins.jinja import JinjaTemplateEngine
from litestar.template.config import TemplateConfig

from app import DISTRIBUTION
from app.access.requests import acting_of, only_where_grants_reach
from app.agents.controller import AgentController
from app.agents.service import AgentService, delegation_for
from app.ai.embedders import build_embedder, warm
from app.ai.fact_models import build_fact_model
from app.ai.rerank import build_reranker
from app.auth.controller import FreeTierController, SessionController
from app.auth.middleware import WalletAuthMiddleware
from app.auth.session import SessionTokens, parse_keys
from app.auth.signature import WalletVerifier
from app.auth.siwx import NONCE_SWEEP_SECONDS, SiwxVerifier
from app.config import Settings
from app.console.controller import console_router
from app.console.middleware import ConsoleMiddleware, add_console_headers
from app.console.pages import TEMPLATES
from app.console.service import SWEEP_SECONDS as CONSOLE_SWEEP_SECONDS
from app.console.service import ConsoleSessions
from app.consolidate.controller import ConsolidateController
from app.consolidate.service import ConsolidateService
from app.context.controller import ContextController
from app.context.service import ContextService
from app.db.pool import MeteredPool, asyncpg_dsn, create_pool
from app.db.schema import check_embedding_dims, check_embedding_model, check_pgvector
from app.free_tier.service import FreeTier
from app.grants.controller import GrantController
from app.grants.service import GrantService
from app.guard.controller import GuardController
from app.http.body import BoundedRequest, check_query_string, restore_recursion_limit
from app.http.docs import DOCS_PATH, swagger_assets, swagger_page
from app.http.errors import EXCEPTION_HANDLERS
from app.http.headers import add_response_headers
from app.http.health import health, ready
from app.http.observe import ObserveMiddleware, metrics_endpoint
from app.http.openapi import document_errors
from app.http.ratelimit import RateLimitMiddleware
from app.http.transaction import provide_transaction
from app.infra.instance_state import build_shared_store
from app.infra.periodic import every
from app.ingest.controller import IngestController
from app.ingest.service import IngestService
from app.mcp.http import McpEndpoint
from app.memory.controller import MemoryController
from app.memory.history_controller import HistoryController
from app.memory.quarantine_controller import QuarantineController
from app.memory.service import MemoryService, Rerank
from app.payments.capture import capture_paid_response, mark_paid_call
from app.payments.channels import build_channels
from app.payments.claimer import Claimer, claim_policy
from app.payments.controller import PaymentsController
from app.payments.facilitators import build_facilitator
from app.payments.gate import Gate
from app.payments.network import configured_networks
from app.payments.reconcile import RECONCILE_EVERY_SECONDS, Reconciler, chain_readers
from app.payments.schemas import PaymentRequiredBody
from app.payments.service import (
    PostgresGuard,
    SharedStoreGuard,
    X402Service,
    other_rails,
    upto_offered,
)
from app.pinned.controller import PinnedController
from app.pinned.service import PinnedService
from app.relations.controller import RelationController
from app.relations.service import RelationService
from app.suggested.controller import SuggestedController
from app.suggested.service import SuggestedService
from app.tags.controller import TagController
from app.tags.service import TagService
from app.transfer.controller import TransferController
from app.transfer.service import ImportLane, TransferService
from app.usage.controller import UsageController
from app.usage.service import UsageService


def _version() -> str:
    try:
        return version(DISTRIBUTION)
    except PackageNotFoundError:
        return "0.0.0"


def _from_state(name: str) -> Provide:
    """A dependency that hands out one of the services built in create_app."""

    def provide(state: State) -> Any:
        return state[name]

    return Provide(provide, sync_to_thread=False)


async def before_handler(request: Request[Any, Any, Any]) -> None:
    """Runs before a handler's parameters are parsed: the query string's NUL check, then the
    note that lets a paid call's answer be kept with its payment."""
    check_query_string(request)
    await mark_paid_call(request)


# Connections for the payments ledger's own transactions (pending before settling, noted after):
# short writes, apart from the requests' pool so a paid request never waits on its own pool.
LEDGER_POOL_SIZE = 4


def create_app(settings: Settings | None = None) -> Litestar:
    settings = settings or Settings.from_env()
    restore_recursion_limit()  # every import that could raise it (py_ecc) has run by now
    database_url = settings.database.url
    if not database_url:
        raise RuntimeError("create_app needs settings.database.url (engram serve provides one)")
    embedder = build_embedder(settings.embedder)
    free_tier = FreeTier(settings.limits.free_tier_calls)
    fact_model = build_fact_model(settings.llm)
    recall = settings.recall
    reranker = build_reranker(recall)
    memories = MemoryService(
        embedder,
        access_boost=recall.access_boost,
        recall_counts_access=recall.counts_access,
        access_counted_once_per=timedelta(seconds=recall.access_counted_once_per_seconds),
        second_round=recall.second_round,
        event_time_boost=recall.event_time,
        speaker_boost=recall.speaker,
        keyword="passage" if recall.keyword_passages else "idf",
        keyword_agreement=recall.keyword_agreement,
        passages=recall.passages,
        fact_model=fact_model,
        merge_namespaces=settings.limits.merge_namespaces,
        rerank=Rerank(reranker, recall.rerank, recall.rerank_candidates),
    )
    shared = build_shared_store(
        settings.database.redis_url, settings.database.redis_timeout_ms / 1000
    )
    auth = settings.auth
    wallet_verifier = WalletVerifier(auth.window_seconds)
    # Configured keys, or (none configured) the database's generated secret, loaded at startup.
    sessions = SessionTokens(parse_keys(auth.jwt_secrets), auth.session_ttl_seconds)
    # the default network (ENGRAM_X402_NETWORK) first, then ENGRAM_X402_NETWORKS
    networks = configured_networks(settings.x402)
    network = networks[0]
    facilitator = build_facilitator(settings.x402, network.caip2)
    x402 = X402Service(
        network=network,
        pay_to=settings.x402.pay_to,
        facilitator=facilitator,
        # Redis when configured (shared by every instance), else the database's advisory locks
        guard=SharedStoreGuard(shared, settings.x402.max_timeout_seconds)
        if settings.database.redis_url
        else PostgresGuard(),
        max_timeout_seconds=settings.x402.max_timeout_seconds,
        channels=build_channels(settings.x402, network.caip2),
        others=other_rails(settings.x402, networks, facilitator is not None),
        upto=upto_offered(settings.x402, facilitator),
        unit_prices_usd=settings.x402.unit_prices_usd,
    )
    siwx = SiwxVerifier(network.caip2, auth.window_seconds)
    console_sessions = ConsoleSessions(auth.console_session_ttl_seconds)
    usage = UsageService(free_tier, network.decimals)
    reconciler = Reconciler(chain_readers(settings.x402), settings.x402.reconcile_after_seconds)
    # payment channels' claims, refunds and settlements (app/payments/claimer.py), one claimer
    # per network with channels: each claims on its own chain
    claimers = [
        Claimer(channels, on.caip2, claim_policy(settings.x402, on.decimals))
        for on, channels in x402.all_channels()
    ]

    mcp = McpEndpoint(_version(), settings.limits.max_body_bytes)

    @asynccontextmanager
    async def lifespan(app: Litestar) -> AsyncGenerator[None, None]:
        pool = await create_pool(
            asyncpg_dsn(database_url), settings.database.pool_min, settings.database.pool_max
        )
        try:
            async with pool.acquire() as conn:
                await check_pgvector(conn)
                await check_embedding_dims(conn, embedder.dims, embedder.model_name)
                await check_embedding_model(conn, embedder.model_name)
                await sessions.load(conn)
            app.state.pool = MeteredPool(pool)
            # the payments ledger's own transactions (app/payments/gate.py `_ledger`)
            ledger = await create_pool(asyncpg_dsn(database_url), 1, LEDGER_POOL_SIZE)
            app.state.ledger_pool = ledger
            warming = asyncio.create_task(warm(embedder))  # /ready once it is done
            timers = [
                every(
                    NONCE_SWEEP_SECONDS,
                    lambda: siwx.sweep_expired(pool),
                    "nonce sweep",
                    first_after=NONCE_SWEEP_SECONDS,
                ),
                every(
                    CONSOLE_SWEEP_SECONDS,
                    lambda: console_sessions.sweep(pool),
                    "console sign-in sweep",
                    first_after=CONSOLE_SWEEP_SECONDS,
                ),
            ]
            if x402.enabled:  # on start, then on a timer
                timers.append(every(RECONCILE_EVERY_SECONDS, lambda: reconciler.run_once(ledger),
                                    "payment reconciler"))  # fmt: skip
            for claimer in claimers:  # on start, then on a timer
                timers.append(every(settings.x402.claim_every_seconds,
                                    functools.partial(claimer.run_once, ledger),
                                    f"channel claimer ({claimer.network})"))  # fmt: skip
            running = [asyncio.create_task(timer) for timer in timers]
            try:
                yield
            finally:
                warming.cancel()
                for task in running:
                    task.cancel()
                await asyncio.gather(*running, return_exceptions=True)  # connections back
                await ledger.close()
        finally:
            await pool.close()
            await shared.close()
            if reranker is not None:
                await reranker.aclose()

    # Everything a handler may ask for by name, declared once: `<feature>_service` for the
    # features' services, the auth pieces by what they are.
    provided = {
        "memory_service": memories,
        "ingest_service": IngestService(memories, fact_model),
        "consolidate_service": ConsolidateService(memories, fact_model),
        "context_service": ContextService(memories, fact_model),
        "relations_service": RelationService(),
        "transfer_service": TransferService(
            memories,
            lane=ImportLane(duty=settings.limits.import_duty_percent / 100),
            remote_embedder=settings.embedder.is_remote,
        ),
        "suggested_service": SuggestedService(),
        "pinned_service": PinnedService(memories),
        "tags_service": TagService(),
        "grants_service": GrantService(),
        "agents_service": AgentService(),
        "usage_service": usage,
        "free_tier": free_tier,
        "sessions": sessions,
        "wallet_verifier": wallet_verifier,
        "siwx": siwx,
        "console_sessions": console_sessions,
    }
    state = State(
        {
            **provided,
            "settings": settings,
            "shared": shared,
            "embedder": embedder,
            "payment_gate": Gate(free_tier, x402, settings.x402.prices_usd, usage),
            "version": _version(),
        }
    )
    config = AppConfig(
        route_handlers=[
            health,
            ready,
            metrics_endpoint,
            swagger_assets(),
            FreeTierController,
            SessionController,
            SuggestedController,
            PinnedController,
            TagController,
            MemoryController,
            IngestController,
            ConsolidateController,
            ContextController,
            HistoryController,
            PaymentsController,
            RelationController,
            TransferController,
            GrantController,
            GuardController,
            QuarantineController,
            AgentController,
            UsageController,
            mcp.route,
            console_router(),
        ],
        guards=[only_where_grants_reach],
        dependencies={
            "conn": Provide(provide_transaction),
            # who acts in the request, for which owner (app/access/requests.py)
            "acting": Provide(acting_of, sync_to_thread=False),
            **{name: _from_state(name) for name in provided},
        },
        # Order matters: the rate limiter counts per wallet, which the auth middleware finds.
        middleware=[
            ObserveMiddleware(),
            WalletAuthMiddleware(
                wallet_verifier, sessions, siwx, settings.server.public_url, delegation_for
            ),
            ConsoleMiddleware(console_sessions, settings.server.public_url),
            RateLimitMiddleware(shared, settings.limits.rate_limit_per_minute),
        ],
        exception_handlers=EXCEPTION_HANDLERS,  # type: ignore[arg-type]
        before_send=[add_response_headers, add_console_headers],
        before_request=before_handler,
        after_request=capture_paid_response,
        lifespan=[lifespan, mcp.lifespan],  # the pool first: MCP tool calls use it
        state=state,
        request_class=BoundedRequest,
        template_config=TemplateConfig(directory=TEMPLATES, engine=JinjaTemplateEngine),
        request_max_body_size=settings.limits.max_body_bytes,
        openapi_config=OpenAPIConfig(
            title="Engram",
            version=_version(),
            description="Memory API for AI agents, wire-compatible with MemoClaw.",
            path=DOCS_PATH,
            render_plugins=[swagger_page()],
        ),
    )
    app = Litestar.from_config(config)
    document_errors(app, PaymentRequiredBody)
    return app
