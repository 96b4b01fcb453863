"""x402's bazaar discovery: every paid route's 402 declares it (the v2 header's `extensions` and
`resource`, the v1 body's `outputSchema`), x402's own facilitator helpers accept and extract it,
its schemas are the route's own types, and a stock client that echoes it still pays, with
Engram's own declaration (never the client's echo) handed to the facilitator."""

from __future__ import annotations

import base64
import json
import re
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Annotated, Any, get_args, get_origin

import msgspec
import pytest
from eth_account import Account
from eth_account.signers.local import LocalAccount
from litestar import Litestar
from litestar.handlers import HTTPRouteHandler
from litestar.testing import AsyncTestClient
from x402 import x402Client
from x402.extensions.bazaar import (
    BAZAAR,
    extract_discovery_info,
    validate_and_extract,
    validate_discovery_extension_spec,
)
from x402.http.utils import decode_payment_required_header, encode_payment_signature_header
from x402.mechanisms.evm.exact import ExactEvmClientScheme
from x402.mechanisms.evm.signers import EthAccountSigner
from x402.schemas import PaymentPayload, PaymentRequired

import app.payments.gate as gate_module
from app.asgi import create_app
from app.config import Settings
from app.core.json_input import decode_base64_json
from app.dev.chain import DevChain
from app.http.markers import price_of
from app.payments.discovery import UndeclarableRoute, declarations
from app.payments.proofs import MAX_HEADER_CHARS, MAX_HEADER_DEPTH
from app.usage.service import endpoint_label
from tests.support.api import auth
from tests.support.facilitator_wire import LocalFacilitatorServer
from tests.support.settings import changed
from tests.support.x402 import paid_only, reference_payment

# What a proxy in front of Engram lets through: deploy/nginx.conf's buffers for a response's
# headers (the 402's) and for one request header line (the proof echoing its declaration).
NGINX = (Path(__file__).resolve().parents[2] / "deploy" / "nginx.conf").read_text()


def nginx_bytes(directive: str) -> int:
    found = re.search(rf"{directive} (?:\d+ )?(\d+)k;", NGINX)
    assert found, f"deploy/nginx.conf sets no {directive}"
    return int(found[1]) * 1024


RESPONSE_HEADERS_BUDGET = nginx_bytes("proxy_buffer_size")
REQUEST_HEADER_BUDGET = nginx_bytes("large_client_header_buffers")


@pytest.fixture(scope="module")
def paid_app(settings: Settings, chain: DevChain) -> Litestar:
    return create_app(paid_only(settings, chain))


@pytest.fixture(scope="module")
async def paid(paid_app: Litestar) -> AsyncIterator[AsyncTestClient[Litestar]]:
    async with AsyncTestClient(app=paid_app, timeout=60) as client:
        yield client


@pytest.fixture
def payer(chain: DevChain) -> LocalAccount:
    account: LocalAccount = Account.create()
    chain.fund(account.address, 1_000_000, eth_wei=0)
    return account


def paid_routes(app: Litestar) -> dict[str, HTTPRouteHandler]:
    """Every paid (method, path) in the route table, named as usage names it ("POST /v1/store"):
    a new paid route is in this list without anyone adding it."""
    return {
        endpoint_label(method, route.path): handler
        for route in app.routes
        for handler in getattr(route, "route_handlers", ())
        if isinstance(handler, HTTPRouteHandler) and price_of(handler) is not None
        for method in handler.http_methods
    }


def own_schema(annotation: Any) -> dict[str, Any]:
    """msgspec's JSON schema of a handler's own type (a struct), its references resolved once."""
    schema = msgspec.json.schema(annotation)
    ref = schema.get("$ref", "")
    named: dict[str, Any] = schema.get("$defs", {}).get(ref.rsplit("/", 1)[-1], schema)
    return named


def struct_of(annotation: Any) -> Any:
    """The struct in `JSONBody[StoreIn]` (Annotated), or the annotation itself."""
    return get_args(annotation)[0] if get_origin(annotation) is Annotated else annotation


def declared(response: Any) -> PaymentRequired:
    assert response.status_code == 402, response.text
    required = decode_payment_required_header(response.headers["PAYMENT-REQUIRED"])
    assert isinstance(required, PaymentRequired)
    return required


async def challenge_of(client: Any, route: str, body: Any) -> Any:
    method, path = route.split(" ", 1)
    url = re.sub(r"\{[^}]+\}", str(uuid.uuid4()), path)
    return await client.request(method, url, json=body)


async def signed_payload(payer: LocalAccount, required: PaymentRequired) -> PaymentPayload:
    """What x402's own client pays `required` with: the extensions echoed, unmodified."""
    client = x402Client()
    client.register(required.accepts[0].network, ExactEvmClientScheme(EthAccountSigner(payer)))
    payload = await client.create_payment_payload(required)
    assert isinstance(payload, PaymentPayload)
    return payload


# ---- every paid route ------------------------------------------------------------------------


async def test_every_paid_route_declares_itself_for_the_bazaar(
    paid: AsyncTestClient[Litestar], paid_app: Litestar, payer: LocalAccount
) -> None:
    routes = paid_routes(paid_app)
    assert {"POST /v1/store", "POST /v1/recall", "PATCH /v1/memories/{memory_id}"} <= set(routes)
    for route, handler in sorted(routes.items()):
        method = route.split(" ", 1)[0]
        data = handler.parsed_fn_signature.parameters["data"].annotation
        answer = handler.parsed_fn_signature.return_type.annotation
        # the declaration's own example is a body the route's type accepts
        probe = await challenge_of(paid, route, None)
        bazaar = (declared(probe).extensions or {}).get(BAZAAR.key)
        assert bazaar, f"{route} declares no bazaar extension"
        example = bazaar["info"]["input"]["body"]
        msgspec.convert(example, struct_of(data))
        r = await challenge_of(paid, route, example)
        required = declared(r)
        assert required.extensions is not None and required.extensions[BAZAAR.key] == bazaar

        # as a facilitator checks it, with x402's own helpers
        for check in (validate_discovery_extension_spec(bazaar), validate_and_extract(bazaar)):
            assert check.valid, (route, check.errors)
        info = bazaar["info"]
        assert info["input"]["method"] == method and info["input"]["bodyType"] == "json"
        assert required.resource is not None
        assert required.resource.service_name == "Engram"
        assert required.resource.tags and len(required.resource.tags) <= 5
        assert "memory" in required.resource.tags
        assert required.resource.description and route in required.resource.description

        # the schemas are the route's own types: msgspec's view of them, field for field
        body_schema = bazaar["schema"]["properties"]["input"]["properties"]["body"]
        wanted = own_schema(struct_of(data))
        assert set(body_schema["properties"]) == set(wanted["properties"]), route
        assert set(body_schema.get("required", [])) == set(wanted.get("required", [])), route
        output_schema = bazaar["schema"]["properties"]["output"]["properties"]["example"]
        wanted = own_schema(answer)
        assert set(output_schema["properties"]) == set(wanted["properties"]), route
        assert set(output_schema.get("required", [])) == set(wanted.get("required", [])), route
        msgspec.convert(info["output"]["example"], answer)  # an answer the route could give

        # the v1 body says the same in v1's place, read by x402's v1 extraction
        v1 = r.json()["accepts"][0]
        found = extract_discovery_info({"x402Version": 1}, v1)
        assert found is not None and found.method == method, route
        assert found.resource_url == v1["resource"].split("?")[0]

        # a stock client's proof, echoing it all, is within the bounds a proof is read in
        payload = await signed_payload(payer, required)
        assert payload.extensions and BAZAAR.key in payload.extensions
        proof = encode_payment_signature_header(payload)
        decode_base64_json(proof, MAX_HEADER_CHARS, MAX_HEADER_DEPTH)
        # and both pass the proxy in deploy/, with room to spare
        assert len(proof) <= REQUEST_HEADER_BUDGET // 2, (route, len(proof))
        head = sum(len(k) + len(v) + 4 for k, v in r.headers.items())
        assert head <= RESPONSE_HEADERS_BUDGET * 3 // 4, (route, head)


async def test_the_store_declares_what_a_store_takes(paid: AsyncTestClient[Litestar]) -> None:
    required = declared(await paid.post("/v1/store", json={"content": "x"}))
    assert required.extensions is not None
    bazaar = required.extensions[BAZAAR.key]
    body = bazaar["schema"]["properties"]["input"]["properties"]["body"]
    assert body["required"] == ["content"]
    assert body["properties"]["content"]["type"] == "string"
    assert body["properties"]["content"]["minLength"] == 1
    assert bazaar["info"]["input"]["body"] == {"content": "string"}
    answer = bazaar["schema"]["properties"]["output"]["properties"]["example"]
    assert {"id", "stored", "memory"} <= set(answer["required"])
    assert "$ref" not in json.dumps(bazaar)  # it stands alone: a facilitator resolves nothing


async def test_a_route_with_an_id_names_its_template(paid: AsyncTestClient[Litestar]) -> None:
    memory_id = uuid.uuid4()
    r = await paid.patch(f"/v1/memories/{memory_id}", json={"content": "x"})
    required = declared(r)
    assert required.extensions is not None
    bazaar = required.extensions[BAZAAR.key]
    assert bazaar["routeTemplate"] == "/v1/memories/:memory_id"
    assert bazaar["info"]["input"]["method"] == "PATCH"
    path_params = bazaar["schema"]["properties"]["input"]["properties"]["pathParams"]
    assert path_params["required"] == ["memory_id"]


async def test_the_declarations_are_made_once_at_the_first_402(
    settings: Settings, chain: DevChain, wallet: LocalAccount, monkeypatch: pytest.MonkeyPatch
) -> None:
    made = []
    real = gate_module.declarations

    def counted(document: Any) -> Any:
        made.append(document)
        return real(document)

    monkeypatch.setattr(gate_module, "declarations", counted)
    app = create_app(changed(paid_only(settings, chain), limits={"free_tier_calls": 1}))
    async with AsyncTestClient(app=app) as client:
        r = await client.post("/v1/store", json={"content": "free"}, headers=auth(wallet))
        assert r.status_code == 201, r.text
        assert made == []  # a free call declares nothing
        for path, body in [("/v1/store", {"content": "x"}), ("/v1/recall", {"query": "q"})] * 3:
            assert (await client.post(path, json=body)).status_code == 402
    assert len(made) == 1


async def test_a_route_that_cannot_be_declared_still_offers_payment(
    settings: Settings, chain: DevChain, monkeypatch: pytest.MonkeyPatch, caplog: Any
) -> None:
    def broken(document: Any) -> Any:
        raise UndeclarableRoute("POST /v1/store: a type the bazaar cannot describe")

    monkeypatch.setattr(gate_module, "declarations", broken)
    async with AsyncTestClient(app=create_app(paid_only(settings, chain))) as client:
        required = declared(await client.post("/v1/store", json={"content": "x"}))
    assert required.extensions is not None and BAZAAR.key not in required.extensions
    assert required.accepts[0].amount == "5000"
    assert "bazaar declarations could not be made" in caplog.text


# ---- the declarations, from a document ---------------------------------------------------


def document(body: dict[str, Any], answer: dict[str, Any], **operation: Any) -> dict[str, Any]:
    """An OpenAPI document with one paid operation, POST /v1/thing."""
    json_of = {"content": {"application/json": {"schema": {"$ref": "#/components/schemas/A"}}}}
    return {
        "info": {"title": "Engram", "description": "Memory API for AI agents."},
        "paths": {"/v1/thing": {"post": {
            "requestBody": {"content": {"application/json": {"schema": body}}},
            "responses": {"201": json_of, "402": {"description": "pay"}},
            **operation,
        }}},
        "components": {"schemas": {"A": answer}},
    }  # fmt: skip


ANSWER = {"type": "object", "properties": {"id": {"type": "string"}}, "required": ["id"]}


def test_a_docstring_describes_the_route_and_field_names_stay() -> None:
    body = {
        "type": "object",
        "title": "ThingIn",
        "properties": {
            "title": {"type": "string", "maxLength": 3, "description": "a field named title"},
            "n": {"oneOf": [{"type": "integer"}, {"type": "null"}], "minimum": 2},
        },
        "required": ["title", "n"],
    }
    doc = document(body, ANSWER, description="Make a thing.\n\nMore words.", summary="Thing")
    thing = declarations(doc)["POST /v1/thing"]
    assert thing.description == "Make a thing (POST /v1/thing). Memory API for AI agents."
    bazaar = thing.extensions[BAZAAR.key]
    schema = bazaar["schema"]["properties"]["input"]["properties"]["body"]
    assert set(schema["properties"]) == {"title", "n"} and "title" not in schema
    assert schema["properties"]["n"] == {"type": ["integer", "null"], "minimum": 2}
    assert bazaar["info"]["input"]["body"] == {"title": "str", "n": 2}
    assert bazaar["info"]["output"]["example"] == {"id": "string"}


@pytest.mark.parametrize(
    "body",
    [
        {"$ref": "#/components/schemas/Loop"},  # a type that holds itself
        {"type": "object", "properties": {"k": {"type": "string", "pattern": "^a+$"}},
         "required": ["k"]},  # no example is made for a pattern
        {"$ref": "https://example.com/schema.json"},  # nothing is fetched
    ],
)  # fmt: skip
def test_what_cannot_be_declared_says_so(body: dict[str, Any]) -> None:
    doc = document(body, ANSWER)
    doc["components"]["schemas"]["Loop"] = {
        "type": "object", "properties": {"next": {"$ref": "#/components/schemas/Loop"}},
    }  # fmt: skip
    with pytest.raises(UndeclarableRoute, match=r"^POST /v1/thing: (unresolvable|recursive|no ex)"):
        declarations(doc)


# ---- paying, and what the facilitator is handed ----------------------------------------------


async def test_a_stock_client_pays_and_the_facilitator_can_catalogue_the_route(
    settings: Settings, chain: DevChain, payer: LocalAccount
) -> None:
    """x402's own client echoes the declaration in its proof and pays; Engram hands its
    facilitator its own declaration and resource, which x402's facilitator-side extraction
    turns into a catalogue entry. A client's doctored echo is not what reaches the facilitator."""
    with LocalFacilitatorServer(chain.relayer.key.hex(), chain.rpc_url, "eip155:8453") as remote:
        app = create_app(changed(paid_only(settings, chain), x402={"facilitator_url": remote.url}))
        async with AsyncTestClient(app=app, timeout=60) as client:
            body = {"content": f"Discovered memory {uuid.uuid4()}"}
            r = await client.post("/v1/store", json=body, headers=auth(payer))
            paid_headers = await reference_payment(payer, r)
            r = await client.post("/v1/store", json=body, headers={**auth(payer), **paid_headers})
            assert r.status_code == 201, r.text
            memory_id = r.json()["id"]

            # an update, its proof's echo doctored: another route and description
            r = await client.patch(f"/v1/memories/{memory_id}", json={"importance": 0.9},
                                   headers=auth(payer))  # fmt: skip
            required = declared(r)
            payload = await signed_payload(payer, required)
            doctored = payload.model_dump(by_alias=True, exclude_none=True)
            doctored["extensions"][BAZAAR.key]["routeTemplate"] = "/elsewhere/:id"
            doctored["resource"]["description"] = "something else"
            value = base64.b64encode(json.dumps(doctored).encode()).decode()
            r = await client.patch(f"/v1/memories/{memory_id}", json={"importance": 0.9},
                                   headers={**auth(payer), "PAYMENT-SIGNATURE": value})  # fmt: skip
            assert r.status_code == 200, r.text
    settled = [req["body"] for req in remote.requests if req["path"] == "/settle"]
    assert len(settled) == 2
    entries = [
        extract_discovery_info(s["paymentPayload"], s["paymentRequirements"]) for s in settled
    ]
    store, update = entries
    assert store is not None and update is not None
    assert store.method == "POST" and store.resource_url.endswith("/v1/store")
    assert store.service_name == "Engram" and store.tags and "memory" in store.tags
    assert store.description and "POST /v1/store" in store.description
    assert update.method == "PATCH" and update.route_template == "/v1/memories/:memory_id"
    assert update.resource_url.endswith("/v1/memories/:memory_id")
    assert update.description and "something else" not in update.description
