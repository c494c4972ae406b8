"""Conformance (issue 11): short echoes in messages, parse_serial as in Python, call-chain
order, the 001 counter key, strict format definitions.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-23
"""

from alembic import op

from hivenet_db.schema import apply_revision_sql

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    apply_revision_sql(op.get_bind(), __file__)


def downgrade() -> None:
    apply_revision_sql(op.get_bind(), __file__, ".downgrade.sql")
