"""Wire structs for turning conversations and files into memories: the requests (limits:
docs/api-contract.md, "Limits") and the answers."""

from __future__ import annotations

from typing import Annotated

from msgspec import UNSET, Meta, Struct, UnsetType

from app.core.schemas import Name, OptionalName, StrictStruct
from app.memory.schemas import Content

MAX_MESSAGES = 100
MAX_FILES = 50
MAX_SECTION_CHARS = 8000


class MessageIn(StrictStruct):
    role: Annotated[str, Meta(min_length=1, max_length=32)]
    content: Content
    occurred_at: str | None = (
        None  # when it was said (ISO 8601): what its relative dates count from
    )


class ConversationIn(StrictStruct):
    """`messages` (the SDK and docs) or `text` (MemoClaw's CLI and MCP): at least one."""

    messages: Annotated[list[MessageIn], Meta(max_length=MAX_MESSAGES)] | None = None
    text: Annotated[str, Meta(min_length=1, max_length=60_000)] | None = None
    namespace: Name | None = None
    session_id: OptionalName | None = None
    agent_id: OptionalName | None = None
    auto_relate: bool = False
    # When the conversation took place (ISO 8601); else the messages' own times or dates
    occurred_at: str | None = None


class FileIn(StrictStruct):
    filename: Annotated[str, Meta(min_length=1, max_length=255)]
    content: Annotated[str, Meta(max_length=60_000)]


class MigrateIn(StrictStruct):
    files: Annotated[list[FileIn], Meta(min_length=1, max_length=MAX_FILES)]
    namespace: Name | None = None
    session_id: OptionalName | None = None
    agent_id: OptionalName | None = None
    auto_tag: bool = False
    # false stores every section, repeats included (MemoClaw's MCP server always sends it)
    deduplicate: bool = True
    dry_run: bool = False  # report what would be stored, store nothing (the MCP's preview)


# ---- answers -----------------------------------------------------------------------------------


class ExtractAnswer(Struct):
    memory_ids: list[str]
    facts_extracted: int
    facts_stored: int
    facts_deduplicated: int
    tokens_used: int


class IngestAnswer(ExtractAnswer):
    relations_created: int
    # the count MemoClaw's CLI and MCP server read (they print "? memories created")
    memories_created: int


class FileError(Struct):
    filename: str
    error: str


class MigrateAnswer(Struct, kw_only=True):
    memory_ids: list[str]  # none in a dry run
    files_processed: int
    memories_created: int
    memories_deduplicated: int
    tokens_used: int
    errors: list[FileError] | UnsetType = UNSET  # files that gave nothing, when any
    dry_run: bool | UnsetType = UNSET  # true in a dry run, else left out
