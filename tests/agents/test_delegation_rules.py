"""The rules that keep a signed delegation to what its owner meant, through a real `engram serve`:
it registers only on the server it names (ENGRAM_PUBLIC_URL's origin, or on loopback the
address the server listens on; never one a request's headers claim); an older delegation never
replaces a newer one (a signed issued-at orders them); the owner cancels one by its nonce
before it is registered; and its namespaces are compared in NFC, as every namespace is."""

from __future__ import annotations

import unicodedata
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from eth_account import Account
from eth_account.signers.local import LocalAccount

from app.agents.service import issued_now, server_origin
from app.auth.siwx import origin_of
from app.config import ServerSettings
from app.core.errors import PublicUrlUnset
from tests.support.api import auth
from tests.support.server import serving
from tests.support.team import as_agent, forbidden, signed_delegation

OTHER_SERVER = "http://engram.other-team.example"
PUBLIC_URL = "https://memory.example.com"


@pytest.fixture
async def http(server: str) -> Any:
    async with httpx.AsyncClient(base_url=server, timeout=60) as client:
        yield client


def for_server(url: str, owner: LocalAccount, agent: LocalAccount, scopes: list[str],
               namespaces: list[str] | None = None, **extra: Any) -> dict[str, Any]:  # fmt: skip
    return signed_delegation(owner, agent, scopes, namespaces, server=origin_of(url), **extra)


async def given(http: httpx.AsyncClient, owner: LocalAccount) -> list[dict[str, Any]]:
    r = await http.get("/v1/agents", headers=auth(owner))
    assert r.status_code == 200, r.text
    keys: list[dict[str, Any]] = r.json()["given"]
    return keys


def same_time(a: str, b: str) -> bool:
    return datetime.fromisoformat(a) == datetime.fromisoformat(b)


def moment(delta: timedelta) -> str:
    return issued_now(datetime.now(UTC) + delta)


# ---- the server it names -----------------------------------------------------------------------


async def test_a_delegation_for_another_server_does_not_register_by_naming_its_host(
    http: httpx.AsyncClient, server: str
) -> None:
    owner, agent = Account.create(), Account.create()
    elsewhere = signed_delegation(owner, agent, ["read", "write"], server=OTHER_SERVER)
    r = await http.post("/v1/agents", json=elsewhere,
                        headers={**auth(owner), "host": "engram.other-team.example"})  # fmt: skip
    assert r.status_code == 422, r.text  # was 201: the Host header chose the Server line
    assert r.json()["error"]["details"] == {"field": "signature"}
    # nor by claiming https from a loopback peer (uvicorn believed X-Forwarded-Proto from one)
    https = signed_delegation(
        owner, agent, ["read"], server=origin_of(server).replace("http:", "https:")
    )
    r = await http.post("/v1/agents", json=https,
                        headers={**auth(owner), "x-forwarded-proto": "https"})  # fmt: skip
    assert r.status_code == 422, r.text
    assert await given(http, owner) == []
    # the scheme a request is seen with stays its own: no trusted proxies are listed
    r = await http.get("/auth/nonce", headers={"x-forwarded-proto": "https"})
    assert r.json()["uri"] == origin_of(server), r.text
    r = await http.post("/v1/recall", json={"query": "x"}, headers=as_agent(agent, owner))
    assert forbidden(r)
    # signed for this server's own address, it registers, whatever Host says
    here = for_server(server, owner, agent, ["read"])
    r = await http.post("/v1/agents", json=here,
                        headers={**auth(owner), "host": "engram.other-team.example"})  # fmt: skip
    assert r.status_code == 201, r.text


@pytest.fixture(scope="module")
def beyond_loopback(
    database_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, str]]:
    """Two `engram serve` listening on every interface: (without ENGRAM_PUBLIC_URL, behind a
    proxy on this machine that it trusts; with ENGRAM_PUBLIC_URL)."""
    with (
        serving(
            tmp_path_factory.mktemp("unset"),
            ENGRAM_DATABASE_URL=database_url,
            ENGRAM_HOST="0.0.0.0",
            ENGRAM_TRUSTED_PROXIES="127.0.0.1,::1",
        ) as (unset, _),
        serving(
            tmp_path_factory.mktemp("public"),
            ENGRAM_DATABASE_URL=database_url,
            ENGRAM_HOST="0.0.0.0",
            ENGRAM_PUBLIC_URL=PUBLIC_URL,
        ) as (public, _),
    ):
        yield unset, public


async def test_beyond_loopback_a_delegation_registers_only_for_the_public_url(
    beyond_loopback: tuple[str, str],
) -> None:
    unset, public = beyond_loopback
    owner, agent = Account.create(), Account.create()
    async with httpx.AsyncClient(base_url=unset, timeout=60) as http:
        for body, host in ((for_server(unset, owner, agent, ["read"]), None),
                           (signed_delegation(owner, agent, ["read"], server=OTHER_SERVER),
                            "engram.other-team.example")):  # fmt: skip
            headers = {**auth(owner), **({"host": host} if host else {})}
            r = await http.post("/v1/agents", json=body, headers=headers)
            assert r.status_code == 503, r.text
            error = r.json()["error"]
            assert (
                error["code"] == "SERVICE_UNAVAILABLE" and "ENGRAM_PUBLIC_URL" in error["message"]
            )
            assert error["details"] == {"reason": "public_url_unset",
                                        "setting": "ENGRAM_PUBLIC_URL"}  # fmt: skip
        assert await given(http, owner) == []
        assert (await http.get("/health")).status_code == 200  # the rest of it serves
        # a listed proxy's X-Forwarded-Proto is believed (Sign-In-With-X's origin here), and
        # still names no delegation's server
        r = await http.get("/auth/nonce", headers={"x-forwarded-proto": "https"})
        assert r.json()["uri"] == origin_of(unset).replace("http:", "https:"), r.text
    async with httpx.AsyncClient(base_url=public, timeout=60) as http:
        r = await http.post("/v1/agents", json=for_server(public, owner, agent, ["read"]),
                            headers=auth(owner))  # fmt: skip
        assert r.status_code == 422, r.text  # its own address is not its public origin
        r = await http.post("/v1/agents",
                            json=signed_delegation(owner, agent, ["read"], server=OTHER_SERVER),
                            headers={**auth(owner), "host": "engram.other-team.example"})  # fmt: skip
        assert r.status_code == 422, r.text
        body = signed_delegation(owner, agent, ["read"], server=PUBLIC_URL)
        r = await http.post("/v1/agents", json=body, headers=auth(owner))
        assert r.status_code == 201, r.text


def test_the_server_line_comes_from_settings_and_the_socket_never_a_header() -> None:
    assert server_origin(ServerSettings(public_url=PUBLIC_URL + "/api"), None) == PUBLIC_URL
    loopback = ServerSettings(host="127.0.0.1", port=8000)
    assert server_origin(loopback, None) == "http://127.0.0.1:8000"
    assert server_origin(loopback, ("127.0.0.1", 41234)) == "http://127.0.0.1:41234"
    assert server_origin(ServerSettings(host="::1", port=9000), None) == "http://[::1]:9000"
    assert server_origin(ServerSettings(host="localhost"), ("::1", 80)) == "http://[::1]"
    for host in ("0.0.0.0", "::", "10.1.2.3", "memory.example.com"):
        with pytest.raises(PublicUrlUnset):
            server_origin(ServerSettings(host=host), ("127.0.0.1", 8000))


# ---- newer wins; cancel by nonce ---------------------------------------------------------------


async def test_an_older_broad_delegation_never_replaces_a_newer_narrow_one(
    http: httpx.AsyncClient, server: str
) -> None:
    owner, agent = Account.create(), Account.create()
    broad = for_server(server, owner, agent, ["read", "write"])  # handed to the agent, kept
    narrow = for_server(server, owner, agent, ["read"], ["team"], issued_at=moment(timedelta(0)))
    r = await http.post("/v1/agents", json=narrow, headers=auth(owner))
    assert r.status_code == 201, r.text
    in_force = r.json()
    assert same_time(in_force["issued_at"], narrow["issued_at"])
    r = await http.post("/v1/agents", json=broad, headers=auth(agent))  # the agent replays it
    assert r.status_code == 409, r.text  # was 201, and the broad one replaced the narrow one
    assert r.json()["error"]["code"] == "CONFLICT"
    details = r.json()["error"]["details"]
    assert details["field"] == "issued_at"
    assert same_time(details["newest_issued_at"], narrow["issued_at"])
    assert [(k["id"], k["scopes"], k["namespaces"]) for k in await given(http, owner)] == [
        (in_force["id"], ["read"], ["team"])]  # fmt: skip
    r = await http.post("/v1/store", json={"content": "x", "namespace": "private"},
                        headers=as_agent(agent, owner))  # fmt: skip
    assert forbidden(r)
    # nor once the newer one is revoked: an older one does not come back
    await http.delete(f"/v1/agents/{in_force['id']}", headers=auth(owner))
    r = await http.post("/v1/agents", json=broad, headers=auth(agent))
    assert r.status_code == 409 and await given(http, owner) == []
    # a newer one does replace it
    newer = for_server(server, owner, agent, ["write"], ["team"])
    assert (await http.post("/v1/agents", json=newer, headers=auth(owner))).status_code == 201


async def test_issued_at_is_signed_and_not_in_the_future(
    http: httpx.AsyncClient, server: str
) -> None:
    owner, agent = Account.create(), Account.create()
    cases = {
        "future": for_server(server, owner, agent, ["read"], issued_at=moment(timedelta(hours=1))),
        "unreadable": for_server(server, owner, agent, ["read"], issued_at="yesterday"),
        "altered": {
            **for_server(server, owner, agent, ["read"]),
            "issued_at": moment(timedelta(minutes=1)),
        },
        "missing": {
            k: v for k, v in for_server(server, owner, agent, ["read"]).items() if k != "issued_at"
        },
    }
    for case, body in cases.items():
        r = await http.post("/v1/agents", json=body, headers=auth(owner))
        assert r.status_code == 422, (case, r.text)
        assert r.json()["error"]["code"] == "VALIDATION_ERROR", (case, r.text)
    assert await given(http, owner) == []
    # a clock a little fast is fine, and a delegation signed last week too
    for delta in (timedelta(days=-7), timedelta(minutes=2)):
        body = for_server(server, owner, Account.create(), ["read"], issued_at=moment(delta))
        r = await http.post("/v1/agents", json=body, headers=auth(owner))
        assert r.status_code == 201, r.text


async def test_a_cancelled_nonce_never_registers_and_ends_a_registered_one(
    http: httpx.AsyncClient, server: str
) -> None:
    owner, agent = Account.create(), Account.create()
    body = for_server(server, owner, agent, ["read", "write"])
    r = await http.delete(f"/v1/agents/nonces/{body['nonce']}", headers=auth(owner))
    assert r.status_code == 200, r.text  # was 404: no way to cancel an unregistered one
    assert r.json() == {"nonce": body["nonce"], "cancelled": True}
    for caller in (agent, owner):
        r = await http.post("/v1/agents", json=body, headers=auth(caller))
        assert r.status_code == 409, r.text
        assert r.json()["error"]["details"] == {"field": "nonce"}
    assert await given(http, owner) == []
    again = await http.delete(f"/v1/agents/nonces/{body['nonce']}", headers=auth(owner))
    assert again.json() == {"nonce": body["nonce"], "cancelled": True}  # changes nothing

    # registered and live: cancelling its nonce revokes it
    body = for_server(server, owner, agent, ["read"])
    key = (await http.post("/v1/agents", json=body, headers=auth(owner))).json()
    h = as_agent(agent, owner)
    assert (await http.post("/v1/recall", json={"query": "x"}, headers=h)).status_code == 200
    # another wallet cancelling the same nonce takes its own, not the owner's
    r = await http.delete(f"/v1/agents/nonces/{body['nonce']}", headers=auth(agent))
    assert r.json() == {"nonce": body["nonce"], "cancelled": True}
    assert (await http.post("/v1/recall", json={"query": "x"}, headers=h)).status_code == 200
    r = await http.delete(f"/v1/agents/nonces/{body['nonce']}", headers=auth(owner))
    assert r.json() == {"nonce": body["nonce"], "cancelled": True, "revoked": key["id"]}
    assert forbidden(await http.post("/v1/recall", json={"query": "x"}, headers=h))
    r = await http.delete("/v1/agents/nonces/short", headers=auth(owner))
    assert r.status_code == 422
    # an agent key acting for the owner cancels nothing of the owner's
    live = for_server(server, owner, agent, ["read"])
    assert (await http.post("/v1/agents", json=live, headers=auth(owner))).status_code == 201
    other = for_server(server, owner, Account.create(), ["read"])
    assert forbidden(await http.delete(f"/v1/agents/nonces/{other['nonce']}", headers=h))
    assert (await http.post("/v1/agents", json=other, headers=auth(owner))).status_code == 201


# ---- namespaces in NFC -------------------------------------------------------------------------

COMPOSED = unicodedata.normalize("NFC", "café")
DECOMPOSED = unicodedata.normalize("NFD", "café")


@pytest.mark.parametrize(("listed", "used"), [(DECOMPOSED, COMPOSED), (COMPOSED, DECOMPOSED)])
async def test_a_delegations_namespaces_match_in_either_spelling(
    http: httpx.AsyncClient, server: str, listed: str, used: str
) -> None:
    assert listed != used
    owner, agent = Account.create(), Account.create()
    r = await http.post("/v1/agents", json=for_server(server, owner, agent, ["write"], [listed]),
                        headers=auth(owner))  # fmt: skip
    assert r.status_code == 201, r.text
    assert r.json()["namespaces"] == [COMPOSED]
    h = as_agent(agent, owner)
    r = await http.post("/v1/store", headers=h, json={"content": "Espresso beans are in the"
                        " left cupboard", "namespace": used})  # fmt: skip
    assert r.status_code == 201, r.text  # was 403 for a decomposed listing
    assert r.json()["memory"]["namespace"] == COMPOSED
    r = await http.post("/v1/recall", headers=h, json={"query": "espresso", "namespace": used})
    assert r.status_code == 200 and len(r.json()["memories"]) == 1, r.text
    r = await http.get("/v1/memories", headers=h, params={"namespace": used})
    assert r.status_code == 200 and r.json()["total"] == 1, r.text
    # both spellings listed are one namespace: a value twice
    twice = for_server(server, owner, agent, ["read"], [COMPOSED, DECOMPOSED])
    r = await http.post("/v1/agents", json=twice, headers=auth(owner))
    assert r.status_code == 422 and r.json()["error"]["details"] == {"field": "namespaces"}
