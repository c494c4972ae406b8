"""The start views' test becomes a function of its own, which _begin_step and begin_request
apply again after the view wrote nothing: a retry of a step or key that has an attempt goes to
the state machine without every check first (parse_serial).

Revision ID: 0025
Revises: 0024
Create Date: 2026-11-24
"""

from alembic import op

from hivenet_db.schema import apply_revision_sql

revision = "0025"
down_revision = "0024"
branch_labels = None
depends_on = None


def upgrade() -> None:
    apply_revision_sql(op.get_bind(), __file__)


def downgrade() -> None:
    apply_revision_sql(op.get_bind(), __file__, ".downgrade.sql")
