"""Wire structs for GET /v1/suggested: memories worth a look, and why (suggested/service.py)."""

from __future__ import annotations

from typing import Any, Literal

from msgspec import Struct

from app.memory.schemas import Memory, memory_fields

Category = Literal["stale", "fresh", "hot", "decaying"]  # app/suggested/service.py says which
CATEGORIES: tuple[Category, ...] = ("stale", "fresh", "hot", "decaying")


class SuggestedMemory(Memory, kw_only=True):
    """A memory with the suggestion fields MemoClaw's SDK parses beside the memory's own."""

    relation_count: int
    category: Category
    review_score: float  # 0..1: how much it deserves a review


class CategoryCounts(Struct):
    """How many memories of the filtered set fall in each category, whatever was asked."""

    stale: int
    fresh: int
    hot: int
    decaying: int


class SuggestedAnswer(Struct):
    suggested: list[SuggestedMemory]
    suggestions: list[SuggestedMemory]  # the same list, the name MemoClaw's CLI and MCP read
    categories: CategoryCounts
    total: int  # suggestions matching the request before `limit`


def suggested_to_wire(row: Any) -> SuggestedMemory:
    return SuggestedMemory(
        **memory_fields(row),
        relation_count=int(row["relation_count"]),
        category=row["category"],
        review_score=round(min(max(float(row["review_score"]), 0.0), 1.0), 6),
    )
