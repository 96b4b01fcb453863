"""Conversations and files into memories: extract facts (LLM or offline heuristics), store them
with the same dedup as /v1/store, relate them to what the wallet already knows, migrate files.

No SQL here (repositories) and no HTTP types (controller.py).
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import PurePosixPath
from uuid import UUID

import asyncpg

from app.ai.facts import Fact, FactModel, Message, salient_tags
from app.core.contract import DEFAULT_NAMESPACE
from app.core.errors import InvalidInput
from app.core.provenance import source_of_role
from app.core.schemas import iso, parse_time
from app.ingest.schemas import MAX_SECTION_CHARS, ConversationIn, FileIn
from app.memory.dates import explicit_dates
from app.memory.repository import reads as memory_reads
from app.memory.schemas import StoreIn
from app.memory.service import MemoryService, StoreOutcome
from app.relations import repository as relations_repo

# ingest auto_relate: link each new memory to up to this many existing ones this close
RELATE_LIMIT = 3
RELATE_MIN_SIMILARITY = 0.6
HEADING_RE = re.compile(r"^(#{1,6})\s+\S", re.MULTILINE)


@dataclass
class Scope:
    namespace: str | None
    session_id: str | None
    agent_id: str | None
    occurred_at: str | None = None  # the conversation's time: its facts' event time counts from it


@dataclass
class Stored:
    """What a batch of new memories came to: ids in order, and the counts the response reports."""

    outcomes: list[StoreOutcome] = field(default_factory=list)
    tokens: int = 0

    @property
    def ids(self) -> list[str]:
        return [str(o.row["id"]) for o in self.outcomes]

    @property
    def deduplicated(self) -> int:
        return sum(o.deduplicated for o in self.outcomes)

    @property
    def created(self) -> int:
        return len(self.outcomes) - self.deduplicated


@dataclass
class ExtractOutcome:
    facts: list[Fact]
    stored: Stored
    tokens: int
    relations_created: int = 0


def conversation_of(req: ConversationIn) -> list[Message]:
    messages = [Message(m.role, m.content) for m in req.messages or []]
    if req.text:
        messages.append(Message("user", req.text))
    if not messages:
        raise InvalidInput(
            "Send `messages` (a list of {role, content}) or `text`", {"field": "messages"}
        )
    return messages


def _store_item(content: str, scope: Scope, importance: float | None, memory_type: str | None,
                tags: list[str] | None, source: str = "import") -> StoreIn:  # fmt: skip
    return StoreIn(
        source=source,  # type: ignore[arg-type]  # the route's own sources are not a client's
        content=content,
        importance=importance,
        memory_type=memory_type,  # type: ignore[arg-type]
        tags=tags or None,
        namespace=scope.namespace,
        session_id=scope.session_id,
        agent_id=scope.agent_id,
        occurred_at=scope.occurred_at,
    )


_WORDS = re.compile(r"\w+")


def source_of_fact(fact: str, messages: list[Message]) -> str:
    """A fact's source: the role of the message it was drawn from (app/core/provenance.py),
    the one sharing most of its words; `extract` when none or two roles tie."""
    words = set(_WORDS.findall(fact.casefold()))
    shared: dict[str, int] = {}
    for m in messages:
        source = source_of_role(m.role)
        overlap = len(words & set(_WORDS.findall(m.content.casefold())))
        shared[source] = max(shared.get(source, 0), overlap)
    ranked = sorted(shared.items(), key=lambda kv: kv[1], reverse=True)
    if len(ranked) == 1:  # one role said everything
        return ranked[0][0]
    if not ranked or ranked[0][1] == 0 or (len(ranked) > 1 and ranked[1][1] == ranked[0][1]):
        return "extract"
    return ranked[0][0]


def split_sections(filename: str, content: str) -> list[str]:
    """A markdown file by its headings (each section keeps its heading), a text file by blank-line
    paragraphs grouped up to the section limit; anything longer is cut at paragraph, then line,
    then character boundaries."""
    text = content.replace("\r\n", "\n").strip()
    if not text:
        return []
    is_markdown = PurePosixPath(filename).suffix.lower() in {".md", ".markdown", ".mdx"}
    starts = [m.start() for m in HEADING_RE.finditer(text)] if is_markdown else []
    if starts:
        if starts[0] != 0:
            starts.insert(0, 0)
        pieces = [text[a:b].strip() for a, b in zip(starts, [*starts[1:], len(text)], strict=True)]
    else:
        pieces = _group(text.split("\n\n"), "\n\n")
    sections: list[str] = []
    for piece in pieces:
        sections.extend(_fit(piece))
    return [s for s in sections if s.strip()]


def _group(parts: list[str], joiner: str) -> list[str]:
    groups: list[str] = []
    for part in (p.strip() for p in parts):
        if not part:
            continue
        if groups and len(groups[-1]) + len(joiner) + len(part) <= MAX_SECTION_CHARS:
            groups[-1] += joiner + part
        else:
            groups.append(part)
    return groups


def _fit(piece: str) -> list[str]:
    if len(piece) <= MAX_SECTION_CHARS:
        return [piece]
    for joiner in ("\n\n", "\n"):
        parts = piece.split(joiner)
        if len(parts) > 1:
            return [s for part in _group(parts, joiner) for s in _fit(part)]
    return [piece[i : i + MAX_SECTION_CHARS] for i in range(0, len(piece), MAX_SECTION_CHARS)]


class IngestService:
    def __init__(self, memories: MemoryService, fact_model: FactModel) -> None:
        self.memories = memories
        self.fact_model = fact_model

    async def extract(
        self, conn: asyncpg.Connection, wallet: str, messages: list[Message], scope: Scope
    ) -> ExtractOutcome:
        extraction = await self.fact_model.extract(messages)
        items = [
            _store_item(
                f.content,
                scope,
                f.importance,
                f.memory_type,
                list(f.tags),
                source_of_fact(f.content, messages),
            )
            for f in extraction.facts
        ]
        stored = Stored()
        if items:
            stored.outcomes, stored.tokens = await self.memories.store_batch(conn, wallet, items)
        return ExtractOutcome(extraction.facts, stored, extraction.tokens_used + stored.tokens)

    async def ingest(
        self,
        conn: asyncpg.Connection,
        wallet: str,
        messages: list[Message],
        scope: Scope,
        auto_relate: bool,
    ) -> ExtractOutcome:
        outcome = await self.extract(conn, wallet, messages, scope)
        if auto_relate:
            outcome.relations_created = await self._relate(conn, wallet, outcome.stored, scope)
        return outcome

    async def _relate(
        self, conn: asyncpg.Connection, wallet: str, stored: Stored, scope: Scope
    ) -> int:
        """Link each newly created memory to the closest memories the wallet already had."""
        new = [o.row for o in stored.outcomes if not o.deduplicated]
        if not new:
            return 0
        batch_ids = [o.row["id"] for o in stored.outcomes]
        vectors = (await self.memories.embedder.embed([r["content"] for r in new])).vectors
        links: list[tuple[UUID, UUID]] = []
        for row, vector in zip(new, vectors, strict=True):
            near = await memory_reads.neighbours(
                conn, wallet, row["namespace"], vector, batch_ids, RELATE_LIMIT,
                RELATE_MIN_SIMILARITY,
            )  # fmt: skip
            links.extend((row["id"], n["id"]) for n in near)
        return await relations_repo.create_many(conn, wallet, links, "related_to")

    async def migrate(
        self,
        conn: asyncpg.Connection,
        wallet: str,
        files: list[FileIn],
        scope: Scope,
        auto_tag: bool,
        deduplicate: bool = True,
        dry_run: bool = False,
    ) -> tuple[Stored, int, list[dict[str, str]]]:
        """Files split into sections, each a memory; exact duplicates (SHA-256 of the content,
        within the request and against what the wallet has) are counted, not stored twice,
        unless `deduplicate` is off. A dry run stores in a savepoint it then rolls back, so its
        counts are exactly what the migration would do."""
        items: list[StoreIn] = []
        errors: list[dict[str, str]] = []
        processed = 0
        for f in files:
            sections = split_sections(f.filename, f.content)
            if not sections:
                errors.append({"filename": f.filename, "error": "no content"})
                continue
            processed += 1
            stem_tag = _filename_tag(f.filename)
            for section in sections:
                tags = [stem_tag, *salient_tags(section, 4)][:5] if auto_tag else None
                items.append(_store_item(section, scope, None, None, tags))
        stored = Stored()
        if items:
            async with _undone_if(conn, dry_run):
                stored.outcomes, stored.tokens = await self.memories.store_batch(
                    conn, wallet, items, near_dedup=False, exact_dedup=deduplicate
                )
        return stored, processed, errors


@contextlib.asynccontextmanager
async def _undone_if(conn: asyncpg.Connection, undo: bool) -> AsyncIterator[None]:
    """With `undo` (a dry run), what the block writes is rolled back (a savepoint) at its end."""
    if not undo:
        yield
        return
    savepoint = conn.transaction()
    await savepoint.start()
    try:
        yield
    finally:
        await savepoint.rollback()


def _filename_tag(filename: str) -> str:
    stem = PurePosixPath(filename).stem.lower()
    return (re.sub(r"[^a-z0-9]+", "-", stem).strip("-") or "file")[:64]


def scope_of(namespace: str | None, session_id: str | None, agent_id: str | None) -> Scope:
    return Scope(namespace or DEFAULT_NAMESPACE, session_id, agent_id)


def conversation_scope(req: ConversationIn) -> Scope:
    """Where a conversation's facts go, and the time their relative dates count from."""
    scope = scope_of(req.namespace, req.session_id, req.agent_id)
    when = conversation_date(req)
    return replace(scope, occurred_at=iso(when)) if when else scope


def conversation_date(req: ConversationIn) -> datetime | None:
    """The conversation's own time: `occurred_at`, else its messages' latest `occurred_at`, else
    the latest explicit date written in it (a transcript's "[8 May, 2023] …" header)."""
    if req.occurred_at:
        return parse_time(req.occurred_at, "occurred_at")
    messages = req.messages or []
    stamped = [
        parse_time(m.occurred_at, f"messages[{i}].occurred_at")
        for i, m in enumerate(messages) if m.occurred_at
    ]  # fmt: skip
    if stamped:
        return max(t for t in stamped if t is not None)
    texts = [m.content for m in messages] + ([req.text] if req.text else [])
    written = [span.start for text in texts for span in explicit_dates(text)]
    return max(written) if written else None
