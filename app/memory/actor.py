"""What only the owner may do to its memories, whoever else acts (app/access/rules.py `Actor`).

A grantee (x-memory-owner) or an agent key (x-wallet-owner) acts for the owner: it reaches one
namespace (`kept_to`), and every part of its answers comes from there (relations, the counts
that score a recall). It writes as a write grant allows: content, metadata, tags, importance,
type, pinning, ids, moves between namespaces it may write; never what removes a memory or
locks it (OWNER_ONLY), since a grant never covers delete.

No HTTP types here: the controller says who acts (app/access/requests.py `Acting.reach`)."""

from __future__ import annotations

import msgspec

from app.access.rules import Actor
from app.core.errors import Forbidden
from app.memory.schemas import StoreIn, UpdateIn

# The fields only the owner sets, on PATCH and on store: `expires_at` ends a memory (a delete
# in all but name, on a timer; clearing it overrides the owner's retention), `immutable: true`
# locks it against the owner's own PATCH and DELETE. (`immutable: false` changes nothing: an
# immutable memory refuses every change.) Pinning neither removes nor locks (it only keeps a
# memory from fading in recall, and anyone who may write may unpin it), so a write grant
# covers it. Refused on every store, a new memory's too: one rule, whether or not a key names
# a memory already there (the answer tells nothing of it), and an immutable memory planted by a
# grantee is one its owner could never delete. What else removes or locks is out of a grantee's
# or agent key's reach: a store merged into a duplicate changes neither field, and delete,
# batch update, consolidation, import and the namespace's deletion take no owner header.
OWNER_ONLY = ("expires_at", "immutable")


def owner_only_fields(body: StoreIn | UpdateIn) -> list[str]:
    """The owner-only fields a store or an update sets: a store's `expires_at` when given, an
    update's when sent at all (its null clears the expiry); `immutable` when true."""
    absent = None if isinstance(body, StoreIn) else msgspec.UNSET
    sent = {"expires_at": body.expires_at is not absent, "immutable": bool(body.immutable)}
    return [name for name in OWNER_ONLY if sent[name]]


def check_owner_only(actor: Actor, body: StoreIn | UpdateIn) -> None:
    """403 when a grantee or an agent key sends a field only the owner sets (OWNER_ONLY)."""
    if not actor.for_owner:
        return
    sent = owner_only_fields(body)
    if sent:
        raise Forbidden(
            f"Only the owner sets {', '.join(sent)}: a grant or an agent key never removes or"
            " locks a memory",
            {"fields": sent},
        )
