"""`engram setup`: from nothing to an agent with memory. It asks (or reads flags, for scripts),
then sets up a wallet (created, imported, or the one saved before), the server (checked, or
started), each chosen client's configuration, and prints a summary and the console's link.

The rules for files: a file that would change is never overwritten without asking, or without
`--force` when nothing is asked (a copy of it is kept beside it); an existing JSON file is merged
into, so only Engram's entries change and every other key stays; a file that is not valid JSON
is never rewritten, even with --force; a file holding a key or a token is written 0600. Keys are
never printed whole.

Exit code: 0 when everything chosen is done (or already was); 1 when a file was left as it was
for lack of --force or refused, a server setup started did not come up, or /mcp over HTTP got no
token; 2 for an argument that cannot be used (an invalid private key among them).
"""

from __future__ import annotations

import argparse
import getpass
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from app.setup import files, server
from app.setup.service import (
    CLAUDE_MARKETPLACE,
    CLAUDE_PLUGIN,
    KEY_ENV,
    MCP_SERVER_NAME,
    Document,
    InvalidArgument,
    InvalidPrivateKey,
    JsonObject,
    NoAnswer,
    Paths,
    SetupError,
    Unmergeable,
    Wallet,
    claude_code_settings,
    client_paths,
    dotenv_with,
    json_document,
    load_json,
    mcp_bearer_token,
    mcp_http_entry,
    mcp_stdio_entry,
    memoclaw_cli_config,
    memoclaw_key,
    new_wallet,
    openclaw_config,
    parse_private_key,
    saved_wallet,
    wallet_record,
    with_mcp_server,
)

CLIENTS = ("memoclaw-cli", "mcp", "claude-code", "openclaw")
TRANSPORTS = ("stdio", "http")
DEFAULT_WAIT_S = 180.0  # a first start: initdb, the migrations, the embedding model built once


class Outcome(StrEnum):
    CREATED = "created"
    UPDATED = "updated"
    UNCHANGED = "unchanged"
    KEPT = "kept"  # would change; the user said no
    SKIPPED = "skipped"  # would change; nothing asked and no --force, or could not be built
    REFUSED = "refused"  # not a file setup rewrites


FAILURES = {Outcome.SKIPPED, Outcome.REFUSED}


@dataclass(frozen=True)
class Result:
    outcome: Outcome
    path: Path
    what: str
    note: str = ""


def add_setup_command(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    setup = sub.add_parser(
        "setup",
        help="create or import a wallet, check or start the server, configure MemoClaw's CLI,"
        " an MCP client and the Claude Code and OpenClaw plugins",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    setup.add_argument("--url", default=None, help="Engram's URL; default $ENGRAM_URL or :8000")
    wallet = setup.add_mutually_exclusive_group()
    wallet.add_argument(
        "--private-key",
        metavar="KEY",
        help=f"import this wallet key (hex); ${KEY_ENV} does the same without showing in ps",
    )
    wallet.add_argument(
        "--from-memoclaw",
        action="store_true",
        help="import MemoClaw's CLI wallet ($MEMOCLAW_PRIVATE_KEY or ~/.memoclaw/config.json)",
    )
    setup.add_argument(
        "--start-server",
        action="store_true",
        help="start `engram serve` in the background when the URL (on this machine) is down",
    )
    setup.add_argument(
        "--wait",
        type=float,
        default=DEFAULT_WAIT_S,
        metavar="SECONDS",
        help=f"how long a started server may take to be ready (default {DEFAULT_WAIT_S:.0f})",
    )
    setup.add_argument(
        "--memoclaw-cli", action="store_true", help="MemoClaw's CLI: ~/.memoclaw/config.json"
    )
    setup.add_argument(
        "--mcp",
        nargs="?",
        const="stdio",
        choices=TRANSPORTS,
        help="an MCP server entry: stdio (`engram mcp`, the default) or http (/mcp, with a"
        " session token)",
    )
    setup.add_argument(
        "--mcp-config",
        metavar="PATH",
        default=None,
        help="the file holding `mcpServers` (default ~/.claude.json, Claude Code's user"
        " scope; a project's .mcp.json works too)",
    )
    setup.add_argument("--claude-code", action="store_true", help="the Claude Code hooks plugin")
    setup.add_argument("--openclaw", action="store_true", help="the OpenClaw memory plugin")
    setup.add_argument("--all", action="store_true", help="every client above")
    setup.add_argument(
        "--force",
        action="store_true",
        help="update files that would change without asking (a copy of each is kept); never"
        " a file that is not valid JSON",
    )
    asking = setup.add_mutually_exclusive_group()
    asking.add_argument(
        "-y", "--yes", action="store_true", help="ask nothing (as when stdin is not a terminal)"
    )
    asking.add_argument(
        "--interactive",
        action="store_true",
        help="ask even when stdin is not a terminal (answers piped in)",
    )
    setup.set_defaults(func=cmd_setup)


def cmd_setup(args: argparse.Namespace) -> None:
    import platformdirs

    interactive = bool(args.interactive or (not args.yes and sys.stdin.isatty()))
    mcp_config = Path(args.mcp_config).expanduser().absolute() if args.mcp_config else None
    home = Path.home()
    paths = client_paths(home, platformdirs.user_config_path("engram"), os.environ, mcp_config)
    try:
        code = Setup(args, Prompter(interactive), os.environ, home, paths).run()
    except InvalidArgument as exc:
        print(f"engram setup: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    except SetupError as exc:
        print(f"engram setup: {exc}", file=sys.stderr)
        raise SystemExit(1) from None
    if code:
        raise SystemExit(code)


class Prompter:
    """Questions on stdin and stdout; when not interactive, each question takes its default."""

    def __init__(self, interactive: bool) -> None:
        self.interactive = interactive

    def ask(self, question: str, default: str) -> str:
        if not self.interactive:
            return default
        try:
            answer = input(f"{question} ")
        except EOFError:
            print()
            return default
        return answer.strip() or default

    def confirm(self, question: str, default: bool) -> bool:
        hint = "[Y/n]" if default else "[y/N]"
        while True:
            answer = self.ask(f"{question} {hint}", "y" if default else "n").lower()
            if answer in ("y", "yes"):
                return True
            if answer in ("n", "no"):
                return False
            print("  answer y or n")

    def choose(self, question: str, options: dict[str, str], default: str) -> str:
        """One key of `options`, typed whole or by a prefix that names only it."""
        listed = "; ".join(f"{key}: {label}" for key, label in options.items())
        while True:
            answer = self.ask(f"{question} ({listed}) [{default}]", default).lower()
            found = [key for key in options if key.startswith(answer)]
            if len(found) == 1:
                return found[0]
            print(f"  answer one of: {', '.join(options)}")

    def secret(self, question: str) -> str:
        """A line not echoed on a terminal (getpass); read plainly from a pipe."""
        if sys.stdin.isatty():
            return getpass.getpass(f"{question} ")
        print(question, end=" ", flush=True)
        line = sys.stdin.readline()
        print()
        if not line:
            raise NoAnswer("no private key given (stdin closed)")
        return line.strip()


class Setup:
    def __init__(
        self,
        args: argparse.Namespace,
        prompt: Prompter,
        env: Mapping[str, str],
        home: Path,
        paths: Paths,
    ) -> None:
        self.args = args
        self.prompt = prompt
        self.env = env
        self.home = home
        self.paths = paths
        self.failed = False  # something chosen was not done: exit code 1
        self.results: list[Result] = []
        self.next_steps: list[str] = []

    def run(self) -> int:
        url = server.normalize_url(
            self.args.url or self.env.get("ENGRAM_URL") or server.DEFAULT_URL
        )
        wallet, origin = self.choose_wallet()
        say("wallet", f"{wallet.address} ({origin}; key {wallet.masked_key})")
        health = self.check_server(url)
        clients, transport = self.choose_clients()
        for document in self.documents(clients, transport, url, wallet, health):
            self.results.append(self.apply(document))
        self.summary()
        link = server.console_link(url, wallet, health.up)
        if link.signed_in:
            say("console", f"{link.url} (a one-time sign-in link)")
        else:
            say("console", f"{link.url} (to sign in: engram console --url {url}, with"
                           f" {KEY_ENV} set to the wallet's key)")  # fmt: skip
        failed = self.failed or any(r.outcome in FAILURES for r in self.results)
        return 1 if failed else 0

    # ---- the wallet ---------------------------------------------------------------------------

    def choose_wallet(self) -> tuple[Wallet, str]:
        """--private-key, $ENGRAM_PRIVATE_KEY, --from-memoclaw, the wallet saved by an earlier
        setup (so running it again changes nothing), or, asked or by default, a new one."""
        if self.args.private_key:
            return parse_private_key(self.args.private_key), "imported from --private-key"
        if self.env.get(KEY_ENV):
            return parse_private_key(self.env[KEY_ENV]), f"imported from ${KEY_ENV}"
        theirs = self.memoclaw_wallet_key()
        if self.args.from_memoclaw:
            if not theirs:
                raise InvalidArgument(
                    "--from-memoclaw: MemoClaw's CLI has no key (no $MEMOCLAW_PRIVATE_KEY, no"
                    f" privateKey in {self.shown(self.paths.memoclaw_cli)})"
                )
            return parse_private_key(theirs), "imported from MemoClaw's CLI"
        where = self.shown(self.paths.wallet)
        try:
            saved = saved_wallet(files.read(files.resolved(self.paths.wallet)))
        except SetupError as exc:
            raise SetupError(f"{where}: {exc}; fix it or move it aside") from None
        if saved and self.prompt.confirm(f"Use the wallet in {where} ({saved.address})?", True):
            return saved, f"saved in {where}"
        if self.prompt.interactive:
            options = {"create": "a new wallet", "import": "paste a private key"}
            if theirs:
                options["memoclaw"] = "MemoClaw's CLI wallet"
            choice = self.prompt.choose("Wallet?", options, "create")
            if choice == "memoclaw" and theirs:
                return parse_private_key(theirs), "imported from MemoClaw's CLI"
            while choice == "import":
                try:
                    return parse_private_key(self.prompt.secret("Private key (hex):")), "imported"
                except InvalidPrivateKey as exc:  # asked again; stdin closed ends it (NoAnswer)
                    print(f"  {exc}")
        return new_wallet(), "created"

    def memoclaw_wallet_key(self) -> str | None:
        try:
            return memoclaw_key(self.env, files.read(files.resolved(self.paths.memoclaw_cli)))
        except Unmergeable:
            return None

    # ---- the server ---------------------------------------------------------------------------

    def check_server(self, url: str) -> server.Health:
        health = server.check(url)
        say("server", f"{url}: {health.detail}")
        if health.reachable:
            return health
        if not server.is_local(url):
            say("", "not on this machine: start Engram there (the clients use this URL)")
            return health
        start = self.args.start_server or (
            self.prompt.interactive
            and self.prompt.confirm("Start `engram serve` in the background now?", True)
        )
        if not start:
            say("", "start it with `engram serve` (or --start-server); the clients use this URL")
            return health
        log = server.data_dir() / "serve.log"
        process = server.start(url, log)
        say("", f"starting engram serve (pid {process.pid}, log {self.shown(log)}),"
                f" up to {self.args.wait:.0f} s…")  # fmt: skip
        health = server.wait_ready(url, process, self.args.wait)
        if health.up:
            say("", f"{health.detail}; it runs in the background (stop it: kill {process.pid})")
        else:
            self.failed = True
            say("", f"{health.detail}: see {self.shown(log)}")
        return health

    # ---- the clients --------------------------------------------------------------------------

    def choose_clients(self) -> tuple[set[str], str]:
        args, paths = self.args, self.paths
        flagged = {
            "memoclaw-cli": args.memoclaw_cli,
            "mcp": args.mcp is not None,
            "claude-code": args.claude_code,
            "openclaw": args.openclaw,
        }
        chosen = set(CLIENTS) if args.all else {name for name, on in flagged.items() if on}
        transport = args.mcp or "stdio"
        if chosen or not self.prompt.interactive:
            if not chosen:
                say("clients", "none chosen (--memoclaw-cli, --mcp, --claude-code, --openclaw"
                               " or --all): only the wallet is saved")  # fmt: skip
            return chosen, transport
        ask = self.prompt.confirm
        if ask(f"Configure MemoClaw's CLI ({self.shown(paths.memoclaw_cli)})?", True):
            chosen.add("memoclaw-cli")
        if ask(f"Add Engram as an MCP server in {self.shown(paths.mcp)}?", True):
            chosen.add("mcp")
            transport = self.prompt.choose(
                "MCP transport?",
                {"stdio": "`engram mcp`, started by the client", "http": "Engram's /mcp"},
                "stdio",
            )
        claude = paths.claude_settings.parent.exists()  # the default: whether it is installed
        if ask(f"Install the Claude Code plugin ({self.shown(paths.claude_settings)})?", claude):
            chosen.add("claude-code")
        openclaw = paths.openclaw_config.parent.exists()
        if ask(f"Install the OpenClaw plugin ({self.shown(paths.openclaw_config)})?", openclaw):
            chosen.add("openclaw")
        return chosen, transport

    def documents(
        self, clients: set[str], transport: str, url: str, wallet: Wallet, health: server.Health
    ) -> list[Document]:
        paths = self.paths
        documents = [
            json_document(
                "Engram's wallet", paths.wallet, True, lambda doc: wallet_record(doc, wallet)
            )
        ]
        if "memoclaw-cli" in clients:
            documents.append(json_document(
                "MemoClaw's CLI", paths.memoclaw_cli, True,
                lambda doc: memoclaw_cli_config(doc, wallet, url),
            ))  # fmt: skip
        if "mcp" in clients:
            entry = self.mcp_entry(transport, url, wallet, health)
            if entry is not None:
                documents.append(json_document(
                    f'MCP server "{MCP_SERVER_NAME}" ({transport})', paths.mcp, True,
                    lambda doc: with_mcp_server(doc, entry),
                ))  # fmt: skip
        if "claude-code" in clients:
            hooks = self.integration("claude-code", paths.claude_settings, "Claude Code plugin")
            if hooks is not None:
                documents.append(json_document(
                    "Claude Code plugin", paths.claude_settings, True,
                    lambda doc: claude_code_settings(doc, hooks, url, wallet, sys.executable),
                ))  # fmt: skip
                self.next_steps.append(
                    f"Claude Code: restart it to install {CLAUDE_PLUGIN}@{CLAUDE_MARKETPLACE}"
                    f" (or: claude plugin marketplace add {hooks} && claude plugin install"
                    f" {CLAUDE_PLUGIN}@{CLAUDE_MARKETPLACE})"
                )
        if "openclaw" in clients:
            memory = self.integration("openclaw", paths.openclaw_config, "OpenClaw plugin")
            if memory is not None:
                documents.append(json_document(
                    "OpenClaw plugin", paths.openclaw_config, False,
                    lambda doc: openclaw_config(doc, memory, url),
                ))  # fmt: skip
                documents.append(Document(
                    f"OpenClaw plugin's {KEY_ENV}", paths.openclaw_env, True,
                    lambda text: dotenv_with(text, KEY_ENV, wallet.private_key), is_json=False,
                ))  # fmt: skip
                if not (memory / "node_modules").is_dir():
                    self.next_steps.append(
                        f"OpenClaw: install the plugin's npm dependencies once: cd {memory}"
                        " && npm ci --omit=dev"
                    )
                self.next_steps.append("OpenClaw: restart the gateway (openclaw gateway restart)")
        return documents

    def mcp_entry(
        self, transport: str, url: str, wallet: Wallet, health: server.Health
    ) -> JsonObject | None:
        if transport == "stdio":
            return mcp_stdio_entry(server.engram_command(), url, wallet)
        # /mcp takes the REST API's identity; a static entry can carry a session token only
        try:
            kept = mcp_bearer_token(load_json(files.read(files.resolved(self.paths.mcp))), url)
        except Unmergeable:
            kept = None  # refused when it is applied
        if kept and server.token_still_good(kept, wallet):
            return mcp_http_entry(url, kept)
        what = f'MCP server "{MCP_SERVER_NAME}" (http)'
        if not health.up:
            self.results.append(Result(
                Outcome.SKIPPED, self.paths.mcp, what,
                "/mcp over HTTP needs a session token from a running server: start it (or"
                " --start-server), or use --mcp stdio",
            ))  # fmt: skip
            return None
        try:
            token = server.session_token(url, wallet)
        except SetupError as exc:
            self.results.append(Result(Outcome.SKIPPED, self.paths.mcp, what, str(exc)))
            return None
        self.next_steps.append(
            "MCP over HTTP: its session token expires (7 days unless ENGRAM_SESSION_TTL_SECONDS"
            " says otherwise); run `engram setup --mcp http --force` again to renew it"
        )
        return mcp_http_entry(url, token)

    def integration(self, name: str, path: Path, what: str) -> Path | None:
        from app.infra.project_files import shipped

        try:
            return shipped("integrations") / name
        except FileNotFoundError as exc:
            self.results.append(Result(Outcome.SKIPPED, path, what, str(exc)))
            return None

    # ---- files --------------------------------------------------------------------------------

    def apply(self, document: Document) -> Result:
        def result(outcome: Outcome, note: str = "") -> Result:
            return Result(outcome, document.path, document.what, note)

        path = files.resolved(document.path)
        try:
            current = files.read(path)
            new = document.update(current)
        except Unmergeable as exc:
            return result(
                Outcome.REFUSED,
                f"{exc}; setup never rewrites such a file, even with --force: fix it or move it"
                " aside, then run setup again",
            )
        if current is None:
            files.write(path, new, private=document.private)
            return result(Outcome.CREATED)
        if document.same(current, new):
            if document.private and not files.is_private(path):
                files.make_private(path)
                return result(Outcome.UNCHANGED, "its mode is now 0600 (it holds a key)")
            return result(Outcome.UNCHANGED)
        question = f"{self.shown(document.path)} would change ({document.what}). Update it?"
        if not self.args.force and not self.prompt.confirm(question, False):
            if self.prompt.interactive:
                return result(Outcome.KEPT, "left as it was")
            return result(
                Outcome.SKIPPED,
                "exists and would change; left as it was: run again with --force to update it"
                " (a copy of it is kept)",
            )
        backup = files.keep_previous(path)
        files.write(path, new, private=document.private)
        return result(Outcome.UPDATED, f"the previous one is kept as {self.shown(backup)}")

    # ---- output -------------------------------------------------------------------------------

    def summary(self) -> None:
        print("files:")
        width = max(len(outcome) for outcome in Outcome)
        for r in self.results:
            line = f"  {r.outcome:<{width}}  {self.shown(r.path)}  ({r.what})"
            print(line + (f": {r.note}" if r.note else ""))
        for step in self.next_steps:
            say("next", step)

    def shown(self, path: Path) -> str:
        """A path as the user reads it: under the home directory as ~/…"""
        try:
            return "~/" + str(path.relative_to(self.home))
        except ValueError:
            return str(path)


def say(label: str, text: str) -> None:
    print(f"{label:<9} {text}" if label or text else "")
