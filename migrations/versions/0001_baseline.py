"""Release 0.1.0: the whole schema hivenet of the first release.

Released: this revision and its frozen SQL never change (migrations/RELEASES holds their hash);
the next release's changes collect in a revision of their own (CONTRIBUTING.md).

Revision ID: 0001
Revises:
Create Date: 2026-11-26
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
    # Counter sequences, partitions and views live in the schema and go with it.
    op.execute("DROP SCHEMA hivenet CASCADE")
