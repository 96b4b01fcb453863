"""A real browser for the console's tests: Playwright (from PyPI) driving Debian's chromium
(installed when missing: tests/support/chromium.py), and a test EIP-1193 wallet whose
signatures are made by eth-account in the test process."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from dataclasses import dataclass, field

from eth_account.messages import encode_defunct
from eth_account.signers.local import LocalAccount
from playwright.sync_api import Browser, BrowserContext, ConsoleMessage, Page, sync_playwright

from tests.support.chromium import OFFLINE_FLAGS, chromium

# No network beyond loopback (tests/support/chromium.py); Playwright says headless itself.
FLAGS = [flag for flag in OFFLINE_FLAGS if flag != "--headless"]


@contextlib.contextmanager
def browser() -> Iterator[Browser]:
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(chromium()), args=FLAGS, headless=True)
        try:
            yield b
        finally:
            b.close()


# window.ethereum as a wallet extension provides it (EIP-1193): accounts, personal_sign.
PROVIDER = """
(() => {
  const address = %s;
  window.ethereum = {
    isEngramTestWallet: true,
    async request({ method, params }) {
      if (method === "eth_requestAccounts" || method === "eth_accounts") return [address];
      if (method === "personal_sign") return await window.engramTestSign(params[0], params[1]);
      throw Object.assign(new Error(`unsupported ${method}`), { code: 4200 });
    },
  };
})();
"""


def with_wallet(context: BrowserContext, account: LocalAccount) -> None:
    """Give the context's pages a browser wallet that signs as `account`."""

    def sign(message_hex: str, address: str) -> str:
        assert address.lower() == account.address.lower(), address
        message = bytes.fromhex(message_hex.removeprefix("0x"))
        signed = account.sign_message(encode_defunct(primitive=message))
        return "0x" + signed.signature.hex().removeprefix("0x")

    context.expose_function("engramTestSign", sign)
    context.add_init_script(PROVIDER % json.dumps(account.address))


@dataclass
class Watched:
    """What a page asked for and complained about, for the tests to check."""

    requests: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    dialogs: list[str] = field(default_factory=list)


def watch(page: Page) -> Watched:
    seen = Watched()
    page.on("request", lambda r: seen.requests.append(r.url))

    def console(message: ConsoleMessage) -> None:
        if message.type == "error":
            where = message.location
            seen.problems.append(f"{message.text} ({where.get('url')}:{where.get('lineNumber')})")

    page.on("console", console)
    page.on("pageerror", lambda e: seen.problems.append(f"page error: {e}"))

    def dialog(d) -> None:  # type: ignore[no-untyped-def]
        seen.dialogs.append(d.message)
        d.dismiss()

    page.on("dialog", dialog)
    return seen
