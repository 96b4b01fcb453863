"""x402's bazaar discovery extension for every paid route, made once from the OpenAPI document.

A catalogue (a facilitator's bazaar) lists a paid resource when a payment for it reaches the
facilitator carrying the route's declaration: what to send (the request body's JSON schema, with
an example), what comes back (the success answer's schema, with an example), the service's name,
tags and a description. There is no registration step.

Everything here is read from the OpenAPI document Litestar already makes from the handlers' own
types (`/docs/openapi.json`): a paid operation is one that declares a 402 (app/http/openapi.py
derives it from the handler's price), its input is its request body (or query parameters), its
output its success answer, its description the handler's docstring or summary. Nothing is
written twice, so a new paid route is declared as soon as it exists. The declarations are built
once per process and looked up per 402: the 402 path is hot for paying agents.

The x402 package builds and checks them (`declare_discovery_extension`, the resource server's
`enrich_declaration` for the method, `validate_discovery_extension` as a facilitator runs it).
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

from x402.extensions.bazaar import (
    BAZAAR,
    OutputConfig,
    bazaar_resource_server_extension,
    declare_discovery_extension,
    validate_and_extract,
    validate_discovery_extension_spec,
)

# The bazaar's service metadata rules (x402 specs/extensions/bazaar.md, "Service Metadata on
# `resource`"): a name of 1-32 printable ASCII characters, at most 5 tags of at most 32.
MAX_SERVICE_NAME = 32
MAX_TAGS = 5
MAX_TAG = 32
SERVICE_TAGS = ("memory", "ai-agents")  # what every route is about; the operation's own follow

BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})
# Words for people reading the OpenAPI document, not for a catalogue's schema: dropped, so the
# PAYMENT-REQUIRED header (and the proof that echoes it) stays a few KiB.
WORDS = frozenset({"title", "description", "examples", "example", "externalDocs"})
# Either way, a declaration is 2-6 KiB of JSON: the 402's PAYMENT-REQUIRED header holds it in
# base64, and a stock client's proof echoes it (app/payments/proofs.py bounds a proof to fit).
_PRINTABLE_ASCII = re.compile(r"^[\x20-\x7e]+$")
_PATH_PARAMETER = re.compile(r"\{([^}:]+)(?::[^}]*)?\}")


class UndeclarableRoute(ValueError):
    """A paid route whose types x402's bazaar cannot describe (a bug to fix, not a client's)."""


@dataclass(frozen=True, eq=False)  # one per route, made once: its identity is its value
class Discovery:
    """What one paid route declares in its 402: the `bazaar` extension (`extensions`, ready to
    merge into PaymentRequired's), the v1 `outputSchema` of the same, and the service metadata
    of the `resource`."""

    route: str  # "POST /v1/store", as usage and the ledger name it
    extensions: Mapping[str, Any]
    output_schema_v1: Mapping[str, Any]
    description: str
    service_name: str
    tags: tuple[str, ...]


def route_key(method: str, path: str) -> str:
    return f"{method.upper()} {path}"


def declarations(document: Mapping[str, Any]) -> dict[str, Discovery]:
    """Every paid operation's declaration, by `route_key`. Raises UndeclarableRoute if one
    cannot be declared (a schema the example maker does not know, one x402 refuses)."""
    components = document.get("components", {}).get("schemas", {})
    info = document.get("info", {})
    service = _service_name(info.get("title", ""))
    about = " ".join(str(info.get("description", "")).split())  # the service's own line
    found: dict[str, Discovery] = {}
    for path, item in document.get("paths", {}).items():
        for method, operation in item.items():
            if isinstance(operation, dict) and "402" in operation.get("responses", {}):
                key = route_key(method, path)
                try:
                    found[key] = declare(
                        key, path, method.upper(), operation, components, service, about
                    )
                except UndeclarableRoute as exc:
                    raise UndeclarableRoute(f"{key}: {exc}") from exc
    return found


def declare(
    key: str,
    path: str,
    method: str,
    operation: Mapping[str, Any],
    components: Mapping[str, Any],
    service_name: str,
    about: str = "",
) -> Discovery:
    """One operation's declaration, checked as a facilitator checks it."""
    parameters = operation.get("parameters", [])
    path_params = _parameters_schema(parameters, "path", components)
    query_params = _parameters_schema(parameters, "query", components)
    output_schema = _answer_schema(operation, components)
    output = (
        OutputConfig(example=example_of(output_schema), schema=output_schema)
        if output_schema is not None
        else None
    )
    if method in BODY_METHODS:
        body = _body_schema(operation, components) or {"type": "object"}
        declared = declare_discovery_extension(
            input=example_of(body),
            input_schema=body,
            path_params_schema=path_params,
            body_type="json",
            output=output,
        )
    else:
        declared = declare_discovery_extension(
            input=example_of(query_params) if query_params else None,
            input_schema=query_params,
            path_params_schema=path_params,
            output=output,
        )
    # the method, put in info and schema by x402's own resource-server extension
    bazaar = bazaar_resource_server_extension.enrich_declaration(
        declared[BAZAAR.key], SimpleNamespace(method=method)
    )
    if path_params:
        # where a catalogue lists a route with an id in its path: "/v1/memories/:memory_id"
        bazaar["routeTemplate"] = _PATH_PARAMETER.sub(r":\1", path)
    for check in (validate_discovery_extension_spec(bazaar), validate_and_extract(bazaar)):
        if not check.valid:
            raise UndeclarableRoute("; ".join(check.errors))
    info = bazaar["info"]
    return Discovery(
        route=key,
        extensions={BAZAAR.key: bazaar},
        output_schema_v1=_v1_output_schema(info),
        description=_description(operation, key, about),
        service_name=service_name,
        tags=_tags(operation.get("tags", ())),
    )


def _v1_output_schema(info: Mapping[str, Any]) -> dict[str, Any]:
    """x402 v1's place for the same facts: a requirement's `outputSchema`, `{input, output}`."""
    shape = {"input": {**info["input"], "discoverable": True}}
    if "output" in info:
        shape["output"] = info["output"]
    return copy.deepcopy(shape)  # nothing shared with the v2 declaration


def _service_name(title: str) -> str:
    name = title.strip()[:MAX_SERVICE_NAME] or "Engram"
    if not _PRINTABLE_ASCII.match(name):
        raise UndeclarableRoute(f"service name {name!r} is not printable ASCII")
    return name


def _tags(own: Any) -> tuple[str, ...]:
    tags: list[str] = []
    for tag in (*SERVICE_TAGS, *own):
        tag = str(tag)
        fits = 0 < len(tag) <= MAX_TAG and _PRINTABLE_ASCII.match(tag)
        if fits and tag.lower() not in {t.lower() for t in tags}:
            tags.append(tag)
    return tuple(tags[:MAX_TAGS])


def _description(operation: Mapping[str, Any], key: str, about: str) -> str:
    """The handler's docstring (the operation's description) or, lacking one, its summary, with
    the route and what the service is: "Recall (POST /v1/recall). Memory API for AI agents…"."""
    text = str(operation.get("description") or operation.get("summary") or "").strip()
    first = " ".join(text.split("\n\n", 1)[0].split()).rstrip(".")  # first paragraph, one line
    described = f"{first} ({key})." if first else f"{key}."
    return f"{described} {about}" if about else described


# ---- schemas, from the document's own --------------------------------------------------------


def _json_content(holder: Mapping[str, Any]) -> Any:
    return holder.get("content", {}).get("application/json", {}).get("schema")


def _body_schema(operation: Mapping[str, Any], components: Mapping[str, Any]) -> Any:
    schema = _json_content(operation.get("requestBody", {}))
    return inline(schema, components) if schema is not None else None


def _answer_schema(operation: Mapping[str, Any], components: Mapping[str, Any]) -> Any:
    """The success answer's schema: the lowest 2xx with a JSON body."""
    for status, response in sorted(operation.get("responses", {}).items()):
        if status.startswith("2") and (schema := _json_content(response)) is not None:
            return inline(schema, components)
    return None


def _parameters_schema(
    parameters: Any, where: str, components: Mapping[str, Any]
) -> dict[str, Any] | None:
    """The parameters found `where` (path, query) as one object schema, None if there are none."""
    chosen = [p for p in parameters if p.get("in") == where]
    if not chosen:
        return None
    schema: dict[str, Any] = {
        "properties": {p["name"]: inline(p.get("schema", {}), components) for p in chosen}
    }
    required = [p["name"] for p in chosen if p.get("required")]
    if required:
        schema["required"] = required
    return schema


def inline(schema: Any, components: Mapping[str, Any], seen: tuple[str, ...] = ()) -> Any:
    """`schema` standing alone: every `#/components/schemas/...` reference replaced by what it
    names (a facilitator resolves no reference outside the declaration), the words dropped."""
    if isinstance(schema, list):
        return [inline(item, components, seen) for item in schema]
    if not isinstance(schema, dict):
        return schema
    ref = schema.get("$ref")
    if isinstance(ref, str):
        name = ref.rsplit("/", 1)[-1]
        if not ref.startswith("#/components/schemas/") or name not in components:
            raise UndeclarableRoute(f"unresolvable reference {ref!r}")
        if name in seen:
            raise UndeclarableRoute(f"recursive type {name!r} cannot stand alone")
        return inline(components[name], components, (*seen, name))
    return _compact(
        {
            key: _inline_value(key, value, components, seen)
            for key, value in schema.items()
            if key not in WORDS
        }
    )


def _compact(schema: dict[str, Any]) -> dict[str, Any]:
    """The same schema in fewer bytes: a union of bare types (`oneOf: [{type: string}, {type:
    null}]`, as msgspec writes an optional field) as one `type` list, a union of one as that
    one, and no `additionalProperties: {}` (what JSON Schema assumes anyway)."""
    if schema.get("additionalProperties") == {}:
        del schema["additionalProperties"]
    for union in ("oneOf", "anyOf"):
        options = schema.get(union)
        if not isinstance(options, list) or not options:
            continue
        if len(options) == 1 and isinstance(options[0], dict):
            if not set(options[0]) & (set(schema) - {union}):  # a union of one: that one
                del schema[union]
                schema.update(options[0])
        elif "type" not in schema and all(
            isinstance(o, dict) and list(o) == ["type"] for o in options
        ):
            kinds: list[Any] = []
            for option in options:
                listed = option["type"] if isinstance(option["type"], list) else [option["type"]]
                kinds += [kind for kind in listed if kind not in kinds]
            del schema[union]
            schema["type"] = kinds[0] if len(kinds) == 1 else kinds
    return schema


def _inline_value(
    key: str, value: Any, components: Mapping[str, Any], seen: tuple[str, ...]
) -> Any:
    if key in ("required", "enum", "const", "default"):  # values, not schemas
        return value
    if key in ("properties", "patternProperties", "$defs") and isinstance(value, dict):
        return {name: inline(item, components, seen) for name, item in value.items()}  # names kept
    return inline(value, components, seen)


# ---- examples that the schemas accept --------------------------------------------------------

_FORMAT_EXAMPLES = {
    "date-time": "2026-01-01T00:00:00Z",
    "date": "2026-01-01",
    "time": "00:00:00Z",
    "uuid": "00000000-0000-4000-8000-000000000000",
    "email": "agent@example.com",
    "uri": "https://example.com",
}


def example_of(schema: Any) -> Any:
    """The smallest value `schema` accepts, as the Swagger UI would show it: required fields
    only, one item per list, "string" for text. The declaration's checks (above) prove it."""
    if not isinstance(schema, dict):
        return None
    if "const" in schema:
        return schema["const"]
    if schema.get("enum"):
        return schema["enum"][0]
    if "default" in schema:
        return schema["default"]
    for combinator in ("oneOf", "anyOf"):
        if options := schema.get(combinator):
            not_null = [o for o in options if not (isinstance(o, dict) and o.get("type") == "null")]
            return example_of((not_null or options)[0])
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind == "object" or (kind is None and "properties" in schema):
        properties = schema.get("properties", {})
        return {name: example_of(properties.get(name, {})) for name in schema.get("required", [])}
    if kind == "array":
        count = max(1, schema.get("minItems", 0))
        if "maxItems" in schema:
            count = min(count, schema["maxItems"])
        return [example_of(schema.get("items", {})) for _ in range(count)]
    if kind == "string":
        return _string_example(schema)
    if kind in ("integer", "number"):
        return _number_example(schema, kind)
    if kind == "boolean":
        return False
    return None


def _string_example(schema: Mapping[str, Any]) -> str:
    if "pattern" in schema:
        raise UndeclarableRoute(f"no example is made for a pattern ({schema['pattern']!r})")
    text = _FORMAT_EXAMPLES.get(schema.get("format", ""), "string")
    low, high = schema.get("minLength", 0), schema.get("maxLength")
    if len(text) < low:
        text = text + "x" * (low - len(text))
    if high is not None and len(text) > high:
        text = text[:high]
    return text


def _number_example(schema: Mapping[str, Any], kind: str) -> int | float:
    value = schema.get("minimum", schema.get("exclusiveMinimum", -1) + 1)
    value = min(value, schema.get("maximum", value), schema.get("exclusiveMaximum", value + 1) - 1)
    return int(value) if kind == "integer" else float(value)
