"""Replay-proof sign-in: server-issued single-use nonces, and a session-token version per wallet.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01

A Sign-In-With-X proof (app/auth/siwx.py) names a nonce Engram issued; using it deletes its row,
so a proof works once, on whichever instance sees it first. A session token carries its wallet's
`token_version`; DELETE /auth/session increments it, which revokes every token issued before.
"""

from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
        CREATE TABLE auth_nonces (
            nonce       text PRIMARY KEY,
            expires_at  timestamptz NOT NULL
        )
        """
    )
    op.execute("CREATE INDEX auth_nonces_by_expiry ON auth_nonces (expires_at)")
    op.execute("ALTER TABLE wallets ADD COLUMN token_version integer NOT NULL DEFAULT 0")


def downgrade() -> None:
    op.execute("ALTER TABLE wallets DROP COLUMN token_version")
    op.execute("DROP TABLE auth_nonces")
