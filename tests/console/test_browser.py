"""The console in a real browser (Playwright driving Debian's chromium), against Engram served
over HTTP: both sign-ins, sign-out and expiry; the memories list, filters, search with its
signals, edit, pin, delete, history and graph; the usage charts from real calls; markup in
content shown as text with no script run; CSRF and a foreign page refused; a second wallet that
sees nothing of the first's; a sign-in link for another wallet that asks before it switches;
and every request the pages make going to Engram itself.

A screenshot of the search view goes to $ENGRAM_CONSOLE_SCREENSHOTS when set (the README's
picture is made so: `make screenshots`)."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import asyncpg
import httpx
import pytest
from eth_account import Account
from eth_account.signers.local import LocalAccount
from playwright.sync_api import Browser, BrowserContext, Page, expect

from app.console.service import token_hash
from tests.support.api import auth
from tests.support.browser import Watched, browser, watch, with_wallet
from tests.support.console import distinct_sentences
from tests.support.team import as_agent

SCREENSHOTS = "ENGRAM_CONSOLE_SCREENSHOTS"
XSS = '<img src=x onerror="window.__xss=1"><script>window.__xss=2</script>'


@pytest.fixture(scope="module")
def chrome() -> Iterator[Browser]:
    with browser() as b:
        yield b


@pytest.fixture
def context(chrome: Browser) -> Iterator[BrowserContext]:
    ctx = chrome.new_context()
    ctx.set_default_timeout(30_000)
    try:
        yield ctx
    finally:
        ctx.close()


def store(url: str, account: LocalAccount, content: str, **fields: object) -> str:
    r = httpx.post(f"{url}/v1/store", json={"content": content, **fields}, headers=auth(account),
                   timeout=60)  # fmt: skip
    assert r.status_code == 201, r.text
    return str(r.json()["id"])


def link_for(url: str, account: LocalAccount) -> str:
    """`engram console --print-url`, run as a user would, with the key in the environment."""
    engram = Path(sys.executable).with_name("engram")
    done = subprocess.run(
        [str(engram), "console", "--url", url, "--print-url"],
        env={**os.environ, "ENGRAM_PRIVATE_KEY": account.key.hex()},
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    link = done.stdout.strip()
    assert link.startswith(f"{url}/console/auth/link/"), link
    return link


def signed_in_page(
    context: BrowserContext, url: str, account: LocalAccount
) -> tuple[Page, Watched]:
    page = context.new_page()
    seen = watch(page)
    page.goto(link_for(url, account))
    expect(page).to_have_url(f"{url}/console/memories")
    return page, seen


def assert_only_engram(seen: Watched, url: str, expected: str | None = None) -> None:
    others = [u for u in seen.requests if not u.startswith(url + "/")]
    assert not others, f"requests beyond Engram: {others}"
    # CSP refusals and script errors show up here (`expected`: a problem the test caused)
    problems = [p for p in seen.problems if expected is None or expected not in p]
    assert not problems, problems


def test_a_browser_wallet_signs_in_and_signs_out(
    context: BrowserContext, engram_url: str, wallet: LocalAccount
) -> None:
    with_wallet(context, wallet)
    page = context.new_page()
    seen = watch(page)
    page.goto(f"{engram_url}/console")
    expect(page).to_have_url(f"{engram_url}/console/signin")
    page.get_by_role("button", name="Sign in with a browser wallet").click()
    expect(page).to_have_url(f"{engram_url}/console/memories")
    expect(page.locator(".wallet")).to_have_attribute("title", wallet.address.lower())
    page.get_by_role("button", name="Sign out").click()
    expect(page).to_have_url(f"{engram_url}/console/signin")
    page.goto(f"{engram_url}/console/memories")
    expect(page).to_have_url(f"{engram_url}/console/signin")
    assert_only_engram(seen, engram_url)


def test_the_one_time_link_signs_in_once_and_sessions_expire(
    chrome: Browser, context: BrowserContext, engram_url: str, database_url: str
) -> None:
    account = Account.create()
    store(engram_url, account, "Linked in from the command line")
    link = link_for(engram_url, account)
    page = context.new_page()
    seen = watch(page)
    page.goto(link)
    expect(page).to_have_url(f"{engram_url}/console/memories")
    expect(page.locator("table.memories")).to_contain_text("Linked in from the command line")
    other = chrome.new_context()
    try:
        again = other.new_page()
        again.goto(link)
        expect(again.locator(".error")).to_contain_text("used already or has expired")
    finally:
        other.close()
    cookie = next(c for c in context.cookies() if c["name"] == "engram_console")
    assert cookie["httpOnly"] and cookie["sameSite"] == "Strict"
    with ThreadPoolExecutor(1) as pool:  # Playwright's sync API holds this thread's loop
        pool.submit(asyncio.run, _expire(database_url, cookie["value"])).result()
    page.reload()
    expect(page).to_have_url(f"{engram_url}/console/signin")
    assert_only_engram(seen, engram_url)


def test_a_link_for_another_wallet_asks_before_it_switches(
    context: BrowserContext, engram_url: str
) -> None:
    """The link's script posts it at once; signed in as another wallet, the page that comes back
    asks, and only its button switches."""
    mine, theirs = Account.create(), Account.create()
    page, seen = signed_in_page(context, engram_url, mine)
    wallet = page.locator(".wallet")
    theirs_link = link_for(engram_url, theirs)
    page.goto(theirs_link)
    expect(page.locator("#link-wallet")).to_have_text(theirs.address.lower())
    expect(page.locator("#current-wallet")).to_have_text(mine.address.lower())
    expect(wallet).to_have_attribute("title", mine.address.lower())
    page.locator("#stay").click()
    expect(page).to_have_url(f"{engram_url}/console/memories")
    expect(wallet).to_have_attribute("title", mine.address.lower())
    page.goto(theirs_link)  # unspent: it asks again
    page.get_by_role("button", name=re.compile("^Switch to")).click()
    expect(page).to_have_url(f"{engram_url}/console/memories")
    expect(wallet).to_have_attribute("title", theirs.address.lower())
    assert_only_engram(seen, engram_url)


async def _expire(database_url: str, token: str) -> None:
    conn = await asyncpg.connect(database_url)
    try:
        await conn.execute(
            "UPDATE console_sessions SET expires_at = now() - interval '1 second'"
            " WHERE token_hash = $1",
            token_hash(token),
        )
    finally:
        await conn.close()


def test_memories_list_filter_search_edit_history_graph_and_delete(
    context: BrowserContext, engram_url: str, wallet: LocalAccount, tmp_path: Path
) -> None:
    editor = store(engram_url, wallet, "The user prefers dark mode in every editor",
                   namespace="prefs", memory_type="preference", tags=["ui"], importance=0.8)  # fmt: skip
    theme = store(engram_url, wallet, "The terminal uses the Solarized colour theme",
                  namespace="prefs", memory_type="preference", tags=["ui"])  # fmt: skip
    store(engram_url, wallet, "Invoices are due on the first of each month", namespace="work",
          memory_type="project", tags=["finance"])  # fmt: skip
    for sentence in distinct_sentences(5):
        store(engram_url, wallet, sentence, namespace="misc")
    r = httpx.post(f"{engram_url}/v1/memories/{editor}/relations", headers=auth(wallet),
                   json={"target_id": theme, "relation_type": "related_to"}, timeout=60)  # fmt: skip
    assert r.status_code == 201, r.text
    page, seen = signed_in_page(context, engram_url, wallet)
    expect(page.locator("#total")).to_have_text("8")

    page.get_by_label("Namespace").select_option("prefs")
    page.get_by_role("button", name="Apply").click()
    expect(page.locator("#total")).to_have_text("2")
    page.get_by_label("Namespace").select_option("")
    page.get_by_label("Tags").fill("finance")
    page.get_by_role("button", name="Apply").click()
    expect(page.locator("tr.memory")).to_have_count(1)
    expect(page.locator("tr.memory")).to_contain_text("Invoices")
    page.get_by_label("Tags").fill("")

    search = page.get_by_role("searchbox", name="Search")
    search.fill("what colour scheme does the editor use")
    search.press("Enter")
    first = page.locator("li.result").first
    expect(first).to_contain_text("dark mode")
    meters = first.locator("meter")
    expect(meters).to_have_count(4)
    assert float(meters.nth(0).get_attribute("value") or 0) > 0  # the vector signal
    assert re.fullmatch(r"score \d\.\d{3}", first.locator(".score").inner_text())
    shot = tmp_path / "console-search.png"
    page.screenshot(path=str(shot), full_page=True)
    if os.environ.get(SCREENSHOTS):
        shutil.copy(shot, Path(os.environ[SCREENSHOTS]) / "console-search.png")

    first.locator("a.content").click()
    expect(page).to_have_url(f"{engram_url}/console/memories/{editor}")
    graph = page.locator("#graph")
    expect(graph).to_have_attribute("data-ready", "2")  # Cytoscape drew both memories
    expect(graph.locator("canvas").first).to_be_visible()
    page.get_by_label("Content").fill("The user prefers dark mode in every editor and terminal")
    page.get_by_label("Importance").fill("0.95")
    page.get_by_role("button", name="Save").click()
    expect(page.locator("#memory-content")).to_have_text(
        "The user prefers dark mode in every editor and terminal"
    )
    history = page.locator("#history li.change")
    expect(history).to_have_count(2)
    expect(history.first).to_contain_text("update")
    expect(history.first.locator("del").first).to_contain_text("every editor")
    page.get_by_role("button", name="Pin").click()
    expect(page.locator("#pinned")).to_have_text("yes")
    if os.environ.get(SCREENSHOTS):
        page.screenshot(path=str(Path(os.environ[SCREENSHOTS]) / "console-memory.png"),
                        full_page=True)  # fmt: skip

    page.get_by_role("link", name="Delete…").click()
    page.get_by_role("button", name="Delete").click()
    expect(page).to_have_url(f"{engram_url}/console/memories")
    expect(page.locator("#total")).to_have_text("7")
    gone = httpx.get(f"{engram_url}/v1/memories/{editor}", headers=auth(wallet), timeout=60)
    assert gone.status_code == 404
    assert_only_engram(seen, engram_url)


def test_the_usage_charts_show_real_calls(
    context: BrowserContext, engram_url: str, wallet: LocalAccount
) -> None:
    store(engram_url, wallet, "Counted once")
    store(engram_url, wallet, "Counted twice, another call")
    r = httpx.post(f"{engram_url}/v1/recall", json={"query": "counted"}, headers=auth(wallet),
                   timeout=60)  # fmt: skip
    assert r.status_code == 200, r.text
    page, seen = signed_in_page(context, engram_url, wallet)
    page.get_by_role("link", name="Usage").click()
    expect(page).to_have_url(f"{engram_url}/console/usage")
    expect(page.locator("#calls-total")).to_have_text("3")
    expect(page.locator("#free-left")).to_have_text("97")
    expect(page.locator("#calls-chart")).to_have_attribute("data-total", "3")
    expect(page.locator("#paid-chart")).to_have_attribute("data-total", "0")
    assert page.locator("#calls-chart").bounding_box()["height"] > 50  # type: ignore[index]
    expect(page.locator("table.receipts")).to_contain_text("No payments yet")
    assert_only_engram(seen, engram_url)


def test_markup_in_content_is_shown_as_text_and_never_run(
    context: BrowserContext, engram_url: str, wallet: LocalAccount
) -> None:
    hostile = store(engram_url, wallet, XSS, tags=["<b>bold</b>"])
    neighbour = store(engram_url, wallet, "A memory next to a hostile one")
    httpx.post(f"{engram_url}/v1/memories/{neighbour}/relations", headers=auth(wallet),
               json={"target_id": hostile, "relation_type": "related_to"}, timeout=60)  # fmt: skip
    page, seen = signed_in_page(context, engram_url, wallet)
    expect(page.locator(f'tr[data-id="{hostile}"] td.content')).to_have_text(XSS)
    for path in (f"/console/memories/{hostile}", f"/console/memories/{neighbour}",
                 "/console/memories?q=window+xss"):  # fmt: skip
        page.goto(engram_url + path)
        page.wait_for_load_state("networkidle")
        assert page.evaluate("window.__xss") is None, path
    page.goto(f"{engram_url}/console/memories/{hostile}")
    expect(page.locator("#memory-content")).to_have_text(XSS)
    expect(page.locator(".facts .tag")).to_have_text("<b>bold</b>")
    assert page.locator("#memory-content img, #memory-content script").count() == 0
    assert not seen.dialogs
    assert_only_engram(seen, engram_url)


def test_csrf_and_a_foreign_page_are_refused(
    context: BrowserContext, engram_url: str, wallet: LocalAccount
) -> None:
    memory = store(engram_url, wallet, "Only its owner's console may delete this")
    page, _ = signed_in_page(context, engram_url, wallet)
    status = page.evaluate(
        """async (id) => (await fetch(`/console/memories/${id}/delete`, {method: "POST",
             headers: {"content-type": "application/x-www-form-urlencoded"}, body: ""})).status""",
        memory,
    )
    assert status == 403  # the page's own origin, the cookie, but no CSRF token
    # a page on another origin (localhost is not 127.0.0.1) posts a form at the console
    port = engram_url.rsplit(":", 1)[1]
    attacker = context.new_page()
    attacker.goto(f"http://localhost:{port}/health")
    with attacker.expect_navigation() as landed:
        attacker.evaluate(
            """([target]) => { const f = document.createElement("form"); f.method = "POST";
                 f.action = target; document.body.appendChild(f); f.submit(); }""",
            [f"{engram_url}/console/memories/{memory}/delete"],
        )
    response = landed.value
    # SameSite=Strict keeps the cookie home (401: no session), else its Origin is refused (403)
    assert response is not None and response.status in (401, 403), response
    still = httpx.get(f"{engram_url}/v1/memories/{memory}", headers=auth(wallet), timeout=60)
    assert still.status_code == 200
    page.reload()
    expect(page).to_have_url(f"{engram_url}/console/memories")  # still signed in


def test_a_second_wallet_sees_nothing_of_the_first(
    chrome: Browser, context: BrowserContext, engram_url: str, wallet: LocalAccount,
    other_wallet: LocalAccount,
) -> None:  # fmt: skip
    secret = store(engram_url, wallet, "First wallet's secret: the alarm code is 8642")
    first, _ = signed_in_page(context, engram_url, wallet)
    expect(first.locator("table.memories")).to_contain_text("8642")
    second_context = chrome.new_context()
    try:
        second, seen = signed_in_page(second_context, engram_url, other_wallet)
        expect(second.locator("#total")).to_have_text("0")
        second.get_by_role("searchbox", name="Search").fill("alarm code")
        second.get_by_role("searchbox", name="Search").press("Enter")
        expect(second.locator("li.empty")).to_be_visible()
        response = second.goto(f"{engram_url}/console/memories/{secret}")
        assert response is not None and response.status == 404
        assert "8642" not in second.content()
        assert_only_engram(seen, engram_url, expected="status of 404")
    finally:
        second_context.close()


def test_engram_console_opens_the_link_in_the_browser(
    context: BrowserContext, engram_url: str, tmp_path: Path
) -> None:
    """Without --print-url, `engram console` hands the link to the browser ($BROWSER here: a
    script that writes down what it was given, as a desktop would open it)."""
    account = Account.create()
    opened = tmp_path / "opened.txt"
    browser_cmd = tmp_path / "browser.sh"
    browser_cmd.write_text(f'#!/bin/sh\nprintf "%s" "$1" > {opened}\n')
    browser_cmd.chmod(0o755)
    engram = Path(sys.executable).with_name("engram")
    done = subprocess.run(
        [str(engram), "console", "--url", engram_url],
        env={**os.environ, "ENGRAM_PRIVATE_KEY": account.key.hex(), "BROWSER": str(browser_cmd)},
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "opened the console" in done.stdout
    link = opened.read_text()
    assert link.startswith(f"{engram_url}/console/auth/link/") and link not in done.stdout
    page = context.new_page()
    page.goto(link)
    expect(page).to_have_url(f"{engram_url}/console/memories")


def test_the_team_page_adds_an_agent_key_signed_by_the_browser_wallet(
    context: BrowserContext, engram_url: str, wallet: LocalAccount
) -> None:
    store(engram_url, wallet, "A note the new agent key may read")
    agent = Account.create()
    with_wallet(context, wallet)
    page = context.new_page()
    seen = watch(page)
    page.goto(f"{engram_url}/console/signin")
    page.get_by_role("button", name="Sign in with a browser wallet").click()
    expect(page).to_have_url(f"{engram_url}/console/memories")
    page.get_by_role("link", name="Team").click()
    page.get_by_label("Agent wallet").fill(agent.address)
    page.get_by_role("button", name="Sign and add").click()
    expect(page.locator("#agent-keys")).to_contain_text(agent.address.lower())
    r = httpx.get(f"{engram_url}/v1/memories", headers=as_agent(agent, wallet), timeout=60)
    assert r.status_code == 200 and r.json()["memories"], r.text
    page.locator(f'tr.agent:has-text("{agent.address.lower()}")').get_by_role(
        "button", name="Revoke"
    ).click()
    expect(page.locator("#agent-keys")).not_to_contain_text(agent.address.lower())
    assert_only_engram(seen, engram_url)
