"""candidates: the N candidates of a best-of-N plan, each with its agent, branch, budget
share and what its verification showed; jobs.candidate: which one a job works on

Revision ID: 0013
Revises: 0012
"""

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "candidates",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column(
            "plan_id",
            sa.Integer(),
            sa.ForeignKey("plans.id", ondelete="CASCADE"),
            nullable=False,
            index=True,
        ),
        sa.Column("number", sa.Integer(), nullable=False),
        sa.Column("state", sa.String(20), nullable=False),
        sa.Column("agent", sa.String(100), nullable=True),
        sa.Column("model", sa.String(200), nullable=True),
        sa.Column("budget_usd", sa.Numeric(12, 6), nullable=True),
        sa.Column("branch", sa.String(250), nullable=True),
        sa.Column("head_sha", sa.String(40), nullable=True),
        sa.Column("checks_passed", sa.Integer(), nullable=False),
        sa.Column("checks_total", sa.Integer(), nullable=False),
        sa.Column("files_changed", sa.Integer(), nullable=False),
        sa.Column("lines_changed", sa.Integer(), nullable=False),
        sa.Column("outside_scope", sa.Integer(), nullable=False),
        sa.Column("fix_rounds", sa.Integer(), nullable=False),
        sa.Column("cost_usd", sa.Numeric(12, 6), nullable=False),
        sa.Column("seconds", sa.Float(), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.UniqueConstraint("plan_id", "number"),
    )
    op.add_column("jobs", sa.Column("candidate", sa.Integer(), nullable=True))


def downgrade() -> None:
    op.drop_column("jobs", "candidate")
    op.drop_table("candidates")
