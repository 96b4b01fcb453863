"""Where a memory came from, who wrote it and through what (issue 39, "Provenance").

`source`: the content's origin: `user`, `assistant` or `tool` (what a client says of it, or the
role of the message a fact was extracted from), `import`, `extract` (extracted with no single
role), `console`, or `api` (a store that said nothing). Clients may send only the first three
and `api` (WRITABLE_SOURCES); the others are the route's. A grantee cannot say where its content
came from (a grantee's "user" is not the owner's user): its memories are `api` whatever it sends.

Who wrote it (`written_by`, `writer`) and the surface (`surface`) are the request's: the
request's context holds them (`WRITING`), set where the request says who acts
(app/access/requests.py `Acting.reach`) and what it came through (app/http/surface.py); a memory
stored without them is the wallet's own, over REST. No HTTP types here.
"""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass
from typing import Literal, get_args

Source = Literal["user", "assistant", "tool", "import", "extract", "console", "api"]
WritableSource = Literal["user", "assistant", "tool", "api"]
Writer = Literal["owner", "agent", "grantee"]
Surface = Literal["rest", "mcp", "hook", "console"]
SOURCES: tuple[str, ...] = get_args(Source)
SURFACES: tuple[str, ...] = get_args(Surface)
# A message's role as a memory's source (extract, ingest); any other role: "extract"
ROLE_SOURCES = {"user": "user", "human": "user", "assistant": "assistant", "ai": "assistant",
                "tool": "tool", "function": "tool"}  # fmt: skip


@dataclass(frozen=True)
class Writing:
    """Who writes in this request (None: the wallet itself) and through what surface."""

    written_by: str | None = None
    writer: Writer = "owner"
    surface: Surface = "rest"


THE_OWNER_OVER_REST = Writing()  # frozen: one value every request may start from
WRITING: ContextVar[Writing] = ContextVar("engram_writing", default=THE_OWNER_OVER_REST)


def written_as(writer: Writer, address: str) -> None:
    """This request writes as `address`, a grantee or an agent key (kept with its surface)."""
    WRITING.set(Writing(address.lower(), writer, WRITING.get().surface))


def begin(surface: Surface) -> None:
    """A request begins, through `surface`, written by the wallet itself until it says
    otherwise (nothing of an earlier request in the same context carries over)."""
    WRITING.set(Writing(surface=surface))


def source_of_role(role: str) -> str:
    return ROLE_SOURCES.get(role.strip().lower(), "extract")
