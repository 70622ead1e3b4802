"""jobs.parked_s: how long each job waited on a quota or budget, for lead times

Revision ID: 0008
Revises: 0007
"""

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column(
        "jobs", sa.Column("parked_s", sa.Float(), nullable=False, server_default=sa.text("0"))
    )


def downgrade() -> None:
    op.drop_column("jobs", "parked_s")
