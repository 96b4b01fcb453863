"""The console's team page: the grants an owner gives (made and revoked here), the ones it
received, and its agent keys (revoked here)."""

from __future__ import annotations

from eth_account import Account
from eth_account.signers.local import LocalAccount
from litestar.testing import AsyncTestClient

from app.agents.service import sign_delegation
from tests.support.api import auth, store_memory
from tests.support.console import origin, sign_in
from tests.support.team import as_agent, as_grantee, delegate, grant


async def test_a_grant_made_in_the_console_reaches_the_namespace_until_revoked(
    browser: AsyncTestClient, wallet: LocalAccount, other_wallet: LocalAccount
) -> None:
    await store_memory(browser, wallet, "Shared plan: launch on Friday", namespace="launch")
    csrf = await sign_in(browser, wallet)
    form = {"csrf_token": csrf, "grantee": other_wallet.address, "namespace": "launch",
            "access": "read"}  # fmt: skip
    r = await browser.post("/console/team/grants", data=form, headers=origin(browser))
    assert r.status_code == 303 and r.headers["location"] == "/console/team"
    page = (await browser.get("/console/team")).text
    assert other_wallet.address.lower() in page.split('id="grants-given"')[1]
    shared = await browser.post("/v1/recall", json={"query": "launch", "namespace": "launch"},
                                headers=as_grantee(other_wallet, wallet))  # fmt: skip
    assert shared.status_code == 200 and shared.json()["memories"], shared.text
    grant_id = page.split('class="grant" data-id="', 1)[1].split('"', 1)[0]
    r = await browser.post(f"/console/team/grants/{grant_id}/revoke", data={"csrf_token": csrf},
                           headers=origin(browser))  # fmt: skip
    assert r.status_code == 303
    refused = await browser.post("/v1/recall", json={"query": "launch", "namespace": "launch"},
                                 headers=as_grantee(other_wallet, wallet))  # fmt: skip
    assert refused.status_code == 403


async def test_a_bad_grant_is_refused(browser: AsyncTestClient, wallet: LocalAccount) -> None:
    csrf = await sign_in(browser, wallet)
    for grantee, access in (("0x12", "read"), (Account.create().address, "admin"),
                            (wallet.address, "read")):  # fmt: skip
        form = {"csrf_token": csrf, "grantee": grantee, "namespace": "x", "access": access}
        r = await browser.post("/console/team/grants", data=form, headers=origin(browser))
        assert r.status_code == 422, (grantee, access, r.status_code)
    r = await browser.get("/v1/grants", headers=auth(wallet))
    assert r.json()["given"] == []


async def test_received_grants_and_agent_keys_are_listed_and_keys_revoked(
    browser: AsyncTestClient, wallet: LocalAccount, other_wallet: LocalAccount
) -> None:
    await grant(browser, other_wallet, wallet, "write", "their-notes")
    agent = Account.create()
    key = await delegate(browser, wallet, agent, ["read"])
    csrf = await sign_in(browser, wallet)
    page = (await browser.get("/console/team")).text
    received = page.split('id="grants-received"')[1].split("</table>")[0]
    assert other_wallet.address.lower() in received and "their-notes" in received
    keys = page.split('id="agent-keys"')[1].split("</table>")[0]
    assert agent.address.lower() in keys
    r = await browser.post(f"/console/team/agents/{key['id']}/revoke",
                           data={"csrf_token": csrf}, headers=origin(browser))  # fmt: skip
    assert r.status_code == 303
    after = (await browser.get("/console/team")).text
    assert agent.address.lower() not in after.split('id="agent-keys"')[1]


async def test_an_agent_key_signed_by_the_owner_is_added_and_acts_for_it(
    browser: AsyncTestClient, wallet: LocalAccount
) -> None:
    await store_memory(browser, wallet, "The owner's note an agent may read")
    agent = Account.create()
    csrf = await sign_in(browser, wallet)
    headers = {**origin(browser), "x-csrf-token": csrf, "accept": "application/json"}
    draft = {"agent": agent.address, "scopes": ["read"], "namespaces": ["default"]}
    r = await browser.post("/console/team/agents/message", json=draft, headers=headers)
    assert r.status_code == 200, r.text
    message, nonce, issued_at = (r.json()[k] for k in ("message", "nonce", "issued_at"))
    assert f"Owner: {wallet.address.lower()}" in message and f"Nonce: {nonce}" in message
    assert f'Issued: "{issued_at}"' in message
    forged = sign_delegation(Account.create().key.hex(), message)
    r = await browser.post("/console/team/agents", json={**draft, "nonce": nonce,
                           "issued_at": issued_at, "signature": forged}, headers=headers)  # fmt: skip
    assert r.status_code == 422 and r.json()["error"]["details"]["field"] == "signature"
    signature = sign_delegation(wallet.key.hex(), message)
    r = await browser.post("/console/team/agents", json={**draft, "nonce": nonce,
                           "issued_at": issued_at, "signature": signature}, headers=headers)  # fmt: skip
    assert r.status_code == 201 and r.json()["agent"] == agent.address.lower(), r.text
    listed = await browser.get("/v1/memories", headers=as_agent(agent, wallet))
    assert listed.status_code == 200 and listed.json()["memories"], listed.text
    page = (await browser.get("/console/team")).text
    assert agent.address.lower() in page.split('id="agent-keys"')[1].split("</table>")[0]
