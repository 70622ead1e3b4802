"""provider_holds and slots: provider accounts at their limit, and the places under each
concurrency limit, shared by every worker

Revision ID: 0009
Revises: 0008
"""

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "provider_holds",
        sa.Column("account", sa.String(120), primary_key=True),
        sa.Column("until", sa.DateTime(timezone=True), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("job_id", sa.Integer(), nullable=True),
        sa.Column("probe_job_id", sa.Integer(), nullable=True),
        sa.Column("probe_until", sa.DateTime(timezone=True), nullable=True),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.add_column("jobs", sa.Column("waiting_on", sa.String(250), nullable=True))
    op.create_table(
        "slots",
        sa.Column("scope", sa.String(250), primary_key=True),
        sa.Column("number", sa.Integer(), primary_key=True),
        sa.Column("job_id", sa.Integer(), nullable=True, index=True),
        sa.Column("claimed_at", sa.DateTime(timezone=True), nullable=True),
    )


def downgrade() -> None:
    op.drop_table("slots")
    op.drop_column("jobs", "waiting_on")
    op.drop_table("provider_holds")
