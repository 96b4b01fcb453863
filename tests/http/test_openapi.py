"""The OpenAPI document (/docs/openapi.json): valid OpenAPI 3.1, a schema for every success answer,
ErrorBody for every error answer, the errors a route's metadata implies, and real answers that
match what the document declares for them."""

from __future__ import annotations

from collections.abc import AsyncIterator
from decimal import Decimal
from typing import Any

import jsonschema
import pytest
from eth_account.signers.local import LocalAccount
from litestar import Litestar
from litestar.handlers import HTTPRouteHandler
from litestar.testing import AsyncTestClient
from openapi_spec_validator import validate

from app.asgi import create_app
from app.auth.signature import sign_header
from app.config import Settings
from app.http.markers import PUBLIC_OPT_KEY, UNLIMITED_OPT_KEY, price_of
from app.payments.network import network_named
from app.payments.offers import Offer, challenge

DOCUMENT = "/docs/openapi.json"
ERROR_BODY = "#/components/schemas/ErrorBody"
PAYMENT_REQUIRED_BODY = "#/components/schemas/PaymentRequiredBody"
METHODS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")


@pytest.fixture(scope="module")
async def api(settings: Settings) -> AsyncIterator[AsyncTestClient[Litestar]]:
    """An app of this module's own: the session's shared one has its lifespan run again by
    tests that serve it with uvicorn, which closes its pool."""
    async with AsyncTestClient(app=create_app(settings), timeout=60) as client:
        yield client


@pytest.fixture(scope="module")
async def document(api: AsyncTestClient[Litestar]) -> dict[str, Any]:
    r = await api.get(DOCUMENT)
    assert r.status_code == 200
    doc: dict[str, Any] = r.json()
    return doc


def operations(doc: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [
        (method.upper(), path, op)
        for path, item in doc["paths"].items()
        for method, op in item.items()
        if method in METHODS
    ]


def component(doc: dict[str, Any], ref: str) -> dict[str, Any]:
    schema: dict[str, Any] = doc["components"]["schemas"][ref.rsplit("/", 1)[1]]
    return schema


def json_schema(doc: dict[str, Any], op: dict[str, Any], status: int) -> dict[str, Any]:
    """What `op` declares its `status` answer's JSON body to be."""
    schema: dict[str, Any] = op["responses"][str(status)]["content"]["application/json"]["schema"]
    return schema


def check_answer(doc: dict[str, Any], method: str, path: str, response: Any) -> None:
    """The answer's body validates against the schema its operation declares for its status."""
    op = doc["paths"][path][method.lower()]
    assert str(response.status_code) in op["responses"], (method, path, response.status_code)
    schema = {**json_schema(doc, op, response.status_code), "components": doc["components"]}
    jsonschema.validate(response.json(), schema, cls=jsonschema.Draft202012Validator)


def headers_of(account: LocalAccount) -> dict[str, str]:
    return {"x-wallet-auth": sign_header(account.key.hex())}


def test_the_document_is_valid_openapi_3_1(document: dict[str, Any]) -> None:
    validate(document)
    assert document["openapi"].startswith("3.1")
    assert len(operations(document)) >= 40


def test_every_operation_declares_its_success_answer(document: dict[str, Any]) -> None:
    missing = []
    for method, path, op in operations(document):
        success = [s for s in op["responses"] if s.startswith("2")]
        assert len(success) == 1, (method, path, success)
        schema = json_schema(document, op, int(success[0]))
        if "$ref" in schema:
            schema = component(document, schema["$ref"])
        if not schema.get("properties"):  # `{}` or a bare object says nothing of the answer
            missing.append(f"{method} {path}")
    assert not missing, f"no success schema: {missing}"


def test_every_error_answer_is_an_error_body(document: dict[str, Any]) -> None:
    error_detail = component(document, ERROR_BODY)["properties"]["error"]
    # a 402 is an ErrorBody with x402's payment requirements beside `error`
    assert component(document, PAYMENT_REQUIRED_BODY)["properties"]["error"] == error_detail
    for method, path, op in operations(document):
        # Litestar's own 400 ({status_code, detail}) is never sent: validation errors are 422
        assert "400" not in op["responses"], (method, path)
        for status in (s for s in op["responses"] if int(s) >= 400):
            expected = PAYMENT_REQUIRED_BODY if status == "402" else ERROR_BODY
            assert json_schema(document, op, int(status)) == {"$ref": expected}, (
                method, path, status,
            )  # fmt: skip
            assert op["responses"][status]["description"], (method, path, status)


def test_errors_follow_the_routes_metadata(
    api: AsyncTestClient[Litestar], document: dict[str, Any]
) -> None:
    """402 exactly where a price is declared, 401 unless public, 429 unless unlimited, 422
    wherever there is input, 503 everywhere."""
    checked = 0
    for route in api.app.routes:
        for handler in getattr(route, "route_handlers", ()):
            if not isinstance(handler, HTTPRouteHandler):
                continue
            if not handler.resolve_include_in_schema():
                continue
            for method in handler.http_methods:
                op = document["paths"][route.path_format][method.lower()]
                declared = set(op["responses"])
                where = (method, route.path_format)
                assert ("402" in declared) == (price_of(handler) is not None), where
                if not handler.opt.get(PUBLIC_OPT_KEY):
                    assert "401" in declared, where
                assert ("429" in declared) == (not handler.opt.get(UNLIMITED_OPT_KEY)), where
                if op.get("parameters") or op.get("requestBody"):
                    assert "422" in declared, where
                if op.get("requestBody"):
                    assert {"413", "415"} <= declared, where
                assert "503" in declared, where
                checked += 1
    assert checked == len(operations(document))


async def test_answers_match_their_declared_schemas(
    api: AsyncTestClient[Litestar], wallet: LocalAccount, document: dict[str, Any]
) -> None:
    h = headers_of(wallet)
    stored = await api.post(
        "/v1/store",
        json={"content": "The staging database moved to Frankfurt", "tags": ["infra"]},
        headers=h,
    )
    check_answer(document, "POST", "/v1/store", stored)
    # a memory with every optional field, and one without: both match Memory
    full = await api.post(
        "/v1/store",
        json={
            "content": "Deploys happen on Fridays after the standup yesterday",
            "session_id": "s1", "agent_id": "a1", "expires_at": "2999-01-01T00:00:00Z",
            "metadata": {"source": "chat"}, "pinned": True, "immutable": True,
        },
        headers=h,
    )  # fmt: skip
    check_answer(document, "POST", "/v1/store", full)
    memory_id = stored.json()["id"]

    answers = [
        ("POST", "/v1/recall", await api.post(
            "/v1/recall", json={"query": "where is the database", "include_relations": True},
            headers=h,
        )),
        ("GET", "/v1/memories", await api.get("/v1/memories", headers=h)),
        ("GET", "/v1/memories/{memory_id}", await api.get(
            f"/v1/memories/{memory_id}", headers=h
        )),
        ("GET", "/v1/stats", await api.get("/v1/stats", headers=h)),
        ("GET", "/v1/suggested", await api.get("/v1/suggested", headers=h)),
        ("GET", "/v1/free-tier/status", await api.get("/v1/free-tier/status", headers=h)),
        ("GET", "/health", await api.get("/health")),
        # errors
        ("GET", "/v1/memories/{memory_id}", await api.get(
            "/v1/memories/00000000-0000-0000-0000-000000000000", headers=h
        )),
        ("POST", "/v1/store", await api.post("/v1/store", json={"content": ""}, headers=h)),
        ("PATCH", "/v1/memories/{memory_id}", await api.patch(
            f"/v1/memories/{full.json()['id']}", json={"content": "changed"}, headers=h
        )),
        ("GET", "/v1/stats", await api.get("/v1/stats", headers={"x-wallet-auth": "bad"})),
    ]  # fmt: skip
    statuses = [r.status_code for _, _, r in answers]
    assert statuses == [200, 200, 200, 200, 200, 200, 200, 404, 422, 409, 401]
    for method, path, response in answers:
        check_answer(document, method, path, response)


def test_a_payment_challenge_matches_the_402_schema(document: dict[str, Any]) -> None:
    offer = Offer(
        network=network_named("base-sepolia"),
        pay_to="0x" + "ab" * 20,
        price_usd=Decimal("0.005"),
        max_timeout_seconds=60,
        resource_url="http://testserver/v1/store",
        description="Engram store",
    )
    body = challenge(offer, "Free tier used up").body
    schema = {**component(document, PAYMENT_REQUIRED_BODY), "components": document["components"]}
    jsonschema.validate(body, schema, cls=jsonschema.Draft202012Validator)
    assert body["accepts"] and body["x402Version"] == 1
