"""Wire structs for core memories: the pin request."""

from __future__ import annotations

from typing import Annotated

from msgspec import Meta

from app.kit.schemas import StrictStruct

MemoryId = Annotated[str, Meta(min_length=1, max_length=64)]


class PinIn(StrictStruct):
    """MemoClaw's SDK sends `memory_id`; `id` is accepted too. One of them is required."""

    memory_id: MemoryId | None = None
    id: MemoryId | None = None
