"""Namespaces shared between wallets: grants, and the acting wallet in history.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-04

An owner wallet grants another wallet `read` or `write` on one of its namespaces, until an
optional expiry or until revoked. The grantee then reaches that namespace by naming the owner.
History records which wallet acted (`actor`) when it was not the owner; NULL means the owner
itself, which every row before this migration was.
"""

from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
        CREATE TABLE grants (
            id          uuid PRIMARY KEY DEFAULT gen_random_uuid(),
            owner       text NOT NULL CHECK (owner ~ '^0x[0-9a-f]{40}$'),
            grantee     text NOT NULL CHECK (grantee ~ '^0x[0-9a-f]{40}$'),
            namespace   text NOT NULL CHECK (length(namespace) BETWEEN 1 AND 255),
            access      text NOT NULL CHECK (access IN ('read', 'write')),
            expires_at  timestamptz,
            created_at  timestamptz NOT NULL DEFAULT now(),
            revoked_at  timestamptz,
            CHECK (owner <> grantee)
        )
        """
    )
    op.execute(
        "CREATE INDEX grants_received ON grants (grantee, owner, namespace)"
        " WHERE revoked_at IS NULL"
    )
    op.execute("CREATE INDEX grants_given ON grants (owner) WHERE revoked_at IS NULL")
    op.execute(
        "ALTER TABLE memory_history ADD COLUMN actor text"
        " CHECK (actor IS NULL OR actor ~ '^0x[0-9a-f]{40}$')"
    )


def downgrade() -> None:
    op.execute("ALTER TABLE memory_history DROP COLUMN actor")
    op.execute("DROP TABLE grants")
