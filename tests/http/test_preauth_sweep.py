"""Nothing read before authentication costs more than its size: every header and body field a
request carries before anyone is signed in (SIGN-IN-WITH-X, x-wallet-auth, bearer tokens,
x-wallet-owner, PAYMENT-SIGNATURE / X-PAYMENT and the payment-identifier extension, the
console's sign-in bodies and link, /auth/session's body), sent to a real `engram serve` with 1k
to 60k characters in several shapes, answers a 4xx within 0.5 s while /health, polled all along,
keeps answering within 0.5 s (issue 35, finding 1).

Times are the server's answer times (httpx's `elapsed`: request sent to answer read), each
route warmed first; 0.5 s is the issue's stated budget, ~100x what these take on an idle box,
so a loaded CI machine has room."""

from __future__ import annotations

import base64
import json
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.auth.siwx import MAX_HEADER_CHARS
from tests.support.server import PAY_TO, paying_serving

BUDGET_S = 0.5
SIZES = [1_000, 8_000, 20_000, 60_000]
ADDRESS = "0x" + "1" * 40


@pytest.fixture(scope="module")
def engram_paid(
    database_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, Path]]:
    """`engram serve` with x402 on and no free calls, so a paid route reads its payment
    headers."""
    with paying_serving(tmp_path_factory.mktemp("preauth"), database_url) as served:
        yield served


# ---- inputs ----------------------------------------------------------------------------------


def b64(value: Any) -> str:
    return base64.b64encode(json.dumps(value).encode()).decode()


def iso(moment: datetime) -> str:
    return moment.replace(microsecond=0).isoformat().replace("+00:00", "Z")


def challenge(url: str, **changes: Any) -> dict[str, Any]:
    """A challenge as Engram issues it for `url` (fresh, its own origin), fields changed: what
    x402's checks pass on to the signature check."""
    now = datetime.now(UTC)
    fields = {
        "domain": url.removeprefix("http://"), "uri": url, "version": "1",
        "statement": "Sign in to Engram with this wallet.", "nonce": "0123456789abcdef",
        "issuedAt": iso(now), "expirationTime": iso(now + timedelta(seconds=300)),
        "chainId": "eip155:8453", "type": "eip191",
    }  # fmt: skip
    return {**fields, **changes}


def siwx_payload(url: str, **changes: Any) -> dict[str, Any]:
    return {**challenge(url, **changes), "address": ADDRESS, "signature": "0x" + "00" * 65}


def statement_header(url: str, chars: int) -> str:
    """A validly encoded SIGN-IN-WITH-X header `chars` long, its bulk a statement."""
    overhead = len(b64(siwx_payload(url, statement="")))
    return b64(siwx_payload(url, statement="s" * max(0, (chars - overhead) * 3 // 4)))


def siwx_headers(url: str, n: int) -> list[str]:
    """SIGN-IN-WITH-X values of about n characters, in every shape."""
    depth = {"resources": [["r" * (n * 3 // 4)]]}  # as deep as the header's bound lets it be
    return [
        statement_header(url, n),
        b64(siwx_payload(url, resources=["https://r.example/x"] * (n // 30))),
        b64(siwx_payload(url, requestId="q" * (n * 3 // 4))),
        b64(siwx_payload(url, uri=url + "/" + "u" * (n * 3 // 4))),
        b64({**siwx_payload(url), **depth}),
        base64.b64encode(b"\x8f\xff" * (n * 3 // 8)).decode(),  # base64 of binary garbage
        "eyJ" + "A" * n,
    ]


def payment_proofs(n: int) -> list[str]:
    authorization = {
        "from": ADDRESS, "to": PAY_TO, "value": "1", "validAfter": "0",  # not the price
        "validBefore": "9999999999", "nonce": "0x" + "ab" * 32,
    }  # fmt: skip

    def proof(**changes: Any) -> dict[str, Any]:
        base = {"x402Version": 2, "accepted": {"scheme": "exact", "network": "eip155:8453"},
                "payload": {"signature": "0x" + "00" * 65, "authorization": authorization}}  # fmt: skip
        return {**base, **changes}

    long = "a" * (n * 3 // 4)
    return [
        b64(proof(payload={"signature": "0x" + long, "authorization": authorization})),
        b64(proof(payload={"signature": "0x", "authorization": {**authorization, "nonce": long}})),
        b64(proof(extensions={"payment-identifier": {"info": {"id": long, "required": False}}})),
        b64(proof(accepted={"scheme": long, "network": long})),
        b64(proof(extensions={"a": [[[[{"b": long}]]]]})),  # deep, within the header's bound
        base64.b64encode(b"\x8f\xff" * (n * 3 // 8)).decode(),
    ]


def valid_looking(n: int) -> dict[str, list[str]]:
    """Header values shaped like the real thing, one part stretched to about n characters."""
    jwt_part = base64.urlsafe_b64encode(json.dumps({"alg": "HS256", "kid": "k" * n}).encode())
    return {
        "x-wallet-auth": [
            f"{ADDRESS}:1800000000:{'ab' * (n // 2)}",
            f"{ADDRESS}:{'1' * n}:{'ab' * 65}",
            f"0x{'a' * n}:1:{'ab' * 65}",
            ":" * n,
        ],
        "authorization": [
            f"Bearer {jwt_part.decode().rstrip('=')}.e30.c2ln",
            f"Bearer eyJhbGciOiJIUzI1NiJ9.{'A' * n}.{'B' * 43}",
            "Bearer " + "." * n,
        ],
        "x-wallet-owner": ["0x" + "a" * n],
    }


def other_headers(n: int) -> list[tuple[str, str]]:
    """Headers middleware reads on every request before identity: the console's cookie (a
    quoted value of backslashes is what http.cookies parses in quadratic time), Origin, a
    client's X-Request-Id, Content-Type."""
    return [
        ("cookie", 'engram_console="' + "\\" * n + '"'),
        ("cookie", "engram_console=" + "t" * n),
        ("cookie", "a=1; " * (n // 5) + "engram_console=t"),
        ("origin", "http://" + "o" * n),
        ("x-request-id", "r" * n),
        ("content-type", "application/json" + "; a=b" * (n // 5)),
    ]


# ---- requests --------------------------------------------------------------------------------

Request = tuple[str, str, dict[str, str], Any]  # method, path, headers, JSON body


def requests_of_size(url: str, n: int) -> list[Request]:
    origin = {"origin": url}
    found: list[Request] = []
    for raw in siwx_headers(url, n):
        for method, path in [("GET", "/v1/free-tier/status"), ("POST", "/auth/session"),
                             ("POST", "/console/auth/links"), ("POST", "/v1/store")]:  # fmt: skip
            body = {"content": "x"} if path == "/v1/store" else None
            found.append((method, path, {"sign-in-with-x": raw}, body))
    for raw in payment_proofs(n):
        for header in ("payment-signature", "x-payment"):
            found.append(("POST", "/v1/store", {header: raw}, {"content": "x"}))
    for header, values in valid_looking(n).items():
        for raw in values:
            found.append(("GET", "/v1/free-tier/status", {header: raw}, None))
            found.append(("POST", "/v1/store", {header: raw}, {"content": "x"}))
    for header, raw in other_headers(n):
        found.append(("GET", "/v1/free-tier/status", {header: raw}, None))
        found.append(("POST", "/v1/store", {header: raw}, {"content": "x"}))
        found.append(("POST", "/console/auth/challenge", {**origin, header: raw}, {"address": "x"}))
    long = "s" * n
    signin = challenge(url)
    found += [
        ("POST", "/console/auth/signin", origin,
         {"challenge": {**signin, "statement": long}, "address": ADDRESS, "signature": "0x"}),
        ("POST", "/console/auth/signin", origin,
         {"challenge": {**signin, "resources": ["urn:x"] * (n // 8)}, "address": ADDRESS,
          "signature": "0x" + "00" * 65}),
        ("POST", "/console/auth/signin", origin,
         {"challenge": {**signin, "requestId": long}, "address": ADDRESS, "signature": "0x"}),
        ("POST", "/console/auth/signin", origin,
         {"challenge": {**signin, "statement": json.loads("[" * 60 + "]" * 60)},
          "address": ADDRESS, "signature": "0x"}),
        ("POST", "/console/auth/signin", origin,
         {"challenge": signin, "address": ADDRESS, "signature": "0x" + "ab" * (n // 2)}),
        ("POST", "/console/auth/challenge", origin, {"address": "0x" + "a" * n}),
        ("POST", "/console/auth/challenge", {"host": "h" * n, "origin": "http://" + "h" * n},
         {"address": ADDRESS}),
        ("POST", f"/console/auth/link/{'t' * n}", origin, None),
        ("GET", f"/console/auth/link/{'t' * n}", {}, None),
        ("POST", "/auth/session", {}, {"address": "0x" + "a" * n, "timestamp": 1, "signature": "b"}),
        ("POST", "/auth/session", {}, {"address": ADDRESS, "timestamp": 1, "signature": long}),
        ("POST", "/auth/session", {}, {"address": ADDRESS, "timestamp": long, "signature": "b"}),
        ("GET", "/auth/nonce", {"sign-in-with-x": statement_header(url, n)}, None),
    ]  # fmt: skip
    return found


def send(client: httpx.Client, request: Request) -> httpx.Response:
    method, path, headers, body = request
    return client.request(method, path, headers=headers, json=body)


class HealthPoller(threading.Thread):
    """GET /health over and over, on its own connection, until stopped: each answer's time."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.url, self.times, self.failures = url, [], []  # type: ignore[var-annotated]
        self.stopped = threading.Event()

    def run(self) -> None:
        with httpx.Client(base_url=self.url, timeout=10) as client:
            while not self.stopped.is_set():
                started = time.perf_counter()
                try:
                    status = client.get("/health").status_code
                except httpx.HTTPError as exc:
                    self.failures.append(repr(exc))
                    continue
                self.times.append(time.perf_counter() - started)
                if status != 200:
                    self.failures.append(str(status))
                self.stopped.wait(0.02)

    def answers(self, more_than: int, timeout: float = 15) -> None:
        deadline = time.monotonic() + timeout
        while len(self.times) <= more_than and time.monotonic() < deadline:
            time.sleep(0.01)

    def __enter__(self) -> HealthPoller:
        self.start()
        self.answers(0)  # polling before the first request goes out
        return self

    def __exit__(self, *_: object) -> None:
        self.answers(len(self.times))  # and one answer after the last
        self.stopped.set()
        self.join(timeout=15)


def reads_nothing(request: Request) -> bool:
    """GET /auth/nonce (public: identity headers go unread) and a sign-in link's page (it spends
    nothing; its script posts the token back): 200 whatever they carry."""
    method, path, _, _ = request
    return method == "GET" and (path == "/auth/nonce" or path.startswith("/console/auth/link/"))


# A request over budget is sent again, up to ATTEMPTS times in all, and judged by its fastest
# answer: an input whose parse is slow is slow every time (x402's SIWE parser took 0.52-0.86 s at
# 1k characters on each try), while a loaded 2-core CI host may stall any one request once (it
# did: 0.78 s for a 1k x-wallet-auth that answers in milliseconds). For the same reason, one
# /health answer over budget is let pass; a stalled loop delays one per stall, and a slow input
# stalls it on every attempt, which the requests' own rule catches.
ATTEMPTS = 3
HEALTH_OUTLIERS = 1


def best_of(client: httpx.Client, request: Request) -> tuple[httpx.Response, float]:
    """The request's answer and its time, sent again while over budget (ATTEMPTS in all)."""
    r = send(client, request)
    took = r.elapsed.total_seconds()
    for _ in range(ATTEMPTS - 1):
        if took <= BUDGET_S:
            break
        r = send(client, request)
        took = min(took, r.elapsed.total_seconds())
    return r, took


def sweep(url: str, requests: list[Request]) -> list[str]:
    """Each request sent (routes warmed first) while /health is polled; what went wrong."""
    problems: list[str] = []
    with httpx.Client(base_url=url, timeout=30) as client:
        for request in {(m, p.split("/link/")[0], "") for m, p, _, _ in requests}:
            client.request(request[0], request[1])  # warm each route and its handler
        with HealthPoller(url) as health:
            for request in requests:
                r, took = best_of(client, request)
                shown = f"{request[0]} {request[1][:40]} {list(request[2])} {len(str(request))}"
                if not (r.status_code == 200 if reads_nothing(request) else r.is_client_error):
                    problems.append(f"{shown}: {r.status_code} {r.text[:200]}")
                if took > BUDGET_S:
                    problems.append(f"{shown}: answered in {took:.2f} s at best")
    if health.failures:
        problems.append(f"/health failed: {health.failures[:5]}")
    slow = [t for t in health.times if t > BUDGET_S]
    if len(slow) > HEALTH_OUTLIERS or not health.times:
        problems.append(f"/health: {len(health.times)} answers, {len(slow)} over {BUDGET_S} s"
                        f" (slowest {max(health.times, default=0):.2f} s)")  # fmt: skip
    return problems


# ---- the tests -------------------------------------------------------------------------------


def test_a_long_sign_in_statement_is_refused_at_once(engram_paid: tuple[str, Path]) -> None:
    """Finding 1 itself, at sizes x402's parser took seconds over: the 8 KB header on a free
    route and on POST /auth/session, a 6,400-character statement in the console's sign-in body,
    and a console challenge for a long Host."""
    url, _ = engram_paid
    header = statement_header(url, MAX_HEADER_CHARS)
    body = {"challenge": challenge(url, statement="s" * 6_400), "address": ADDRESS,
            "signature": "0x" + "00" * 65}  # fmt: skip
    problems = sweep(url, [
        ("GET", "/v1/free-tier/status", {"sign-in-with-x": header}, None),
        ("POST", "/auth/session", {"sign-in-with-x": header}, None),
        ("POST", "/console/auth/signin", {"origin": url}, body),
        ("POST", "/console/auth/challenge", {"host": "h" * 4_000, "origin": "http://" + "h" * 4_000},
         {"address": ADDRESS}),
    ])  # fmt: skip
    assert not problems, "\n".join(problems)
    r = httpx.post(f"{url}/console/auth/signin", json=body, headers={"origin": url}, timeout=30)
    assert r.status_code == 401, r.text
    assert "statement is 6400 characters long; the limit is 1024" in r.json()["error"]["message"]


@pytest.mark.parametrize("n", SIZES)
def test_every_field_read_before_sign_in_answers_within_budget(
    engram_paid: tuple[str, Path], n: int
) -> None:
    url, _ = engram_paid
    problems = sweep(url, requests_of_size(url, n))
    assert not problems, "\n".join(problems)
