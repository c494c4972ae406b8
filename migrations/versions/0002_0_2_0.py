"""Release 0.2.0 (unreleased): the changes of schema hivenet since 0.1.0.

The delta from revision 0001 (CONTRIBUTING.md, "Changing SQL"): the policy of a namespace
(set_namespace_policy: fingerprints, key rules, failure policy and expiry); who began each
attempt and the audit chain of a namespace (audit.sql); batches (batches.sql); waiting for the
first outcome (watch_request); decision counts (decisions.sql). Editable until 0.2.0 is
released, then frozen as 0001 is. The downgrade goes back to 0.1.0 (its bodies, copied from
0001_baseline.sql).

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
