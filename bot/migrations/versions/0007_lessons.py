"""lessons: what reviewers and checks taught, kept by writers; what each job ran with

Revision ID: 0007
Revises: 0006
"""

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "lessons",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("repository_id", sa.BigInteger(), nullable=False),
        sa.Column("state", sa.String(20), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("origin", sa.String(120), nullable=False),
        sa.Column("kind", sa.String(20), nullable=False),
        sa.Column("citations", sa.JSON(), nullable=False),
        sa.Column("scope", sa.JSON(), nullable=False),
        sa.Column("author", sa.String(200), nullable=False),
        sa.Column("said_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("source_url", sa.Text(), nullable=True),
        sa.Column("issue_number", sa.Integer(), nullable=False),
        sa.Column(
            "plan_id", sa.Integer(), sa.ForeignKey("plans.id", ondelete="SET NULL"), nullable=True
        ),
        sa.Column("revision", sa.Integer(), nullable=True),
        sa.Column("diff_sha", sa.String(40), nullable=True),
        sa.Column("pr_number", sa.Integer(), nullable=True),
        sa.Column("decided_by", sa.String(200), nullable=True),
        sa.Column("decided_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("confirmed_at", sa.DateTime(timezone=True), nullable=True),
        sa.UniqueConstraint("repository_id", "origin"),
    )
    op.create_index("ix_lessons_repository_id", "lessons", ["repository_id"])
    op.create_index("ix_lessons_plan_id", "lessons", ["plan_id"])
    op.add_column("plan_revisions", sa.Column("memory", sa.JSON(), nullable=True))
    op.add_column("jobs", sa.Column("program", sa.String(40), nullable=True))
    op.add_column("jobs", sa.Column("inputs", sa.JSON(), nullable=True))


def downgrade() -> None:
    op.drop_column("jobs", "inputs")
    op.drop_column("jobs", "program")
    op.drop_column("plan_revisions", "memory")
    op.drop_index("ix_lessons_plan_id", table_name="lessons")
    op.drop_index("ix_lessons_repository_id", table_name="lessons")
    op.drop_table("lessons")
