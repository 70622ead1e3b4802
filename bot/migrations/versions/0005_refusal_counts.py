"""refusal counts: command receipts name their issue, so refusals are counted per thread

Revision ID: 0005
Revises: 0004
"""

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("command_receipts", sa.Column("issue_number", sa.Integer(), nullable=True))
    op.create_index(
        "ix_command_receipts_thread",
        "command_receipts",
        ["repository_id", "issue_number", "actor"],
    )


def downgrade() -> None:
    op.drop_index("ix_command_receipts_thread", table_name="command_receipts")
    op.drop_column("command_receipts", "issue_number")
