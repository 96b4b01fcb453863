"""The console's pages over HTTP: what they show, the changes they make, and what they refuse
(CSRF, a foreign Origin, another wallet's data, markup in content)."""

from __future__ import annotations

import re
import uuid

from eth_account import Account
from eth_account.signers.local import LocalAccount
from litestar import Litestar
from litestar.testing import AsyncTestClient

from app.console.middleware import COOKIE_NAME, CSP
from tests.support.api import auth, store_memory
from tests.support.console import distinct_sentences, origin, sign_in

WORK_FACTS = (
    "the deploy pipeline runs on Tuesdays",
    "invoices go to the finance mailbox",
    "the staging database is rebuilt nightly",
)
XSS = '<script>alert("xss")</script><img src=x onerror=alert(1)>'


async def test_the_list_filters_sorts_and_pages(
    browser: AsyncTestClient, wallet: LocalAccount
) -> None:
    for i, fact in enumerate(WORK_FACTS):
        await store_memory(browser, wallet, f"Work fact number {i}: {fact}",
                           namespace="work", memory_type="project", tags=["ops"])  # fmt: skip
    await store_memory(browser, wallet, "Home fact: the cat is called Miso", namespace="home",
                       memory_type="observation", tags=["pets"], pinned=True)  # fmt: skip
    await sign_in(browser, wallet)
    everything = (await browser.get("/console/memories")).text
    assert '<span id="total">4</span>' in everything
    work = (await browser.get("/console/memories?namespace=work")).text
    assert '<span id="total">3</span>' in work and "Miso" not in work
    pets = (await browser.get("/console/memories?tags=pets")).text
    assert "Miso" in pets and "deploy" not in pets
    pinned = (await browser.get("/console/memories?pinned=true")).text
    assert '<span id="total">1</span>' in pinned and "Miso" in pinned
    typed = await browser.get("/console/memories?memory_type=project&sort=created_at&order=asc")
    rows = re.findall(r"Work fact number (\d)", typed.text)
    assert rows == ["0", "1", "2"]
    for bad in ("memory_type=nope", "pinned=maybe", "sort=content", "order=up", "page=0"):
        r = await browser.get(f"/console/memories?{bad}")
        assert r.status_code in (400, 422), bad


async def test_pages_reach_any_size(browser: AsyncTestClient, wallet: LocalAccount) -> None:
    r = await browser.post(
        "/v1/store/batch",
        json={"memories": [{"content": s} for s in distinct_sentences(60)]},
        headers=auth(wallet),
    )
    assert r.status_code == 201, r.text
    await sign_in(browser, wallet)
    first = (await browser.get("/console/memories")).text
    assert "page 1 of 2" in first and 'rel="next"' in first
    second = (await browser.get("/console/memories?page=2")).text
    assert second.count('class="memory"') == 10 and 'rel="prev"' in second
    past = (await browser.get("/console/memories?page=9")).text
    assert past.count('class="memory"') == 0


async def test_search_runs_recall_and_shows_the_four_signals(
    browser: AsyncTestClient, wallet: LocalAccount
) -> None:
    await store_memory(browser, wallet, "The user prefers dark mode in every editor")
    await store_memory(browser, wallet, "Invoices are due on the first of the month")
    await sign_in(browser, wallet)
    page = (await browser.get("/console/memories?q=which+theme+does+the+editor+use")).text
    first = page.split('class="memory result"')[1]
    assert "dark mode" in first
    for signal in ("vector", "keyword", "recency", "importance"):
        assert f'<meter class="signal-{signal}"' in first
    assert re.search(r"score \d\.\d{3}", first)


async def test_edit_pin_and_delete_are_recorded_in_the_history(
    browser: AsyncTestClient, wallet: LocalAccount
) -> None:
    memory = (await store_memory(browser, wallet, "The office is on the third floor"))["id"]
    csrf = await sign_in(browser, wallet)
    form = {"csrf_token": csrf, "content": "The office is on the fourth floor",
            "importance": "0.9", "memory_type": "observation", "namespace": "default",
            "tags": "office, floors"}  # fmt: skip
    r = await browser.post(f"/console/memories/{memory}", data=form, headers=origin(browser))
    assert r.status_code == 303 and r.headers["location"] == f"/console/memories/{memory}"
    pin = {"csrf_token": csrf, "pinned": "true"}
    assert (await browser.post(f"/console/memories/{memory}/pin", data=pin,
                               headers=origin(browser))).status_code == 303  # fmt: skip
    got = (await browser.get(f"/v1/memories/{memory}", headers=auth(wallet))).json()
    assert got["content"] == "The office is on the fourth floor" and got["pinned"] is True
    assert got["importance"] == 0.9 and got["tags"] == ["office", "floors"]
    detail = (await browser.get(f"/console/memories/{memory}")).text
    assert 'id="history"' in detail and detail.count('class="change change-') == 3
    assert "third floor" in detail.split('id="history"')[1]  # the edit's before value
    confirm = await browser.get(f"/console/memories/{memory}/delete")
    assert confirm.status_code == 200 and 'id="confirm-delete"' in confirm.text
    r = await browser.post(f"/console/memories/{memory}/delete", data={"csrf_token": csrf},
                           headers=origin(browser))  # fmt: skip
    assert r.status_code == 303 and r.headers["location"] == "/console/memories"
    assert (await browser.get(f"/v1/memories/{memory}", headers=auth(wallet))).status_code == 404


async def test_a_bad_edit_is_refused_and_changes_nothing(
    browser: AsyncTestClient, wallet: LocalAccount
) -> None:
    memory = (await store_memory(browser, wallet, "Unchanged content"))["id"]
    csrf = await sign_in(browser, wallet)
    for importance, content in (("2", "x"), ("nan", "x"), ("abc", "x"), ("0.5", "")):
        form = {"csrf_token": csrf, "content": content, "importance": importance,
                "memory_type": "general", "namespace": "default"}  # fmt: skip
        r = await browser.post(f"/console/memories/{memory}", data=form, headers=origin(browser))
        assert r.status_code == 422, (importance, content, r.status_code)
        assert 'class="error"' in r.text
    got = (await browser.get(f"/v1/memories/{memory}", headers=auth(wallet))).json()
    assert got["content"] == "Unchanged content" and got["version"] == 1


async def test_the_graph_view_carries_the_relations(
    browser: AsyncTestClient, wallet: LocalAccount
) -> None:
    a = (await store_memory(browser, wallet, "Alice leads the platform team"))["id"]
    b = (await store_memory(browser, wallet, "The platform team owns the deploy pipeline"))["id"]
    r = await browser.post(f"/v1/memories/{a}/relations", headers=auth(wallet),
                           json={"target_id": b, "relation_type": "related_to"})  # fmt: skip
    assert r.status_code == 201, r.text
    await sign_in(browser, wallet)
    detail = (await browser.get(f"/console/memories/{a}")).text
    assert 'id="graph"' in detail and f'href="/console/memories/{b}"' in detail
    data = detail.split('id="graph-data">', 1)[1].split("</script>", 1)[0]
    assert b in data and "related_to" in data


async def test_content_is_text_never_markup(browser: AsyncTestClient, wallet: LocalAccount) -> None:
    memory = (await store_memory(browser, wallet, XSS, tags=["<b>tag</b>"]))["id"]
    a = (await store_memory(browser, wallet, "A neighbour for the graph"))["id"]
    await browser.post(f"/v1/memories/{a}/relations", headers=auth(wallet),
                       json={"target_id": memory, "relation_type": "related_to"})  # fmt: skip
    await sign_in(browser, wallet)
    for path in ("/console/memories", f"/console/memories/{memory}", f"/console/memories/{a}",
                 "/console/memories?q=alert+xss"):  # fmt: skip
        page = (await browser.get(path)).text
        assert "<script>alert" not in page and "<img src=x" not in page, path
        assert "<b>tag</b>" not in page, path
    detail = (await browser.get(f"/console/memories/{a}")).text
    graph = detail.split('id="graph-data">', 1)[1].split("</script>", 1)[0]
    assert "<" not in graph and "\\u003cscript\\u003e" in graph


async def test_every_page_has_a_csp_without_unsafe_inline(
    browser: AsyncTestClient, wallet: LocalAccount
) -> None:
    await sign_in(browser, wallet)
    for path in ("/console/signin", "/console/memories", "/console/usage",
                 "/console/static/console.css", "/console/static/dist/memory.js"):  # fmt: skip
        r = await browser.get(path)
        assert r.status_code in (200, 302), path
        assert r.headers["content-security-policy"] == CSP, path
    assert "script-src 'self'" in CSP and "unsafe-inline" not in CSP
    assert "<script>" not in (await browser.get("/console/memories")).text


async def unsafe_routes(browser: AsyncTestClient, wallet: LocalAccount) -> dict[str, dict]:
    memory = (await store_memory(browser, wallet, "Guarded by CSRF"))["id"]
    return {
        f"/console/memories/{memory}": {"content": "changed", "importance": "0.1",
                                        "memory_type": "general", "namespace": "default"},
        f"/console/memories/{memory}/pin": {"pinned": "true"},
        f"/console/memories/{memory}/approve": {},
        f"/console/memories/{memory}/delete": {},
        "/console/team/grants": {"grantee": Account.create().address, "namespace": "x",
                                 "access": "read"},
        f"/console/team/grants/{uuid.uuid4()}/revoke": {},
        f"/console/team/agents/{uuid.uuid4()}/revoke": {},
        "/console/signout": {},
    }  # fmt: skip


# The console's JSON routes that change state: a body for each (the agent's address given)
JSON_ROUTES = {
    "/console/team/agents/message": lambda agent: {"agent": agent, "scopes": ["read"]},
    "/console/team/agents": lambda agent: {"agent": agent, "scopes": ["read"],
                                           "nonce": "n" * 16, "signature": "0x" + "1" * 130,
                                           "issued_at": "2026-12-06T00:00:00Z"},
}  # fmt: skip


def console_posts(app: Litestar) -> set[str]:
    return {
        route.path
        for route in app.routes
        if route.path.startswith("/console") and not route.path.startswith("/console/auth")
        and ({"POST", "PUT", "PATCH", "DELETE"} & set(route.methods))
    }  # fmt: skip


async def test_every_state_change_needs_the_csrf_token(
    browser: AsyncTestClient, wallet: LocalAccount, console_app: Litestar
) -> None:
    routes = await unsafe_routes(browser, wallet)
    templated = {
        re.sub(r"/[0-9a-f-]{36}", f"/{{{name}:str}}", p)
        for p, name in zip(routes, ["memory_id"] * 4 + ["", "grant_id", "key_id", ""], strict=True)
    }
    templated |= set(JSON_ROUTES)
    assert templated == console_posts(console_app), "a console route is missing from this test"
    csrf = await sign_in(browser, wallet)
    for path, form in routes.items():
        for token in (None, "", "wrong" + csrf):
            data = form if token is None else {**form, "csrf_token": token}
            r = await browser.post(path, data=data, headers=origin(browser))
            assert r.status_code == 403, (path, token, r.status_code)
    # the scripts' JSON requests carry the token in a header
    agent = Account.create().address
    for path, body in JSON_ROUTES.items():
        for token in (None, "", "wrong" + csrf):
            headers = {**origin(browser), **({} if token is None else {"x-csrf-token": token})}
            r = await browser.post(path, json=body(agent), headers=headers)
            assert r.status_code == 403, (path, token, r.status_code)
    memory = next(iter(routes)).rsplit("/", 1)[1]
    got = (await browser.get(f"/v1/memories/{memory}", headers=auth(wallet))).json()
    assert got["content"] == "Guarded by CSRF" and got["pinned"] is False
    assert (await browser.get("/console/memories")).status_code == 200  # still signed in


async def test_the_cookie_with_a_foreign_origin_is_refused_on_every_route(
    browser: AsyncTestClient, wallet: LocalAccount
) -> None:
    routes = await unsafe_routes(browser, wallet)
    csrf = await sign_in(browser, wallet)
    evil = {"origin": "https://evil.example"}
    for path, form in routes.items():
        r = await browser.post(path, data={**form, "csrf_token": csrf}, headers=evil)
        assert r.status_code == 403 and "Origin" in r.text, path
    for method, path in (("GET", "/console/memories"), ("GET", "/v1/memories"),
                         ("POST", "/v1/store"), ("GET", "/v1/usage"), ("GET", "/health")):  # fmt: skip
        r = await browser.request(method, path, headers={**evil, **auth(wallet)},
                                  json={"content": "x"} if method == "POST" else None)  # fmt: skip
        assert r.status_code == 403, (method, path, r.status_code)
    # the same requests without the console's cookie: the REST API as ever
    cookie = browser.cookies[COOKIE_NAME]
    browser.cookies.clear()
    r = await browser.get("/v1/memories", headers={**evil, **auth(wallet)})
    assert r.status_code == 200
    browser.cookies.set(COOKIE_NAME, cookie)
    assert (await browser.get("/console/memories", headers=origin(browser))).status_code == 200


async def test_one_wallet_never_sees_another_wallets_data(
    browser: AsyncTestClient, wallet: LocalAccount, other_wallet: LocalAccount
) -> None:
    secret = await store_memory(browser, wallet, "Wallet A's secret: the vault code is 4321")
    await sign_in(browser, other_wallet)
    assert "4321" not in (await browser.get("/console/memories")).text
    assert "4321" not in (await browser.get("/console/memories?q=vault+code")).text
    r = await browser.get(f"/console/memories/{secret['id']}")
    assert r.status_code == 404 and "vault code" not in r.text
    csrf_page = await browser.get("/console/memories")
    csrf = re.search(r'name="csrf-token" content="([^"]+)"', csrf_page.text).group(1)  # type: ignore[union-attr]
    r = await browser.post(f"/console/memories/{secret['id']}/delete",
                           data={"csrf_token": csrf}, headers=origin(browser))  # fmt: skip
    assert r.status_code == 404
    assert (
        await browser.get(f"/v1/memories/{secret['id']}", headers=auth(wallet))
    ).status_code == 200
    usage = (await browser.get("/console/usage")).text
    assert wallet.address.lower() not in usage


async def test_unknown_fields_are_ignored(browser: AsyncTestClient, wallet: LocalAccount) -> None:
    memory = (await store_memory(browser, wallet, "Before an edit with extra fields"))["id"]
    csrf = await sign_in(browser, wallet)
    form = {"csrf_token": csrf, "content": "After an edit with extra fields", "importance": "0.4",
            "memory_type": "general", "namespace": "default", "client_version": "1.9.0",
            "x_unknown": "ignored"}  # fmt: skip
    r = await browser.post(f"/console/memories/{memory}", data=form, headers=origin(browser))
    assert r.status_code == 303, r.text
    got = (await browser.get(f"/v1/memories/{memory}", headers=auth(wallet))).json()
    assert got["content"] == "After an edit with extra fields" and "x_unknown" not in str(got)
