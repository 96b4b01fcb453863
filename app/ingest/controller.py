"""HTTP for extract, ingest and migrate (MemoClaw's paths and response shapes)."""

from __future__ import annotations

from typing import Any

from litestar import Controller, post
from litestar.di import NamedDependency
from litestar.params import JSONBody
from litestar.status_codes import HTTP_200_OK, HTTP_201_CREATED
from msgspec import UNSET

from app.core import contract
from app.http.markers import limited, paid
from app.http.params import Conn, WalletRequest
from app.http.ratelimit import LLM_ROUTE_PER_MINUTE
from app.ingest.schemas import (
    ConversationIn,
    ExtractAnswer,
    FileError,
    IngestAnswer,
    MigrateAnswer,
    MigrateIn,
)
from app.ingest.service import (
    ExtractOutcome,
    IngestService,
    conversation_of,
    conversation_scope,
    scope_of,
)

Ingest = NamedDependency[IngestService]


def _extracted(outcome: ExtractOutcome) -> dict[str, Any]:
    """ExtractAnswer's fields, for it and IngestAnswer."""
    return {
        "memory_ids": outcome.stored.ids,
        "facts_extracted": len(outcome.facts),
        "facts_stored": outcome.stored.created,
        "facts_deduplicated": outcome.stored.deduplicated,
        "tokens_used": outcome.tokens,
    }


class IngestController(Controller):
    path = "/v1"
    tags = ["extraction"]

    @post(
        "/memories/extract",
        opt={
            **paid(contract.LLM_CALL, metered=contract.PER_1K_TOKENS),
            **limited(LLM_ROUTE_PER_MINUTE),
        },
        status_code=HTTP_200_OK,
    )
    async def extract(
        self,
        request: WalletRequest,
        conn: Conn,
        ingest_service: Ingest,
        data: JSONBody[ConversationIn],
    ) -> ExtractAnswer:
        outcome = await ingest_service.extract(
            conn, request.user, conversation_of(data), conversation_scope(data)
        )  # fmt: skip
        return ExtractAnswer(**_extracted(outcome))

    @post(
        "/ingest",
        opt=paid(contract.LLM_CALL, metered=contract.PER_1K_TOKENS),
        status_code=HTTP_201_CREATED,
    )
    async def ingest_conversation(
        self,
        request: WalletRequest,
        conn: Conn,
        ingest_service: Ingest,
        data: JSONBody[ConversationIn],
    ) -> IngestAnswer:
        outcome = await ingest_service.ingest(
            conn, request.user, conversation_of(data), conversation_scope(data), data.auto_relate
        )  # fmt: skip
        return IngestAnswer(
            **_extracted(outcome),
            relations_created=outcome.relations_created,
            memories_created=outcome.stored.created,
        )

    @post(
        "/migrate",
        opt=paid(contract.LLM_CALL, metered=contract.PER_1K_TOKENS),
        status_code=HTTP_201_CREATED,
    )
    async def migrate(
        self, request: WalletRequest, conn: Conn, ingest_service: Ingest, data: JSONBody[MigrateIn]
    ) -> MigrateAnswer:
        stored, processed, errors = await ingest_service.migrate(
            conn, request.user, data.files,
            scope_of(data.namespace, data.session_id, data.agent_id), data.auto_tag,
            data.deduplicate, data.dry_run,
        )  # fmt: skip
        return MigrateAnswer(
            memory_ids=[] if data.dry_run else stored.ids,  # a dry run kept none
            files_processed=processed,
            memories_created=stored.created,
            memories_deduplicated=stored.deduplicated,
            tokens_used=stored.tokens,
            errors=[FileError(**e) for e in errors] if errors else UNSET,
            dry_run=True if data.dry_run else UNSET,
        )
