"""HTTP for GET /v1/export (a streamed document) and POST /v1/import (free calls)."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import Annotated

from litestar import Controller, MediaType, get, post
from litestar.di import NamedDependency, Provide
from litestar.openapi.datastructures import ResponseSpec
from litestar.params import FromQuery, JSONBody, QueryParameter
from litestar.response import Stream
from litestar.status_codes import HTTP_200_OK

from app.http.markers import limited
from app.http.openapi import IMMUTABLE_MEMORY, VERSION_CONFLICT, error_responses
from app.http.params import Conn, MaybeWalletRequest, WalletRequest
from app.http.transaction import request_transaction
from app.memory.schemas import MemoryType
from app.memory.service import list_filter
from app.transfer.schemas import (
    IMPORT_MAX_BODY_BYTES,
    NDJSON_MEDIA_TYPES,
    ExportEnvelope,
    ExportFormat,
    ImportAnswer,
    ImportIn,
    ImportItems,
    JsonLines,
)
from app.transfer.service import ImportTurn, TransferService

Transfers = NamedDependency[TransferService]
# Imports per wallet per minute (Engram's own limit, besides the overall 100): a migration in
# batches goes through in minutes, a flood of big imports does not.
IMPORTS_PER_MINUTE = 30


async def provide_import_turn(
    request: MaybeWalletRequest, transfer_service: Transfers
) -> AsyncGenerator[ImportTurn, None]:
    """The import's turn in the lane, then the request's transaction (in place of `conn`): an
    import waiting for its turn holds no database connection, and the turn ends, letting the
    next import in, only once this one has committed and rested."""
    async with transfer_service.lane.turn() as pacer, request_transaction(request) as conn:
        pacer.resume()  # waiting for a pooled connection was not work
        yield ImportTurn(conn, pacer)


class TransferController(Controller):
    path = "/v1"
    tags = ["export and import"]

    # `conn` is taken although the stream reads on a connection of its own: the request's
    # transaction is where the wallet's free-tier count is read for x-free-tier-remaining.
    @get(
        "/export",
        responses={
            200: ResponseSpec(
                ExportEnvelope,
                generate_examples=False,
                description="The export, streamed. With format=jsonl and Accept:"
                " application/x-ndjson, the bare lines instead (application/x-ndjson): one"
                " memory object (GET /v1/memories items) per line, no envelope.",
            )
        },
    )
    async def export(
        self,
        request: WalletRequest,
        conn: Conn,
        transfer_service: Transfers,
        export_format: Annotated[ExportFormat, QueryParameter(name="format")] = "json",
        namespace: FromQuery[str | None] = None,
        memory_type: FromQuery[MemoryType | None] = None,
        tags: FromQuery[list[str] | None] = None,
        session_id: FromQuery[str | None] = None,
        agent_id: FromQuery[str | None] = None,
        after: FromQuery[str | None] = None,
        before: FromQuery[str | None] = None,
        since: FromQuery[str | None] = None,
        until: FromQuery[str | None] = None,
        include_deleted: FromQuery[bool] = False,
    ) -> Stream:
        # Everything is checked here, before the 200 and the first byte go out.
        memory_filter = list_filter(
            request.user, namespace=namespace, session_id=session_id, agent_id=agent_id,
            memory_type=memory_type, tags=tags, after=after or since, before=before or until,
            include_deleted=include_deleted,
        )  # fmt: skip
        document: str = export_format
        media_type: str = MediaType.JSON.value
        # named outright: a client that accepts anything (*/*) parses the envelope as JSON
        accept = request.headers.get("accept", "").lower()
        if export_format == "jsonl" and any(t in accept for t in NDJSON_MEDIA_TYPES):
            document, media_type = JsonLines.format, NDJSON_MEDIA_TYPES[0]
        return Stream(
            transfer_service.export(request.app.state.pool, memory_filter, document),
            media_type=media_type,
        )

    @post(
        "/import",
        status_code=HTTP_200_OK,
        request_max_body_size=IMPORT_MAX_BODY_BYTES,
        opt=limited(IMPORTS_PER_MINUTE),
        dependencies={"import_turn": Provide(provide_import_turn)},
        responses=error_responses(conflict=IMMUTABLE_MEMORY, precondition=VERSION_CONFLICT),
    )
    async def import_memories(
        self,
        request: WalletRequest,
        import_turn: NamedDependency[ImportTurn],
        transfer_service: Transfers,
        data: JSONBody[ImportIn | ImportItems],
    ) -> ImportAnswer:
        items = data if isinstance(data, list) else transfer_service.check_envelope(data)
        report = await transfer_service.import_memories(import_turn, request.user, items)
        return ImportAnswer(report.imported, report.skipped)
