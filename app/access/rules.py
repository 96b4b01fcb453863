"""Who acts on a wallet's memories in one request, and how far an agent key's delegation reaches.
No HTTP types here: app/access/requests.py reads them off the request."""

from __future__ import annotations

from dataclasses import dataclass

from app.core.contract import DEFAULT_NAMESPACE
from app.core.errors import Forbidden
from app.core.request_values import Delegation
from app.grants.service import COVERS

# The routes an agent key (and a grantee) may call for an owner: those marked acts_for_owner().
COVERED_ROUTES = "recall, list, get, store, update and context"


@dataclass(frozen=True)
class Actor:
    """Who acts: the wallet's owner (`OWNER`), or a grantee or agent key acting for it
    (`for_owner`), kept to one namespace (`kept_to`; None: the owner itself, or an agent key
    whose delegation names no namespaces and so reaches them all)."""

    for_owner: bool = False
    kept_to: str | None = None


OWNER = Actor()


def kept_to(delegation: Delegation, namespace: str | None, need: str) -> str | None:
    """The namespace a delegated request is kept to (None: any of the owner's), once the
    delegation covers `need` there; 403 otherwise."""
    if not delegation.scopes & COVERS[need]:
        raise Forbidden(
            f"This agent key may not {need}", {"owner": delegation.owner, "access": need}
        )
    if delegation.namespaces is None:
        return None
    asked = namespace or DEFAULT_NAMESPACE
    if asked not in delegation.namespaces:
        raise Forbidden(
            f"This agent key does not reach namespace {asked!r}",
            {"owner": delegation.owner, "namespace": asked},
        )
    return asked
