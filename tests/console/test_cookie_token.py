"""The console cookie is read from the Cookie header by splitting its pairs, as http.cookies
reads a well-formed one, in time linear in the header (http.cookies is quadratic in a quoted
value's backslashes on this Python, and the cookie is read before any sign-in)."""

from __future__ import annotations

from http.cookies import SimpleCookie

import pytest
from litestar.datastructures import Headers

from app.console.middleware import COOKIE_NAME, cookie_token


def read(raw: str) -> str | None:
    return cookie_token(Headers({"cookie": raw}))


@pytest.mark.parametrize(
    "raw",
    [
        f"{COOKIE_NAME}=abc-DEF_123",
        f"theme=dark; {COOKIE_NAME}=abc; lang=en",
        f"{COOKIE_NAME}=old; {COOKIE_NAME}=new",
        f'{COOKIE_NAME}="quoted"',
        f"other=a=b=c; {COOKIE_NAME}=tok==",
        f"x{COOKIE_NAME}=nope",
        f"{COOKIE_NAME}=",
    ],
)
def test_a_well_formed_cookie_reads_as_http_cookies_reads_it(raw: str) -> None:
    jar: SimpleCookie = SimpleCookie()
    jar.load(raw)
    morsel = jar.get(COOKIE_NAME)
    assert read(raw) == (morsel.value if morsel is not None and morsel.value else None)


def test_a_header_http_cookies_would_refuse_still_yields_the_console_cookie() -> None:
    assert read(f'junk="unterminated; {COOKIE_NAME}=tok') == "tok"


def test_a_quoted_value_of_backslashes_is_read_at_once() -> None:
    raw = f'{COOKIE_NAME}="' + "\\" * 60_000 + '"'
    assert read(raw) == "\\" * 60_000  # a token no session has; read, not parsed
