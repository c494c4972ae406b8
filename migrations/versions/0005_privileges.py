"""Least privilege: private helpers and administrative functions are no longer PUBLIC.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-21
"""

from alembic import op

from hivenet_db.schema import apply_revision_sql

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    apply_revision_sql(op.get_bind(), __file__)


def downgrade() -> None:
    # Back to PostgreSQL's default: every function of ours executable by PUBLIC.
    op.execute("SELECT hivenet._set_public_execute(true)")
    op.execute("DROP FUNCTION hivenet._set_public_execute(boolean)")
