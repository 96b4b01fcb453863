"""The console's memory pages: the list (filters, pages, search with its signals), one memory
(its history and graph), and editing, pinning, approving and deleting it."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Annotated, Any, cast
from urllib.parse import urlencode

from litestar import get, post
from litestar.di import NamedDependency
from litestar.params import FromPath, FromQuery, QueryParameter
from litestar.response import Redirect, Template
from litestar.status_codes import HTTP_303_SEE_OTHER

from app.console.pages import (
    CsrfForm,
    Form,
    PageController,
    Session,
    check_csrf,
    converted,
    render,
    see_other,
)
from app.core.errors import InvalidInput
from app.history import service as history
from app.http.body import takes_form
from app.http.params import Conn
from app.memory.filters import LIST_SORTS, ListOrder
from app.memory.schemas import (
    MAX_RECALL_QUERY_CHARS,
    MemoryType,
    RecallIn,
    UpdateIn,
    split_tags,
    tags_of,
)
from app.memory.service import MemoryService, list_filter, parse_memory_id
from app.relations.service import RelationService

PAGE_SIZE = 50
GRAPH_DEPTH = 2
GRAPH_LIMIT = 50
SEARCH_LIMIT = 20
MEMORY_TYPES: tuple[str, ...] = MemoryType.__args__  # type: ignore[attr-defined]

Memories = NamedDependency[MemoryService]


class EditForm(CsrfForm, kw_only=True):
    content: str
    importance: str
    memory_type: str
    tags: str = ""
    namespace: str


class PinForm(CsrfForm, kw_only=True):
    pinned: str


@dataclass(frozen=True)
class ListQuery:
    """The memories view's filters, as the page's form sends them (blank: no filter)."""

    namespace: str
    memory_type: str
    tags: str
    pinned: str
    sort: str
    order: str
    page: int
    q: str

    def link(self, **changes: Any) -> str:
        values = {**self.__dict__, **changes}
        kept = {k: v for k, v in values.items() if v != "" and (k, v) != ("page", 1)}
        return "/console/memories" + (f"?{urlencode(kept)}" if kept else "")


def bar(value: float) -> float:
    return round(min(max(value, 0.0), 1.0), 4)


def signal_bars(signals: Any) -> list[tuple[str, float, float]]:
    """The four signals a recall score is made of: (name, bar 0..1, value)."""
    return [
        ("vector", bar(signals.vector), signals.vector),
        ("keyword", bar(signals.keyword), signals.keyword),
        ("recency", bar(signals.recency), signals.recency),
        ("importance", bar(signals.effective_importance), signals.effective_importance),
    ]


class ConsoleMemoriesController(PageController):
    """The memories: list, search, one memory, and its edits."""

    @get("/memories")
    async def memories(
        self, conn: Conn, session: Session, memory_service: Memories,
        namespace: FromQuery[str] = "", memory_type: FromQuery[str] = "",
        tags: FromQuery[str] = "", pinned: FromQuery[str] = "",
        sort: FromQuery[str] = "created_at", order: FromQuery[str] = "desc",
        page_number: Annotated[int, QueryParameter(name="page")] = 1,
        q: Annotated[str, QueryParameter(max_length=MAX_RECALL_QUERY_CHARS)] = "",
    ) -> Template:  # fmt: skip
        query = ListQuery(namespace, memory_type, tags, pinned, sort, order, page_number, q)
        checked = _checked(query)
        names = await memory_service.namespace_names(conn, session.wallet)
        common: dict[str, Any] = {"query": query, "namespaces": names,
                  "memory_types": MEMORY_TYPES, "sorts": LIST_SORTS}  # fmt: skip
        if query.q.strip():
            found = await memory_service.recall(
                conn, session.wallet,
                RecallIn(query=query.q.strip(), limit=SEARCH_LIMIT,
                         namespace=query.namespace or None,
                         memory_type=cast(Any, checked.memory_type), tags=checked.tags or None),
            )  # fmt: skip
            results = [
                {"row": r.row, "tags": tags_of(r.row), "score": r.signals.score,
                 "bars": signal_bars(r.signals)}
                for r in found.recalled
            ]  # fmt: skip
            return render("memories.html", session, results=results, searched=True, **common)
        f = list_filter(
            session.wallet, namespace=query.namespace or None, memory_type=checked.memory_type,
            tags=checked.tags or None, pinned=checked.pinned,
        )  # fmt: skip
        offset = (query.page - 1) * PAGE_SIZE
        rows, total = await memory_service.list_page(
            conn, f, PAGE_SIZE, offset, ListOrder(checked.sort, query.order == "desc")
        )
        pages = max(1, math.ceil(total / PAGE_SIZE))
        items = [{"row": r, "tags": tags_of(r)} for r in rows]
        return render("memories.html", session, items=items, total=total, pages=pages,
                    searched=False, **common)  # fmt: skip

    @get("/memories/{memory_id:str}")
    async def memory(
        self, conn: Conn, session: Session, memory_service: Memories,
        relations_service: NamedDependency[RelationService], memory_id: FromPath[str],
    ) -> Template:  # fmt: skip
        row = await memory_service.get(conn, session.wallet, memory_id)
        changes = await history.history_of(conn, session.wallet, row["id"])
        graph = await relations_service.graph(
            conn, session.wallet, str(row["id"]), GRAPH_DEPTH, GRAPH_LIMIT, None
        )
        timeline = [
            {"action": c["action"], "at": c["created_at"], "actor": c["actor"],
             "changes": sorted(history.readable(c["changes"]).items())}
            for c in reversed(changes)
        ]  # fmt: skip
        graph_data = {
            "root": str(row["id"]),
            "nodes": [{"id": str(n["id"]), "content": n["content"],
                       "memory_type": n["memory_type"], "depth": int(n["depth"])}
                      for n in graph.nodes],
            "edges": [{"id": str(e["id"]), "source": str(e["source_id"]),
                       "target": str(e["target_id"]), "relation_type": e["relation_type"]}
                      for e in graph.edges],
        }  # fmt: skip
        contents = {str(n["id"]): n["content"] for n in graph.nodes}
        return render("memory.html", session, row=row, tags=tags_of(row), timeline=timeline,
                      graph=graph_data, contents=contents, memory_types=MEMORY_TYPES)  # fmt: skip

    @post("/memories/{memory_id:str}", status_code=HTTP_303_SEE_OTHER, opt=takes_form())
    async def edit(
        self, conn: Conn, session: Session, memory_service: Memories, memory_id: FromPath[str],
        data: Annotated[EditForm, Form],
    ) -> Redirect:  # fmt: skip
        check_csrf(session, data.csrf_token)
        patch = _edit_patch(data)
        row, _ = await memory_service.update(conn, session.wallet, memory_id, patch)
        return see_other(f"/console/memories/{row['id']}")

    @post("/memories/{memory_id:str}/pin", status_code=HTTP_303_SEE_OTHER, opt=takes_form())
    async def pin(
        self, conn: Conn, session: Session, memory_service: Memories, memory_id: FromPath[str],
        data: Annotated[PinForm, Form],
    ) -> Redirect:  # fmt: skip
        check_csrf(session, data.csrf_token)
        if data.pinned not in ("true", "false"):
            raise InvalidInput("pinned must be true or false", {"field": "pinned"})
        row, _ = await memory_service.update(
            conn, session.wallet, memory_id, UpdateIn(pinned=data.pinned == "true")
        )
        return see_other(f"/console/memories/{row['id']}")

    @post("/memories/{memory_id:str}/approve", status_code=HTTP_303_SEE_OTHER, opt=takes_form())
    async def approve(
        self, conn: Conn, session: Session, memory_service: Memories, memory_id: FromPath[str],
        data: Annotated[CsrfForm, Form],
    ) -> Redirect:  # fmt: skip
        """Release a memory held for review (app/memory/crud.py approve), recorded in history."""
        check_csrf(session, data.csrf_token)
        row = await memory_service.approve(conn, session.wallet, parse_memory_id(memory_id))
        return see_other(f"/console/memories/{row['id']}")

    @get("/memories/{memory_id:str}/delete")
    async def confirm_delete(
        self, conn: Conn, session: Session, memory_service: Memories, memory_id: FromPath[str]
    ) -> Template:
        row = await memory_service.get(conn, session.wallet, memory_id)
        return render("delete.html", session, row=row)

    @post("/memories/{memory_id:str}/delete", status_code=HTTP_303_SEE_OTHER, opt=takes_form())
    async def delete(
        self, conn: Conn, session: Session, memory_service: Memories, memory_id: FromPath[str],
        data: Annotated[CsrfForm, Form],
    ) -> Redirect:  # fmt: skip
        check_csrf(session, data.csrf_token)
        await memory_service.delete(conn, session.wallet, memory_id)
        return see_other("/console/memories")


@dataclass(frozen=True)
class _Checked:
    memory_type: str | None
    tags: list[str] | None
    pinned: bool | None
    sort: Any


def _checked(query: ListQuery) -> _Checked:
    """The view's filters, validated as the REST list's are (422 in the contract's shape)."""
    if query.memory_type and query.memory_type not in MEMORY_TYPES:
        raise InvalidInput(f"memory_type must be one of {', '.join(MEMORY_TYPES)}",
                           {"field": "memory_type"})  # fmt: skip
    if query.pinned not in ("", "true", "false"):
        raise InvalidInput("pinned must be true, false or blank", {"field": "pinned"})
    if query.sort not in LIST_SORTS:
        raise InvalidInput(f"sort must be one of {', '.join(LIST_SORTS)}", {"field": "sort"})
    if query.order not in ("asc", "desc"):
        raise InvalidInput("order must be asc or desc", {"field": "order"})
    if not 1 <= query.page <= 10**9:
        raise InvalidInput("page must be at least 1", {"field": "page"})
    tags = split_tags(query.tags)
    pinned = None if query.pinned == "" else query.pinned == "true"
    return _Checked(query.memory_type or None, tags, pinned, query.sort)


def _edit_patch(data: EditForm) -> UpdateIn:
    """The edit form as an update, checked as PATCH /v1/memories/{id}'s body is."""
    try:
        importance = float(data.importance)
    except ValueError as exc:
        raise InvalidInput("importance must be a number from 0 to 1",
                           {"field": "importance"}) from exc  # fmt: skip
    if not math.isfinite(importance):
        raise InvalidInput("importance must be a number from 0 to 1", {"field": "importance"})
    fields = {
        "content": data.content, "importance": importance, "memory_type": data.memory_type,
        "namespace": data.namespace,
        "tags": split_tags(data.tags) or [],  # blank: no tags (None would keep them)
    }  # fmt: skip
    return converted(fields, UpdateIn, "edit")
