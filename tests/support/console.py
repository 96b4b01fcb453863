"""Signing in to the console as a test: the one-time link `engram console` gets (a SIGN-IN-WITH-X
header traded at POST /console/auth/links), or a browser wallet's signed challenge."""

from __future__ import annotations

import re
from typing import Any

import httpx
from eth_account.messages import encode_defunct
from eth_account.signers.local import LocalAccount
from x402.extensions.sign_in_with_x import create_siwx_payload, encode_siwx_header

CSRF_RE = re.compile(r'<meta name="csrf-token" content="([^"]*)">')


async def siwx_header(client: httpx.AsyncClient, account: LocalAccount) -> dict[str, str]:
    r = await client.get("/auth/nonce")
    assert r.status_code == 200, r.text
    base = str(client.base_url).rstrip("/")
    payload = await create_siwx_payload(r.json(), account, f"{base}/auth/nonce")
    return {"SIGN-IN-WITH-X": encode_siwx_header(payload)}


async def sign_in_link(client: httpx.AsyncClient, account: LocalAccount) -> str:
    """The path of a fresh one-time sign-in link for `account`."""
    r = await client.post("/console/auth/links", headers=await siwx_header(client, account))
    assert r.status_code == 200, r.text
    url: str = r.json()["url"]
    return "/" + url.split("/", 3)[3]


async def open_link(client: httpx.AsyncClient, link: str) -> httpx.Response:
    """What a browser does with a sign-in link: load its page, whose script posts it back."""
    page = await client.get(link)
    assert page.status_code == 200 and 'id="link-form"' in page.text, page.text
    return await client.post(link, headers=origin(client))


async def sign_in(client: httpx.AsyncClient, account: LocalAccount) -> str:
    """Sign the client in (its cookie jar keeps the session); the page's CSRF token."""
    r = await open_link(client, await sign_in_link(client, account))
    assert r.status_code == 303 and r.headers["location"] == "/console/memories", r.text
    return await csrf_of(client)


async def csrf_of(client: httpx.AsyncClient) -> str:
    r = await client.get("/console/memories")
    assert r.status_code == 200, r.text
    found = CSRF_RE.search(r.text)
    assert found and found.group(1), "the page carries no CSRF token"
    return found.group(1)


def origin(client: httpx.AsyncClient) -> dict[str, str]:
    return {"origin": str(client.base_url).rstrip("/")}


async def wallet_sign_in(client: httpx.AsyncClient, account: LocalAccount) -> httpx.Response:
    """A browser wallet's sign-in: the challenge, personal_sign over its message, the signature."""
    r = await client.post("/console/auth/challenge", json={"address": account.address},
                          headers=origin(client))  # fmt: skip
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    signature = account.sign_message(encode_defunct(text=body["message"])).signature.hex()
    return await client.post(
        "/console/auth/signin",
        json={"challenge": body["challenge"], "address": account.address,
              "signature": "0x" + signature.removeprefix("0x")},
        headers=origin(client),
    )  # fmt: skip


WORDS = (
    "amber",
    "bridge",
    "cactus",
    "dolphin",
    "engine",
    "falcon",
    "glacier",
    "harbor",
    "island",
    "jigsaw",
    "kettle",
    "lantern",
    "meadow",
    "nebula",
    "orchid",
    "pepper",
    "quartz",
    "rocket",
    "saddle",
    "tundra",
    "umbrella",
    "velvet",
    "walnut",
    "xylophone",
    "yogurt",
    "zeppelin",
    "anchor",
    "bishop",
    "candle",
    "dragon",
    "ember",
    "fossil",
    "gravel",
    "hammock",
    "igloo",
    "jasmine",
    "kayak",
    "lobster",
    "marble",
    "nutmeg",
    "oyster",
    "parrot",
    "quiver",
    "raven",
    "sphinx",
    "trumpet",
    "unicorn",
    "violin",
    "whisker",
    "yarn",
    "zinnia",
    "avocado",
    "banjo",
)


def distinct_sentences(n: int, seed: int = 7) -> list[str]:
    """`n` contents far enough apart that no store folds one into another (deduplication)."""
    import random

    rng = random.Random(seed)
    return [f"Note {i}: " + " ".join(rng.sample(WORDS, 8)) for i in range(n)]
