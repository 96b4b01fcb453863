"""Console sign-in over HTTP: the one-time link, the browser wallet's signed challenge, the
session cookie's flags, sign-out on the server, and expiry."""

from __future__ import annotations

import asyncpg
import pytest
from eth_account import Account
from eth_account.signers.local import LocalAccount
from litestar.testing import AsyncTestClient

from app.asgi import create_app
from app.config import Settings
from app.console.middleware import COOKIE_NAME
from app.console.service import token_hash
from tests.support.console import (
    csrf_of,
    open_link,
    origin,
    sign_in,
    sign_in_link,
    siwx_header,
    wallet_sign_in,
)


def set_cookie(response) -> str:  # type: ignore[no-untyped-def]
    return next(v for k, v in response.headers.multi_items() if k == "set-cookie")


async def test_a_link_signs_in_once_with_a_strict_http_only_cookie(
    browser: AsyncTestClient, wallet: LocalAccount
) -> None:
    link = await sign_in_link(browser, wallet)
    r = await open_link(browser, link)
    assert r.status_code == 303 and r.headers["location"] == "/console/memories"
    cookie = set_cookie(r).lower()
    assert cookie.startswith(f"{COOKIE_NAME}=")
    for flag in ("httponly", "samesite=strict", "path=/", "max-age=28800"):
        assert flag in cookie, cookie
    assert "secure" not in cookie  # plain HTTP here; see the HTTPS test
    page = await browser.get("/console/memories")
    assert page.status_code == 200 and wallet.address.lower()[:6] in page.text
    browser.cookies.clear()
    again = await open_link(browser, link)
    assert again.status_code == 401 and "used already or has expired" in again.text
    assert "set-cookie" not in again.headers


async def test_a_link_needs_a_valid_sign_in_with_x(browser: AsyncTestClient) -> None:
    assert (await browser.post("/console/auth/links")).status_code == 401
    bad = await browser.post("/console/auth/links", headers={"SIGN-IN-WITH-X": "bm90IGpzb24="})
    assert bad.status_code == 401 and bad.json()["error"]["code"] == "UNAUTHORIZED"
    unknown = await open_link(browser, "/console/auth/link/not-a-token")
    assert unknown.status_code == 401


async def test_a_browser_wallet_signs_in(browser: AsyncTestClient, wallet: LocalAccount) -> None:
    r = await wallet_sign_in(browser, wallet)
    assert r.status_code == 200, r.text
    assert r.json() == {"wallet": wallet.address.lower(), "next": "/console/memories"}
    assert "samesite=strict" in set_cookie(r).lower()
    assert (await browser.get("/console/memories")).status_code == 200


async def test_a_signature_by_another_wallet_is_refused(
    browser: AsyncTestClient, wallet: LocalAccount, other_wallet: LocalAccount
) -> None:
    r = await browser.post("/console/auth/challenge", json={"address": wallet.address},
                           headers=origin(browser))  # fmt: skip
    body = r.json()
    from eth_account.messages import encode_defunct

    forged = other_wallet.sign_message(encode_defunct(text=body["message"])).signature.hex()
    r = await browser.post(
        "/console/auth/signin",
        json={
            "challenge": body["challenge"],
            "address": wallet.address,
            "signature": "0x" + forged,
        },
        headers=origin(browser),
    )
    assert r.status_code == 401 and "set-cookie" not in r.headers


async def test_sign_in_requests_must_come_from_the_console_page(
    browser: AsyncTestClient, wallet: LocalAccount
) -> None:
    body = {"address": wallet.address}
    assert (await browser.post("/console/auth/challenge", json=body)).status_code == 403
    foreign = {"origin": "https://evil.example"}
    r = await browser.post("/console/auth/challenge", json=body, headers=foreign)
    assert r.status_code == 403 and r.json()["error"]["code"] == "FORBIDDEN"
    bad = await browser.post("/console/auth/challenge", json={"address": "0x12"},
                             headers=origin(browser))  # fmt: skip
    assert bad.status_code == 422


async def test_pages_without_a_session_go_to_sign_in(browser: AsyncTestClient) -> None:
    for path in ("/console/memories", "/console/usage", "/console/memories/x"):
        r = await browser.get(path)
        assert r.status_code == 302 and r.headers["location"] == "/console/signin", path
    assert (await browser.get("/console")).headers["location"] == "/console/signin"
    signin = await browser.get("/console/signin")
    assert signin.status_code == 200 and 'id="connect"' in signin.text


async def test_sign_out_revokes_the_session_on_the_server(
    browser: AsyncTestClient, wallet: LocalAccount, database_url: str
) -> None:
    csrf = await sign_in(browser, wallet)
    token = browser.cookies[COOKIE_NAME]
    r = await browser.post("/console/signout", data={"csrf_token": csrf}, headers=origin(browser))
    assert r.status_code == 303 and r.headers["location"] == "/console/signin"
    assert "max-age=0" in set_cookie(r).lower()
    conn = await asyncpg.connect(database_url)
    try:
        left = await conn.fetchval(
            "SELECT count(*) FROM console_sessions WHERE token_hash = $1", token_hash(token)
        )
    finally:
        await conn.close()
    assert left == 0
    browser.cookies.set(COOKIE_NAME, token)  # a copy of the cookie kept from before
    assert (await browser.get("/console/memories")).headers["location"] == "/console/signin"


async def test_an_expired_session_signs_nobody_in(
    browser: AsyncTestClient, wallet: LocalAccount, database_url: str
) -> None:
    await sign_in(browser, wallet)
    conn = await asyncpg.connect(database_url)
    try:
        await conn.execute(
            "UPDATE console_sessions SET expires_at = now() - interval '1 second'"
            " WHERE token_hash = $1",
            token_hash(browser.cookies[COOKIE_NAME]),
        )
    finally:
        await conn.close()
    r = await browser.get("/console/memories")
    assert r.status_code == 302 and r.headers["location"] == "/console/signin"


async def test_the_cookie_is_secure_over_https(settings: Settings, wallet: LocalAccount) -> None:
    from tests.support.settings import changed

    app = create_app(changed(settings, server={"public_url": "https://engram.example"}))
    async with AsyncTestClient(app=app, base_url="https://engram.example", timeout=60) as c:
        c.follow_redirects = False
        r = await open_link(c, await sign_in_link(c, wallet))
        assert r.status_code == 303
        assert "secure" in set_cookie(r).lower()


async def test_the_siwx_header_of_a_link_is_single_use(
    browser: AsyncTestClient, wallet: LocalAccount
) -> None:
    header = await siwx_header(browser, wallet)
    assert (await browser.post("/console/auth/links", headers=header)).status_code == 200
    assert (await browser.post("/console/auth/links", headers=header)).status_code == 401


async def test_a_new_sign_in_gets_a_new_session(browser: AsyncTestClient) -> None:
    someone = Account.create()
    first = await sign_in(browser, someone)
    token = browser.cookies[COOKIE_NAME]
    second = await sign_in(browser, someone)
    assert browser.cookies[COOKIE_NAME] != token and first != second
    assert await csrf_of(browser) == second


async def test_unknown_fields_are_ignored_at_sign_in(
    browser: AsyncTestClient, wallet: LocalAccount
) -> None:
    from eth_account.messages import encode_defunct

    extra = {"client_version": "1.9.0", "x_unknown": {"nested": [1]}}
    r = await browser.post("/console/auth/challenge", json={"address": wallet.address, **extra},
                           headers=origin(browser))  # fmt: skip
    assert r.status_code == 200, r.text
    body = r.json()
    signature = wallet.sign_message(encode_defunct(text=body["message"])).signature.hex()
    r = await browser.post(
        "/console/auth/signin",
        json={"challenge": body["challenge"], "address": wallet.address,
              "signature": "0x" + signature.removeprefix("0x"), **extra},
        headers=origin(browser),
    )  # fmt: skip
    assert r.status_code == 200, r.text


async def test_the_sign_in_page_says_when_the_scripts_are_missing(
    browser: AsyncTestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    from app.console import pages

    assert "make console" not in (await browser.get("/console/signin")).text
    monkeypatch.setattr(pages, "scripts_built", lambda: False)
    page = (await browser.get("/console/signin")).text
    assert "make console" in page and "one-time link" in page


async def test_console_pages_count_against_the_wallets_rate_limit(
    make_app,
    wallet: LocalAccount,  # type: ignore[no-untyped-def]
) -> None:
    async with AsyncTestClient(app=make_app(limits={"rate_limit_per_minute": 4}), timeout=60) as c:
        c.follow_redirects = False
        link = await sign_in_link(c, wallet)
        assert (await open_link(c, link)).status_code == 303
        answers = [(await c.get("/console/memories")).status_code for _ in range(5)]
        assert answers.count(429) >= 1 and answers[0] == 200, answers
        # its stylesheet and scripts are never limited
        assert (await c.get("/console/static/console.css")).status_code == 200


async def test_loading_a_link_spends_nothing_and_only_its_own_page_spends_it(
    browser: AsyncTestClient, wallet: LocalAccount
) -> None:
    link = await sign_in_link(browser, wallet)
    for _ in range(3):  # a chat app previewing the link, say
        assert (await browser.get(link)).status_code == 200
    assert "set-cookie" not in (await browser.get(link)).headers
    assert (await browser.post(link)).status_code == 403  # no Origin: not from its page
    foreign = await browser.post(link, headers={"origin": "https://evil.example"})
    assert foreign.status_code == 403
    r = await open_link(browser, link)
    assert r.status_code == 303 and r.headers["location"] == "/console/memories"
