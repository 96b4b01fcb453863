"""What a write says about a memory: a caller's fields (`MemoryFields`, validated), the memory
ready to insert (`NewMemory`, with its vector and what the namespace guard settled), and what an
import carries over from its source (`KeptState`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import numpy as np


@dataclass
class MemoryFields:
    """What a caller says about a new memory (validated); importance None means the default."""

    content: str
    metadata: dict[str, Any]
    importance: float | None
    namespace: str
    memory_type: str
    session_id: str | None
    agent_id: str | None
    expires_at: datetime | None
    pinned: bool
    immutable: bool
    occurred_at: datetime | None = None  # event time, when known (app/memory/dates.py)
    mentioned_at: datetime | None = None  # when it was said, which relative dates count from
    key: str | None = None  # a stable name in its namespace (upsert by key)
    # provenance (app/core/provenance.py): None on `source` is the route's default; the
    # others, when set, are what an import carries over (else the request's)
    source: str | None = None
    written_by: str | None = None
    writer: str | None = None
    surface: str | None = None


# (namespace, SHA-256 of the content): what exact-content dedup compares
ContentKey = tuple[str, bytes]


@dataclass
class KeptState:
    """What an import carries over from its source; a store leaves these to the database."""

    created_at: datetime
    updated_at: datetime
    accessed_at: datetime
    access_count: int
    deleted_at: datetime | None


@dataclass
class NewMemory:
    wallet: str
    fields: MemoryFields
    importance: float
    content_hash: bytes
    embedding: np.ndarray
    embedding_model: str
    kept: KeptState | None = None
    # provenance and trust, as the service settled them (app/guard/service.py)
    source: str = "api"
    written_by: str | None = None
    writer: str = "owner"
    surface: str = "rest"
    flags: list[dict[str, str]] = field(default_factory=list)
    quarantined: bool = False
