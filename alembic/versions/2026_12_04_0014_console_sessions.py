"""Console sign-ins: browser sessions and one-time sign-in links (app/console).

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-04

Only the SHA-256 of a session's cookie or a link's token is kept, so a copy of the table signs
no one in. A session carries its CSRF token (the console's forms and scripts send it back). Both
are looked up by that hash only: on Citus each is distributed by it, alone, as auth_nonces is.
"""

from alembic import op
from app.db.distribution import distribute_if_citus

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None

# (table, distribution column, co-located with), as in 0011
DISTRIBUTED = [
    ("console_sessions", "token_hash", "none"),
    ("console_links", "token_hash", "none"),
]


def upgrade() -> None:
    op.execute(
        """
        CREATE TABLE console_sessions (
            token_hash  text PRIMARY KEY,
            wallet      text NOT NULL,
            csrf_token  text NOT NULL,
            created_at  timestamptz NOT NULL DEFAULT now(),
            expires_at  timestamptz NOT NULL
        )
        """
    )
    op.execute(
        """
        CREATE TABLE console_links (
            token_hash  text PRIMARY KEY,
            wallet      text NOT NULL,
            expires_at  timestamptz NOT NULL
        )
        """
    )
    op.execute("CREATE INDEX console_sessions_expiry ON console_sessions (expires_at)")
    op.execute("CREATE INDEX console_links_expiry ON console_links (expires_at)")
    distribute_if_citus(op, DISTRIBUTED)


def downgrade() -> None:
    op.execute("DROP TABLE console_links")
    op.execute("DROP TABLE console_sessions")
