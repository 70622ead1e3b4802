"""issue snapshots: each plan revision keeps the issue text it was written from

Revision ID: 0006
Revises: 0005
"""

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("plan_revisions", sa.Column("source", sa.JSON(), nullable=True))
    op.create_table(
        "issue_changes",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column(
            "plan_id", sa.Integer(), sa.ForeignKey("plans.id", ondelete="CASCADE"), nullable=False
        ),
        sa.Column("revision", sa.Integer(), nullable=False),
        sa.Column("what", sa.String(40), nullable=False),
        sa.Column("actor", sa.String(200), nullable=False),
        sa.Column("ref", sa.BigInteger(), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_issue_changes_plan_id", "issue_changes", ["plan_id"])


def downgrade() -> None:
    op.drop_index("ix_issue_changes_plan_id", table_name="issue_changes")
    op.drop_table("issue_changes")
    op.drop_column("plan_revisions", "source")
