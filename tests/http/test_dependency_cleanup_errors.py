"""A dependency that turns the handler's error into an API error while it cleans up (as the
request transaction turns a connection lost mid-statement into a 503) is answered with that
error, not a 500: Litestar hands such errors over wrapped in an ExceptionGroup (seen in CI,
tests/cli/test_chaos.py, an import whose connection was lost mid-insert)."""

from __future__ import annotations

from collections.abc import AsyncGenerator

from litestar import Litestar, get
from litestar.di import Provide
from litestar.testing import AsyncTestClient

from app.core.errors import PartUnavailable
from app.http.errors import EXCEPTION_HANDLERS


class LostMidStatement(Exception):
    pass


async def transaction() -> AsyncGenerator[str, None]:
    try:
        yield "conn"
    except LostMidStatement as exc:
        raise PartUnavailable("database") from exc


@get("/work", dependencies={"conn": Provide(transaction)})
async def work(conn: str) -> str:
    raise LostMidStatement


@get("/other", dependencies={"conn": Provide(transaction)})
async def other(conn: str) -> str:
    raise RuntimeError("not an API error")


async def test_an_api_error_raised_while_a_dependency_cleans_up_is_answered_as_itself() -> None:
    app = Litestar([work, other], exception_handlers=EXCEPTION_HANDLERS)  # type: ignore[arg-type]
    async with AsyncTestClient(app=app) as client:
        r = await client.get("/work")
        assert r.status_code == 503, r.text
        assert r.json()["error"]["code"] == "SERVICE_UNAVAILABLE"
        assert r.headers["retry-after"]
        r = await client.get("/other")  # what is no API error stays a 500, in the contract's shape
        assert r.status_code == 500 and r.json()["error"]["code"] == "INTERNAL_ERROR"
