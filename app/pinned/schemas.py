"""Wire structs for core memories: the pin request and its answers."""

from __future__ import annotations

from typing import Annotated

from msgspec import Meta, Struct

from app.core.schemas import StrictStruct

MemoryId = Annotated[str, Meta(min_length=1, max_length=64)]


class PinIn(StrictStruct):
    """MemoClaw's SDK sends `memory_id`; `id` is accepted too. One of them is required."""

    memory_id: MemoryId | None = None
    id: MemoryId | None = None


class Pinned(Struct):
    pinned: bool
    id: str


class Unpinned(Struct):
    unpinned: bool
    id: str
