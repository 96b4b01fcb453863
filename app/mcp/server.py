"""The MCP server itself (mcp's low-level `Server`): tools, resources and instructions, each tool
call turned into its REST request and the answer into a tool result.

The low-level server is used rather than FastMCP because the tools are declared by JSON schema
(memoclaw-mcp's argument names, Engram's limits) and a paid call needs the request's `_meta` and
must set the result's `_meta`, which FastMCP's function signatures do not expose.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

import httpx
import jsonschema
import mcp.types as types
from mcp.server.lowlevel import Server
from mcp.server.lowlevel.helper_types import ReadResourceContents
from mcp.shared.context import RequestContext
from pydantic import AnyUrl
from x402.mcp import MCP_PAYMENT_RESPONSE_META_KEY

from app.mcp.payments import (
    MalformedPayment,
    payment_headers,
    payment_required,
    settlement,
)
from app.mcp.rest import Rest, RestAnswer, RestCall
from app.mcp.tools import TOOLS
from app.mcp.tools.tool import Tool, drop_nulls

log = logging.getLogger("engram.mcp")

SERVER_NAME = "engram"
INSTRUCTIONS = """\
Engram is your long-term memory across sessions, scoped to your wallet.
- At the start of a task, read the core memories (resource engram://core-memories or
  memoclaw_core_memories) or call memoclaw_context with the task.
- Before answering anything that may depend on earlier sessions (the user's preferences,
  decisions, project facts), call memoclaw_recall with a short query; trust results with
  similarity above ~0.3.
- When the user states a durable fact, preference, decision or correction, store it with
  memoclaw_store: one self-contained fact per call, with a namespace per project. When a stored
  fact is wrong, memoclaw_update it instead of storing a contradiction. At the end of a long
  exchange, memoclaw_ingest the conversation instead.
- Never store secrets (keys, passwords) or the recalled memories themselves again.
- store, recall, update, context, ingest, extract and consolidate are paid calls after the free
  tier (memoclaw_status shows what is left); the others are free. A paid call past the free tier
  answers an x402 PaymentRequired; retry with the payment in _meta["x402/payment"].
"""

RESOURCES = {
    "engram://core-memories": (
        "Core memories",
        "The wallet's most important memories (pinned, important, often used).",
        RestCall("GET", "/v1/core", query={"limit": 100}),
    ),
    "engram://namespaces": (
        "Namespaces",
        "The namespaces that hold the wallet's memories, with counts.",
        RestCall("GET", "/v1/namespaces"),
    ),
}

# Which REST client serves a request: in process from the HTTP request's scope, or the stdio
# server's remote one.
RestFor = Callable[[RequestContext[Any, Any, Any]], Rest]


def tool_definition(tool: Tool) -> types.Tool:
    return types.Tool(
        name=tool.name,
        title=tool.title,
        description=tool.description,
        inputSchema=tool.input_schema,
        outputSchema=tool.output,
        annotations=types.ToolAnnotations(
            title=tool.title,
            readOnlyHint=tool.read_only,
            destructiveHint=tool.destructive,
            idempotentHint=tool.idempotent,
            openWorldHint=False,
        ),
    )


def _text(value: Any) -> list[types.ContentBlock]:
    return [types.TextContent(type="text", text=json.dumps(value, indent=2))]


def error_result(code: str, message: str, details: Any = None) -> types.CallToolResult:
    """A tool error in the REST API's error shape."""
    body = {"error": {"code": code, "message": message, "details": details or {}}}
    return types.CallToolResult(content=_text(body), isError=True)


def _rest_error(answer: RestAnswer) -> types.CallToolResult:
    """A refused REST call as a tool error, in the REST API's own error shape."""
    try:
        body = answer.json()
    except ValueError:
        body = None
    if not isinstance(body, dict) or "error" not in body:
        body = {"error": {"code": "HTTP_" + str(answer.status), "message": answer.body.decode(
            "utf-8", "replace")[:500]}}  # fmt: skip
    body["error"]["status"] = answer.status
    return types.CallToolResult(content=_text(body), isError=True)


def tool_result(tool: Tool, answer: RestAnswer) -> types.CallToolResult:
    required = payment_required(answer)
    if required is not None:
        # x402's MCP transport: the requirement as the error result's structured content.
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=json.dumps(required))],
            structuredContent=required,
            isError=True,
        )
    if answer.status >= 400:
        return _rest_error(answer)
    structured = drop_nulls(tool.shape(answer.json()))
    try:
        jsonschema.validate(structured, tool.output)
    except jsonschema.ValidationError as exc:  # a bug here, never the caller's fault
        log.error("tool %s answered outside its output schema: %s", tool.name, exc.message)
        return error_result(
            "INTERNAL_ERROR", f"Engram answered outside the tool's output schema: {exc.message}"
        )
    receipt = settlement(answer)
    meta = {MCP_PAYMENT_RESPONSE_META_KEY: receipt} if receipt is not None else None
    return types.CallToolResult(
        content=_text(structured), structuredContent=structured, isError=False, _meta=meta
    )


def _meta_of(ctx: RequestContext[Any, Any, Any]) -> dict[str, Any]:
    return ctx.meta.model_dump(by_alias=True, exclude_none=True) if ctx.meta else {}


def build_server(rest_for: RestFor, version: str) -> Server[Any, Any]:
    server: Server[Any, Any] = Server(SERVER_NAME, version=version, instructions=INSTRUCTIONS)

    @server.list_tools()  # type: ignore[untyped-decorator,no-untyped-call]
    async def list_tools() -> list[types.Tool]:
        return [tool_definition(t) for t in TOOLS.values()]

    # Arguments are validated here, so a refusal has the REST API's error shape.
    @server.call_tool(validate_input=False)  # type: ignore[untyped-decorator]
    async def call_tool(name: str, arguments: dict[str, Any]) -> types.CallToolResult:
        tool = TOOLS.get(name)
        if tool is None:
            return error_result("NOT_FOUND", f"Unknown tool {name!r}")
        try:
            jsonschema.validate(arguments, tool.input_schema)
        except jsonschema.ValidationError as exc:
            field = ".".join(str(p) for p in exc.absolute_path) or None
            return error_result(
                "VALIDATION_ERROR", f"Invalid arguments: {exc.message}",
                {"field": field} if field else None,
            )  # fmt: skip
        ctx = server.request_context
        try:
            headers = payment_headers(_meta_of(ctx))
        except MalformedPayment as exc:
            return error_result("PAYMENT_REQUIRED", str(exc))
        call = tool.request(tool.pick(arguments))
        call = RestCall(call.method, call.path, call.query, call.body, {**call.headers, **headers})
        try:
            answer = await rest_for(ctx).send(call)
        except httpx.HTTPError as exc:  # `engram mcp` and an Engram it cannot reach
            return error_result("SERVICE_UNAVAILABLE", f"Engram did not answer: {exc!r}")
        return tool_result(tool, answer)

    @server.list_resources()  # type: ignore[untyped-decorator,no-untyped-call]
    async def list_resources() -> list[types.Resource]:
        return [
            types.Resource(
                uri=AnyUrl(uri), name=name, description=description, mimeType="application/json"
            )
            for uri, (name, description, _) in RESOURCES.items()
        ]

    @server.read_resource()  # type: ignore[untyped-decorator,no-untyped-call]
    async def read_resource(uri: AnyUrl) -> list[ReadResourceContents]:
        entry = RESOURCES.get(str(uri))
        if entry is None:
            raise ValueError(f"Unknown resource {uri}")
        answer = await rest_for(server.request_context).send(entry[2])
        if answer.status >= 400:
            raise ValueError(f"Engram answered {answer.status}: {answer.body[:300]!r}")
        return [
            ReadResourceContents(
                content=json.dumps(drop_nulls(answer.json())), mime_type="application/json"
            )
        ]

    return server
