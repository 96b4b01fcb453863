"""Wire structs for GET /v1/tags."""

from __future__ import annotations

from msgspec import Struct


class TagCount(Struct):
    tag: str
    count: int


class TagList(Struct):
    tags: list[TagCount]  # most used first: the shape MemoClaw's MCP server shows
    counts: dict[str, int]  # the same, by name
    total: int
