"""Lean claims: claim_interface_serial and claim take no advisory lock and record the plain
case with one statement (issue 13).

Revision ID: 0019
Revises: 0018
Create Date: 2026-11-24
"""

from alembic import op

from hivenet_db.schema import apply_revision_sql

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None


def upgrade() -> None:
    apply_revision_sql(op.get_bind(), __file__)


def downgrade() -> None:
    apply_revision_sql(op.get_bind(), __file__, ".downgrade.sql")
