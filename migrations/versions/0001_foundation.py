"""Foundation: settings, clock, formats, registry, allocation, parsing.

Revision ID: 0001
Revises:
Create Date: 2026-11-21
"""

from alembic import op

from hivenet_db.schema import apply_revision_sql

revision = "0001"
down_revision = None
branch_labels = ("hivenet",)
depends_on = None


def upgrade() -> None:
    apply_revision_sql(op.get_bind(), __file__)


def downgrade() -> None:
    # The counter sequences and the dblink extension live in the schema and go with it.
    op.execute("DROP SCHEMA hivenet CASCADE")
