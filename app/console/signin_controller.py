"""The console's sign-in: a browser wallet's SIGN-IN-WITH-X, or a one-time link from
`engram console` (/console/auth/...), and the session's own pages (home, sign-in page, sign-out)."""

from __future__ import annotations

from typing import Annotated, Any
from urllib.parse import urlsplit

import msgspec
from litestar import Controller, Request, Response, get, post
from litestar.datastructures import State
from litestar.di import NamedDependency
from litestar.enums import RequestEncodingType
from litestar.params import Body, FromPath, JSONBody
from litestar.response import Redirect, Template
from litestar.status_codes import HTTP_200_OK, HTTP_303_SEE_OTHER
from pydantic import ValidationError
from x402.extensions.sign_in_with_x import SIWxPayload

from app.auth.signature import ADDRESS_RE, WalletAuthError
from app.auth.siwx import MAX_DOMAIN_CHARS, SIWX_HEADER, SiwxVerifier
from app.console.pages import (
    PUBLIC,
    CsrfForm,
    Form,
    PageController,
    Session,
    check_csrf,
    cleared_cookie,
    own_origin,
    render,
    require_own_origin,
    session_cookie,
)
from app.console.schemas import ChallengeIn, ChallengeOut, LinkOut, SignedIn, SignInIn
from app.console.service import LINK_TTL_SECONDS, ConsoleSessions
from app.core.errors import InvalidInput, Unauthorized
from app.core.request_values import ConsoleSession
from app.http.body import takes_form
from app.http.params import Conn
from app.http.state import state_of


class LinkForm(msgspec.Struct, kw_only=True):
    """What the link's page posts: nothing (its script, or its button), or, from the page that
    asks before a switch of wallet, `confirm=switch` with the signed-in session's CSRF token."""

    confirm: str = ""
    csrf_token: str = ""

    def confirms_switch_from(self, session: ConsoleSession | None) -> bool:
        return (
            session is not None and self.confirm == "switch"
            and session.csrf_matches(self.csrf_token)
        )  # fmt: skip


class ConsoleAuthController(Controller):
    path = "/console/auth"
    opt = PUBLIC

    @post("/challenge", status_code=HTTP_200_OK)
    async def challenge(
        self, request: Request[Any, Any, State], conn: Conn, siwx: NamedDependency[SiwxVerifier],
        data: JSONBody[ChallengeIn],
    ) -> ChallengeOut:  # fmt: skip
        """A SIGN-IN-WITH-X challenge for a browser wallet, and the message to sign."""
        require_own_origin(request)
        if not ADDRESS_RE.match(data.address):
            raise InvalidInput("address must be a 0x-prefixed 20-byte hex address",
                               {"field": "address"})  # fmt: skip
        origin = own_origin(request)
        if len(urlsplit(origin).netloc) > MAX_DOMAIN_CHARS:  # no proof for it could sign in
            raise InvalidInput(f"The Host header is longer than {MAX_DOMAIN_CHARS} characters",
                               {"header": "host"})  # fmt: skip
        challenge = await siwx.challenge(conn, origin)
        # Engram's own linear formatter, not x402's create_siwx_message: that one runs siwe's
        # ABNF grammar over the URI, which comes from the Host header here (app/auth/siwx.py).
        message = siwx.message_for(challenge, data.address)
        return ChallengeOut(msgspec.to_builtins(challenge), message)

    @post("/signin", status_code=HTTP_200_OK)
    async def sign_in(
        self, request: Request[Any, Any, State], conn: Conn, siwx: NamedDependency[SiwxVerifier],
        console_sessions: NamedDependency[ConsoleSessions], data: JSONBody[SignInIn],
    ) -> Response[SignedIn]:  # fmt: skip
        """The challenge back, signed by the browser wallet: a session cookie."""
        require_own_origin(request)
        origin = own_origin(request)
        try:
            payload = SIWxPayload.model_validate(
                {**data.challenge, "address": data.address, "signature": data.signature}
            )
            wallet = await siwx.verify_payload(conn, payload, origin)
        except ValidationError as exc:
            raise InvalidInput("The signed challenge is malformed", {"field": "challenge"}) from exc
        except WalletAuthError as exc:
            raise Unauthorized(f"Sign-in refused: {exc}") from exc
        started = await console_sessions.start(conn, wallet)
        return Response(
            SignedIn(wallet, "/console/memories"),
            cookies=[session_cookie(request, started.token, console_sessions.ttl_seconds)],
        )

    @post("/links", status_code=HTTP_200_OK)
    async def link(
        self, request: Request[Any, Any, State], conn: Conn, siwx: NamedDependency[SiwxVerifier],
        console_sessions: NamedDependency[ConsoleSessions],
    ) -> LinkOut:  # fmt: skip
        """`engram console`: a SIGN-IN-WITH-X header buys a one-time sign-in link."""
        proof = request.headers.get(SIWX_HEADER)
        if not proof:
            raise Unauthorized("Send a SIGN-IN-WITH-X header (nonce from GET /auth/nonce)")
        origin = own_origin(request)
        try:
            wallet = await siwx.verify(conn, proof, origin)
        except WalletAuthError as exc:
            raise Unauthorized(f"Sign-in refused: {exc}") from exc
        token = await console_sessions.issue_link(conn, wallet)
        return LinkOut(f"{origin}/console/auth/link/{token}", wallet, LINK_TTL_SECONDS)

    @get("/link/{token:str}")
    async def link_page(self, token: FromPath[str]) -> Template:
        """A one-time link from `engram console`: a page whose script (or button) posts it back.
        Opening the link spends nothing, so a chat app that fetches links to preview them
        cannot use it up; only a browser that runs the page signs in."""
        return render("link.html", None, token=token)

    @post("/link/{token:str}", status_code=HTTP_303_SEE_OTHER, opt=takes_form())
    async def open_link(
        self, request: Request[Any, Any, State], conn: Conn, token: FromPath[str],
        console_sessions: NamedDependency[ConsoleSessions],
        data: Annotated[LinkForm, Body(media_type=RequestEncodingType.URL_ENCODED)],
    ) -> Response[Any]:  # fmt: skip
        """Spend the link: a session for its wallet, once, from the link's own page.

        A browser signed in as another wallet is asked first, and the server holds to it (the
        page's script posts the link at once, with no confirmation): the answer is a page that
        names both wallets, the link unspent and the session kept, until the person confirms
        from that page (its `confirm` field and the session's CSRF token). Only then does the
        link end the old session and start its own. Else a link someone else sent would sign a
        browser in to their wallet without a word (login CSRF)."""
        require_own_origin(request)
        current: ConsoleSession | None = state_of(request.scope).get("console_session")
        wallet = await console_sessions.link_wallet(conn, token)
        switching = wallet is not None and current is not None and current.wallet != wallet
        if switching and not data.confirms_switch_from(current):
            return render("switch.html", current, token=token, wallet=wallet)
        if wallet is None or await console_sessions.redeem_link(conn, token) is None:
            return render(
                "signin.html", None, status_code=401,
                error="This sign-in link was used already or has expired: run `engram console`"
                      " again for a new one.",
            )  # fmt: skip
        if switching:
            await console_sessions.end(conn, state_of(request.scope)["console_token"])
        started = await console_sessions.start(conn, wallet)
        return Redirect(
            "/console/memories",
            status_code=HTTP_303_SEE_OTHER,
            cookies=[session_cookie(request, started.token, console_sessions.ttl_seconds)],
        )


class ConsoleSessionController(PageController):
    """The session's own pages: home, the sign-in page, signing out."""

    @get("/", include_in_schema=False)
    async def home(self, request: Request[Any, Any, State]) -> Redirect:
        signed = state_of(request.scope).get("console_session") is not None
        return Redirect("/console/memories" if signed else "/console/signin")

    @get("/signin")
    async def signin_page(self, request: Request[Any, Any, State]) -> Response[Any]:
        if state_of(request.scope).get("console_session") is not None:
            return Redirect("/console/memories")
        return render("signin.html", None)

    @post("/signout", status_code=HTTP_303_SEE_OTHER, opt=takes_form())
    async def sign_out(
        self, request: Request[Any, Any, State], conn: Conn, session: Session,
        console_sessions: NamedDependency[ConsoleSessions],
        data: Annotated[CsrfForm, Form],
    ) -> Redirect:  # fmt: skip
        check_csrf(session, data.csrf_token)
        await console_sessions.end(conn, state_of(request.scope)["console_token"])
        return Redirect("/console/signin", status_code=HTTP_303_SEE_OTHER,
                        cookies=[cleared_cookie()])  # fmt: skip
