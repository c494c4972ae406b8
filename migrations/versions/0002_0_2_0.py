"""Release 0.2.0 (unreleased): the changes of schema hivenet since 0.1.0.

Its scripts 0002_0_2_0.sql and 0002_0_2_0.downgrade.sql are written by
``python -m hivenet_db.tools.revision`` from the schema files and the hand-written
.tables.sql and .data.sql parts beside them (CONTRIBUTING.md, "Changing SQL"). Frozen when
0.2.0 is released, as 0001 is.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-26
"""

from alembic import op

from hivenet_db.schema import apply_revision_sql

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    apply_revision_sql(op.get_bind(), __file__)


def downgrade() -> None:
    apply_revision_sql(op.get_bind(), __file__, suffix=".downgrade.sql")
