"""Clock steps: formats that print the time of day never print an earlier instant than one
already issued in their scope (clock sequences); the interface window tolerates callers from
UTC-12 to UTC+14 and accepts serials this database issued.

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-23
"""

from alembic import op

from hivenet_db.schema import apply_revision_sql

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    apply_revision_sql(op.get_bind(), __file__)


def downgrade() -> None:
    apply_revision_sql(op.get_bind(), __file__, ".downgrade.sql")
