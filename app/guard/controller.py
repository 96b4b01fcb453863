"""HTTP for namespace guards: read and set a namespace's mode (approving a quarantined memory is
memory's: app/memory/quarantine_controller.py).

Both are the owner's: a grantee or an agent key reaches neither (no route here acts for an
owner, so app/access/requests.py `only_where_grants_reach` answers 403)."""

from __future__ import annotations

from typing import cast

from litestar import Controller, get, put
from litestar.params import FromPath, JSONBody
from litestar.status_codes import HTTP_200_OK

from app.core.errors import InvalidInput
from app.core.schemas import MAX_NAME_CHARS, nfc_names
from app.guard import service as guard
from app.guard.schemas import GuardAnswer, GuardIn
from app.guard.service import GuardMode
from app.http.params import Conn, WalletRequest


def _namespace(raw: str) -> str:
    """A namespace named in the path, in NFC, within the names' limits (a 422 otherwise)."""
    name: str = nfc_names(raw)
    if not name.strip() or len(name) > MAX_NAME_CHARS or "\x00" in name:
        raise InvalidInput(
            f"namespace must be 1..{MAX_NAME_CHARS} characters, none of them NUL",
            {"field": "namespace"},
        )
    return name


class GuardController(Controller):
    path = "/v1"
    tags = ["memory poisoning"]

    @get("/namespaces/{namespace:str}/guard")
    async def get_guard(
        self, request: WalletRequest, conn: Conn, namespace: FromPath[str]
    ) -> GuardAnswer:
        """The namespace's guard mode (`flag` unless its owner set another)."""
        name = _namespace(namespace)
        mode = await guard.mode_of(conn, request.user, name)
        return GuardAnswer(name, cast(GuardMode, mode))

    @put("/namespaces/{namespace:str}/guard", status_code=HTTP_200_OK)
    async def set_guard(
        self, request: WalletRequest, conn: Conn, namespace: FromPath[str], data: JSONBody[GuardIn]
    ) -> GuardAnswer:
        """Set what the namespace does with flagged memories, and with others' writes."""
        name = _namespace(namespace)
        await guard.set_mode(conn, request.user, name, data.mode)
        return GuardAnswer(name, data.mode)
