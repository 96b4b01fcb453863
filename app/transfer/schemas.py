"""Wire shapes of export and import: the import body, and the export documents written piece by
piece into the JSON envelope `{format, memories, count}` that MemoClaw's clients parse for every
format (docs/api-contract.md, "Export and import" and "MemoClaw compatibility").

For `json` and `jsonl`, `memories` is the list of memory objects (GET /v1/memories items):
MemoClaw's MCP server parses the answer as JSON for every format and writes the JSON lines
itself from those objects. A caller that sends `Accept: application/x-ndjson` with
`format=jsonl` gets the bare lines instead, one memory object per line. For `csv` and
`markdown` it is a list holding one string, the rendered document: MemoClaw's Python SDK types
`memories` as a list for every format (memoclaw 1.0.0 `ExportResponse`), so a bare string would
fail its parsing. Either way the envelope is written as rows arrive, and `count` comes last
since it is known only at the end.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from typing import Annotated, Any, Literal

import msgspec
from msgspec import Meta, Struct

from app.core.provenance import Source, Surface, Writer
from app.core.schemas import StrictStruct
from app.memory.schemas import Memory, StoreIn, memory_to_wire

ExportFormat = Literal["json", "jsonl", "csv", "markdown"]
# What an Accept header names to get format=jsonl as bare lines rather than the JSON envelope.
NDJSON_MEDIA_TYPES = ("application/x-ndjson", "application/jsonl")
# An import holds its rows in one transaction and embeds every new memory: a cap keeps one
# request bounded (an export of a 100k-memory wallet still imports in one go).
MAX_IMPORT_ITEMS = 100_000
# MemoClaw's 64 KB body limit fits ~100 memories; an export document needs far more.
IMPORT_MAX_BODY_BYTES = 64 * 1024 * 1024
AccessCount = Annotated[int, Meta(ge=0, le=2**31 - 1)]


class ImportItem(StoreIn):
    """A memory object as exported (contract "Memory object"): what a store takes, plus the
    timestamps and counts an import keeps. The source's `id`, `user_id` and `embedding_model`
    are accepted and ignored: imported memories get new ids, belong to the caller and are
    embedded again; `tags` mirrors metadata.tags, as on store."""

    created_at: str | None = None
    updated_at: str | None = None
    accessed_at: str | None = None
    access_count: AccessCount | None = None
    deleted_at: str | None = None
    mentioned_at: str | None = None  # with occurred_at: an exported event time, kept as is
    id: str | None = None
    user_id: str | None = None
    embedding_model: str | None = None
    # provenance as exported (app/core/provenance.py), kept: an import is the owner's own
    # memories moved; `flags` are the server's, found again on import
    source: Source | None = None  # type: ignore[assignment]
    written_by: Annotated[str, Meta(max_length=255)] | None = None
    writer: Writer | None = None
    surface: Surface | None = None


ImportItems = Annotated[list[ImportItem], Meta(max_length=MAX_IMPORT_ITEMS)]


class ImportIn(StrictStruct):
    """An export envelope; only the json format carries memory objects that can be imported."""

    memories: ImportItems
    format: str | None = None
    count: int | None = None


class ImportAnswer(Struct):
    imported: int
    skipped: int  # items already held (the same content) or expired


class ExportEnvelope(Struct):
    """GET /v1/export's answer, as the documents below write it piece by piece (declared for
    the OpenAPI document): `memories` holds memory objects for json and jsonl, and one string,
    the rendered document, for csv and markdown."""

    format: ExportFormat
    memories: list[Memory | str]
    count: int


# ---- export documents --------------------------------------------------------------------------


def _json_string_body(text: str) -> bytes:
    """`text` escaped as the inside of a JSON string. Escaping is per character, so the pieces
    of a document escaped one by one concatenate into the escaped document."""
    return msgspec.json.encode(text)[1:-1]


class ExportDocument:
    """Writes one export format into the envelope: `start`, then `rows` per batch, then `end`."""

    format: str

    def start(self) -> bytes:
        raise NotImplementedError

    def rows(self, rows: Sequence[Any]) -> bytes:
        raise NotImplementedError

    def end(self, count: int) -> bytes:
        raise NotImplementedError


class JsonDocument(ExportDocument):
    format = "json"

    def __init__(self) -> None:
        self._first = True

    def start(self) -> bytes:
        return b'{"format":"' + self.format.encode() + b'","memories":['

    def rows(self, rows: Sequence[Any]) -> bytes:
        if not rows:
            return b""
        body = b",".join(msgspec.json.encode(memory_to_wire(r)) for r in rows)
        if self._first:
            self._first = False
            return body
        return b"," + body

    def end(self, count: int) -> bytes:
        return b'],"count":' + str(count).encode() + b"}"


class JsonlDocument(JsonDocument):
    """The envelope of `json`, named `jsonl`: its client writes the lines from the objects."""

    format = "jsonl"


class JsonLines(ExportDocument):
    """Bare JSON lines, one memory object each, no envelope (asked for by Accept)."""

    format = "ndjson"

    def start(self) -> bytes:
        return b""

    def rows(self, rows: Sequence[Any]) -> bytes:
        return b"".join(msgspec.json.encode(memory_to_wire(r)) + b"\n" for r in rows)

    def end(self, count: int) -> bytes:
        return b""


class TextDocument(ExportDocument):
    """A text document carried as the one string in the envelope's `memories`."""

    def start(self) -> bytes:
        head = b'{"format":"' + self.format.encode() + b'","memories":["'
        return head + _json_string_body(self.head())

    def rows(self, rows: Sequence[Any]) -> bytes:
        return _json_string_body(
            self.render([msgspec.to_builtins(memory_to_wire(r)) for r in rows])
        )

    def end(self, count: int) -> bytes:
        return b'"],"count":' + str(count).encode() + b"}"

    def head(self) -> str:
        return ""

    def render(self, memories: list[dict[str, Any]]) -> str:
        raise NotImplementedError


# The columns of a CSV export, in order: every field of the memory object. Structured values
# (metadata, tags) are JSON, so a cell holds them unambiguously.
CSV_COLUMNS = (
    "id", "content", "namespace", "memory_type", "importance", "tags", "metadata", "session_id",
    "agent_id", "pinned", "immutable", "expires_at", "created_at", "updated_at", "accessed_at",
    "access_count", "deleted_at", "embedding_model",
)  # fmt: skip


def _csv_cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (dict, list)):
        return msgspec.json.encode(value).decode()
    return str(value)


class CsvDocument(TextDocument):
    """RFC 4180 through the csv module: cells with commas, quotes or newlines are quoted."""

    format = "csv"

    def head(self) -> str:
        return self._lines([CSV_COLUMNS])

    def render(self, memories: list[dict[str, Any]]) -> str:
        return self._lines([[_csv_cell(m.get(c)) for c in CSV_COLUMNS] for m in memories])

    @staticmethod
    def _lines(rows: Sequence[Sequence[str]]) -> str:
        out = io.StringIO()
        csv.writer(out).writerows(rows)
        return out.getvalue()


# Markdown fields listed under each memory, after its content.
MARKDOWN_FIELDS = (
    "id", "memory_type", "importance", "tags", "session_id", "agent_id", "pinned", "immutable",
    "created_at", "updated_at", "accessed_at", "access_count", "expires_at", "deleted_at",
    "metadata",
)  # fmt: skip
MARKDOWN_TITLE_CHARS = 80


def _markdown_title(content: str) -> str:
    line = content.strip().splitlines()[0] if content.strip() else content
    line = " ".join(line.split()).lstrip("#").strip() or "(untitled)"
    if len(line) > MARKDOWN_TITLE_CHARS:
        line = line[: MARKDOWN_TITLE_CHARS - 1].rstrip() + "…"
    return line


def _quoted(content: str) -> str:
    """The content as a blockquote: whatever markdown it holds stays inside its section."""
    return "\n".join(f"> {line}" if line else ">" for line in content.split("\n"))


class MarkdownDocument(TextDocument):
    """One `## Namespace` heading per namespace (rows arrive ordered by namespace), one `###`
    section per memory: its content quoted, then its fields."""

    format = "markdown"

    def __init__(self) -> None:
        self._namespace: str | None = None

    def head(self) -> str:
        return "# Memories\n\n"

    def render(self, memories: list[dict[str, Any]]) -> str:
        parts: list[str] = []
        for m in memories:
            if m["namespace"] != self._namespace:
                self._namespace = m["namespace"]
                parts.append(f"## Namespace: {m['namespace']}\n\n")
            fields = "".join(
                f"- **{name}**: {_csv_cell(m[name])}\n"
                for name in MARKDOWN_FIELDS
                if m.get(name) not in (None, [], {})
            )
            parts.append(
                f"### {_markdown_title(m['content'])}\n\n{_quoted(m['content'])}\n\n{fields}\n"
            )
        return "".join(parts)


DOCUMENTS: dict[str, type[ExportDocument]] = {
    "json": JsonDocument,
    "jsonl": JsonlDocument,
    "ndjson": JsonLines,
    "csv": CsvDocument,
    "markdown": MarkdownDocument,
}
