"""Reporting views.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-21
"""

from alembic import op

from hivenet_db.schema import apply_revision_sql

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    apply_revision_sql(op.get_bind(), __file__)


def downgrade() -> None:
    op.execute("DROP VIEW hivenet.scope_usage; DROP FUNCTION hivenet._scope_counter_value(text); "
               "DROP FUNCTION hivenet._reporting_local_now()")
