"""No dblink loopback: cold counters and promotion, a default partition, role grants.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-23
"""

from alembic import op

from hivenet_db.schema import apply_revision_sql

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    apply_revision_sql(op.get_bind(), __file__)


def downgrade() -> None:
    # Recreates the loopback of 0001-0005, which needs a superuser (CREATE EXTENSION dblink).
    apply_revision_sql(op.get_bind(), __file__, ".downgrade.sql")
