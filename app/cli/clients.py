"""`engram console` and `engram mcp`: this machine's way into a running Engram, as a one-time
console sign-in link or as an MCP server on stdio for desktop agents."""

from __future__ import annotations

import argparse
import asyncio
import os


def cmd_console(args: argparse.Namespace) -> None:
    """Sign in to the console with ENGRAM_PRIVATE_KEY: a one-time link, opened or printed."""
    import webbrowser

    from app.console.link import ConsoleLinkError, console_link

    key = os.environ.get("ENGRAM_PRIVATE_KEY") or os.environ.get("MEMOCLAW_PRIVATE_KEY")
    if not key:
        raise SystemExit("engram console: set ENGRAM_PRIVATE_KEY in the environment")
    url = args.url or os.environ.get("ENGRAM_URL") or "http://127.0.0.1:8000"
    try:
        link = console_link(url, key)
    except ConsoleLinkError as exc:
        raise SystemExit(f"engram console: {exc}") from exc
    if args.print_url or not webbrowser.open(link):
        print(link)
    else:
        print("engram console: opened the console in your browser (the link works once)")


def cmd_mcp(args: argparse.Namespace) -> None:
    from app.mcp.stdio import serve_stdio

    asyncio.run(serve_stdio(os.environ, args.url))
