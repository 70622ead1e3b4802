"""plans.status_shown, plans.label_shown: what gaffer last put on the issue

Revision ID: 0015
Revises: 0014
"""

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("plans", sa.Column("status_shown", sa.String(64), nullable=True))
    op.add_column("plans", sa.Column("label_shown", sa.String(20), nullable=True))


def downgrade() -> None:
    op.drop_column("plans", "label_shown")
    op.drop_column("plans", "status_shown")
