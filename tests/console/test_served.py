"""The console through a real `engram serve` process: a sign-in link never moves a signed-in
browser to another wallet without asking, and no console answer but a static file is kept by a
cache."""

from __future__ import annotations

import re
import uuid
from collections.abc import AsyncIterator

import httpx
import pytest
from eth_account import Account
from eth_account.signers.local import LocalAccount

from app.asgi import create_app
from app.config import DatabaseSettings, Settings
from app.console.middleware import COOKIE_NAME, STATIC_PATH
from tests.support.api import auth, store_memory
from tests.support.console import csrf_of, open_link, origin, sign_in, sign_in_link

SWITCH_FORM = 'id="switch-form"'
HIDDEN_FIELD = re.compile(r'<input type="hidden" name="([a-z_]+)" value="([^"]*)">')


@pytest.fixture
async def browser(server: str) -> AsyncIterator[httpx.AsyncClient]:
    """One browser (one cookie jar) against the module's server, redirects not followed."""
    async with httpx.AsyncClient(base_url=server, timeout=60) as client:
        client.follow_redirects = False
        yield client


async def signed_in_wallet(browser: httpx.AsyncClient) -> str | None:
    """The wallet the browser's console session is for, as its pages show it."""
    r = await browser.get("/console/memories")
    found = re.search(r'<span class="wallet" title="([^"]+)"', r.text)
    return found.group(1) if r.status_code == 200 and found else None


# ---- a sign-in link for another wallet asks first ---------------------------------------------


async def test_a_link_for_another_wallet_asks_before_it_switches(
    browser: httpx.AsyncClient,
) -> None:
    mine, theirs = Account.create(), Account.create()
    csrf = await sign_in(browser, mine)
    cookie = browser.cookies[COOKIE_NAME]
    link = await sign_in_link(browser, theirs)  # sent by someone else, opened here

    # the link's page posts it at once, with no confirmation: the answer asks, nothing moves
    asked = await open_link(browser, link)
    assert asked.status_code == 200 and SWITCH_FORM in asked.text, asked.text
    assert mine.address.lower() in asked.text and theirs.address.lower() in asked.text
    assert "set-cookie" not in asked.headers and "<script" not in asked.text
    assert browser.cookies[COOKIE_NAME] == cookie
    assert await signed_in_wallet(browser) == mine.address.lower()
    assert await csrf_of(browser) == csrf  # the same session, untouched

    # the server holds to it whatever is posted without the page's own confirmation
    for form in ({}, {"confirm": "switch"}, {"confirm": "switch", "csrf_token": "wrong" + csrf},
                 {"csrf_token": csrf}, {"confirm": "yes", "csrf_token": csrf}):  # fmt: skip
        r = await browser.post(link, data=form, headers=origin(browser))
        assert r.status_code == 200 and SWITCH_FORM in r.text, (form, r.status_code)
        assert "set-cookie" not in r.headers, form
    assert await signed_in_wallet(browser) == mine.address.lower()

    # the link is still unspent: the page's own button switches, and ends the old session
    form = dict(HIDDEN_FIELD.findall(asked.text))
    assert form == {"csrf_token": csrf, "confirm": "switch"}, form
    r = await browser.post(link, data=form, headers=origin(browser))
    assert r.status_code == 303 and r.headers["location"] == "/console/memories", r.text
    assert browser.cookies[COOKIE_NAME] != cookie
    assert await signed_in_wallet(browser) == theirs.address.lower()
    async with httpx.AsyncClient(base_url=str(browser.base_url), cookies={COOKIE_NAME: cookie},
                                 timeout=60) as old:  # fmt: skip
        r = await old.get("/console/memories")
        assert r.status_code in (302, 303) and r.headers["location"] == "/console/signin"
    # spent: the link works once
    again = await open_link(browser, link)
    assert again.status_code == 401 and "used already" in again.text


async def test_staying_keeps_the_session_and_a_confirmation_posted_elsewhere_is_refused(
    browser: httpx.AsyncClient,
) -> None:
    mine, theirs = Account.create(), Account.create()
    await sign_in(browser, mine)
    link = await sign_in_link(browser, theirs)
    asked = await open_link(browser, link)
    form = dict(HIDDEN_FIELD.findall(asked.text))
    assert 'href="/console/memories" id="stay"' in asked.text
    # the confirmation needs Engram's own page: no Origin, or another site's, is refused
    assert (await browser.post(link, data=form)).status_code == 403
    r = await browser.post(link, data=form, headers={"origin": "https://evil.example"})
    assert r.status_code == 403
    assert await signed_in_wallet(browser) == mine.address.lower()
    # the same browser, signed out: the link signs it in as before, no question asked
    r = await browser.post("/console/signout", data={"csrf_token": form["csrf_token"]},
                           headers=origin(browser))  # fmt: skip
    assert r.status_code == 303
    r = await open_link(browser, link)
    assert r.status_code == 303 and r.headers["location"] == "/console/memories", r.text
    assert await signed_in_wallet(browser) == theirs.address.lower()


async def test_a_link_for_the_same_wallet_signs_in_as_before(browser: httpx.AsyncClient) -> None:
    mine = Account.create()
    await sign_in(browser, mine)
    cookie = browser.cookies[COOKIE_NAME]
    r = await open_link(browser, await sign_in_link(browser, mine))
    assert r.status_code == 303 and r.headers["location"] == "/console/memories", r.text
    assert browser.cookies[COOKIE_NAME] != cookie  # a new session, as a new sign-in gets
    assert await signed_in_wallet(browser) == mine.address.lower()


# ---- Cache-Control: no-store on every console answer but its static files --------------------


def console_routes() -> list[tuple[str, str]]:
    """(method, path template) of every /console route, from the route table."""
    app = create_app(Settings(database=DatabaseSettings(url="postgresql://unused/unused")))
    return sorted(
        (method, route.path)
        for route in app.routes
        if route.path.startswith("/console")
        for method in route.methods
    )


def filled(template: str, values: dict[str, str]) -> str:
    return re.sub(r"\{(\w+):\w+\}", lambda m: values[m.group(1)], template)


async def test_every_console_answer_but_a_static_file_is_no_store(
    browser: httpx.AsyncClient, wallet: LocalAccount
) -> None:
    """Every route and method, signed out and signed in, whatever it answers (page, JSON,
    redirect, error): `Cache-Control: no-store`. The static files may be cached."""
    routes = console_routes()
    assert len({path for _, path in routes}) >= 15, routes  # the walk found the console
    memory = (await store_memory(browser, wallet, "A memory no cache keeps"))["id"]
    link = await sign_in_link(browser, wallet)
    values = {"memory_id": memory, "grant_id": str(uuid.uuid4()), "key_id": str(uuid.uuid4()),
              "token": link.rsplit("/", 1)[1], "file_path": "console.css"}  # fmt: skip
    # sign-out and the link's POST change the session: they go last
    last = {"/console/signout", "/console/auth/link/{token:str}"}
    ordered = sorted(routes, key=lambda r: (r[1] in last and r[0] == "POST", r))
    checked = 0
    for signed_in in (False, True):
        csrf = await sign_in(browser, wallet) if signed_in else ""
        if signed_in:
            values["token"] = (await sign_in_link(browser, wallet)).rsplit("/", 1)[1]
        for method, template in ordered:
            path = filled(template, values)
            headers = {**origin(browser), "x-csrf-token": csrf}
            body = {"data": {"csrf_token": csrf}} if method == "POST" else {}
            if template.startswith("/console/team/agents") and method == "POST":
                body = {"json": {"agent": Account.create().address, "scopes": ["read"]}}
            r = await browser.request(method, path, headers=headers, **body)
            assert r.status_code < 500, (method, path, r.status_code, r.text[:300])
            if template.startswith(STATIC_PATH):
                assert "no-store" not in r.headers.get("cache-control", ""), (method, path)
            else:
                assert r.headers.get("cache-control") == "no-store", (method, path, r.status_code)
            checked += 1
        # and a console path no route has
        r = await browser.get("/console/no-such-page")
        assert r.status_code == 404 and r.headers["cache-control"] == "no-store"
    assert checked >= 40
    static = await browser.get(f"{STATIC_PATH}/console.css")
    assert static.status_code == 200 and "no-store" not in static.headers.get("cache-control", "")
    # the REST API is as it was (its paid answers have their own private, no-store)
    r = await browser.get("/v1/memories", headers=auth(wallet))
    assert r.status_code == 200 and "cache-control" not in r.headers
