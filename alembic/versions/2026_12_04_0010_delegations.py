"""Agent keys that act for a wallet: delegations.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-04

An owner signs a delegation that lets an agent's address act for it, within scopes (`read`,
`write`), namespaces (NULL: all) and an optional expiry. The signed nonce registers once per
owner; one unrevoked delegation per owner and agent (a newer one supersedes it).
"""

from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
        CREATE TABLE delegations (
            id          uuid PRIMARY KEY DEFAULT gen_random_uuid(),
            owner       text NOT NULL CHECK (owner ~ '^0x[0-9a-f]{40}$'),
            agent       text NOT NULL CHECK (agent ~ '^0x[0-9a-f]{40}$'),
            scopes      text[] NOT NULL
                        CHECK (cardinality(scopes) >= 1 AND scopes <@ ARRAY['read', 'write']),
            namespaces  text[] CHECK (namespaces IS NULL OR cardinality(namespaces) >= 1),
            expires_at  timestamptz,
            nonce       text NOT NULL,
            signature   text NOT NULL,
            created_at  timestamptz NOT NULL DEFAULT now(),
            revoked_at  timestamptz,
            CHECK (owner <> agent),
            UNIQUE (owner, nonce)
        )
        """
    )
    op.execute(
        "CREATE UNIQUE INDEX delegations_unrevoked ON delegations (owner, agent)"
        " WHERE revoked_at IS NULL"
    )
    op.execute("CREATE INDEX delegations_held ON delegations (agent) WHERE revoked_at IS NULL")


def downgrade() -> None:
    op.execute("DROP TABLE delegations")
