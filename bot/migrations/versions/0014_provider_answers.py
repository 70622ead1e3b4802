"""provider_answers: when each provider account last answered; provider_holds.probe_since:
when the account's probe began

Revision ID: 0014
Revises: 0013
"""

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "provider_answers",
        sa.Column("account", sa.String(120), primary_key=True),
        sa.Column("answered_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.add_column(
        "provider_holds", sa.Column("probe_since", sa.DateTime(timezone=True), nullable=True)
    )


def downgrade() -> None:
    op.drop_column("provider_holds", "probe_since")
    op.drop_table("provider_answers")
