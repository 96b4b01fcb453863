"""Engram over MCP: the same tools on streamable HTTP at /mcp (`engram serve`) and on stdio
(`engram mcp`, for desktop agents, talking to a configured Engram).

One source of truth: every tool call is carried out as the REST request it stands for
(app/mcp/rest.py): in process through the app's own ASGI entry on /mcp, over HTTP from
`engram mcp`. The alternative, calling the services the controllers call, would need a second
copy of what lives around them: the msgspec body validation and its 4xx shapes, the wallet
middleware, the payment gate (which reads the route's price, the x402 headers and the request
fingerprint), the request-owned transaction that settles before it commits, the per-route rate
limits and the response shapes. Going through REST keeps all of it identical by construction,
at the cost of one JSON encode/decode per call.
"""
