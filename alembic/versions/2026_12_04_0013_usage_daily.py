"""Usage: metered calls per wallet, UTC day and endpoint (GET /v1/usage, the console's charts).

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-04

Counted in each metered call's own transaction (free-tier or paid), so a rolled-back call
counts nothing. Wallet-owned: on Citus it is distributed by wallet with `memories`.
"""

from alembic import op
from app.db.distribution import distribute_if_citus

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None

# (table, distribution column, co-located with), as in 0011
DISTRIBUTED = [("usage_daily", "wallet", "memories")]


def upgrade() -> None:
    op.execute(
        """
        CREATE TABLE usage_daily (
            wallet      text NOT NULL,
            day         date NOT NULL,
            endpoint    text NOT NULL,
            free_calls  integer NOT NULL DEFAULT 0 CHECK (free_calls >= 0),
            paid_calls  integer NOT NULL DEFAULT 0 CHECK (paid_calls >= 0),
            PRIMARY KEY (wallet, day, endpoint)
        )
        """
    )
    distribute_if_citus(op, DISTRIBUTED)


def downgrade() -> None:
    op.execute("DROP TABLE usage_daily")
