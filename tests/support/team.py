"""Team memory in tests: grants (an owner shares a namespace with another wallet) and agent keys
(an owner's signed delegation, registered over HTTP), and the headers that act through them."""

from __future__ import annotations

import secrets
from typing import Any

import httpx
from eth_account.signers.local import LocalAccount

from app.agents.service import delegation_message, issued_now, sign_delegation
from tests.support.api import auth

# The Server line of a delegation signed for the in-process app: it listens on loopback (the
# default ENGRAM_HOST) without ENGRAM_PUBLIC_URL, so it names the address its requests reach,
# the ASGI scope's `server`, which AsyncTestClient takes from its base URL. A real server on
# loopback names http://127.0.0.1:<port> (`origin_of(url)`).
TEST_SERVER = "http://testserver.local"


def as_grantee(grantee: LocalAccount, owner: LocalAccount) -> dict[str, str]:
    return {**auth(grantee), "x-memory-owner": owner.address}


def as_agent(agent: LocalAccount, owner: LocalAccount) -> dict[str, str]:
    return {**auth(agent), "x-wallet-owner": owner.address}


def forbidden(r: httpx.Response) -> bool:
    return r.status_code == 403 and r.json()["error"]["code"] == "FORBIDDEN"


async def grant(client: httpx.AsyncClient, owner: LocalAccount, grantee: LocalAccount,
                access: str, namespace: str, **extra: Any) -> dict[str, Any]:  # fmt: skip
    body = {"grantee": grantee.address, "namespace": namespace, "access": access, **extra}
    r = await client.post("/v1/grants", json=body, headers=auth(owner))
    assert r.status_code == 201, r.text
    answer: dict[str, Any] = r.json()
    return answer


def signed_delegation(
    owner: LocalAccount,
    agent: LocalAccount,
    scopes: list[str],
    namespaces: list[str] | None = None,
    expires_at: str | None = None,
    server: str = TEST_SERVER,
    signer: LocalAccount | None = None,
    issued_at: str | None = None,
) -> dict[str, Any]:
    """The body of POST /v1/agents, signed by the owner (or by `signer`, to forge one), issued
    now unless `issued_at` says otherwise."""
    nonce, issued = secrets.token_hex(12), issued_at or issued_now()
    message = delegation_message(server, owner.address, agent.address, scopes, namespaces,
                                 issued, expires_at, nonce)  # fmt: skip
    body = {"owner": owner.address, "agent": agent.address, "scopes": scopes, "nonce": nonce,
            "issued_at": issued,
            "signature": sign_delegation((signer or owner).key.hex(), message)}  # fmt: skip
    if namespaces is not None:
        body["namespaces"] = namespaces
    if expires_at is not None:
        body["expires_at"] = expires_at
    return body


async def delegate(client: httpx.AsyncClient, owner: LocalAccount, agent: LocalAccount,
                   scopes: list[str], namespaces: list[str] | None = None,
                   **extra: Any) -> dict[str, Any]:  # fmt: skip
    """Register the owner's delegation to the agent (the owner calls); the answer's body."""
    body = signed_delegation(owner, agent, scopes, namespaces, **extra)
    r = await client.post("/v1/agents", json=body, headers=auth(owner))
    assert r.status_code == 201, r.text
    answer: dict[str, Any] = r.json()
    return answer
