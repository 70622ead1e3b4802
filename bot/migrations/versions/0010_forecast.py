"""A revision's file scope, approvals that let overlapping plans run side by side, and a
plan's priority

Revision ID: 0010
Revises: 0009
"""

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("plan_revisions", sa.Column("scope", sa.JSON(), nullable=True))
    op.add_column(
        "approvals",
        sa.Column("parallel", sa.Boolean(), nullable=False, server_default=sa.false()),
    )
    op.add_column("plans", sa.Column("priority", sa.Integer(), nullable=True))


def downgrade() -> None:
    op.drop_column("plans", "priority")
    op.drop_column("approvals", "parallel")
    op.drop_column("plan_revisions", "scope")
