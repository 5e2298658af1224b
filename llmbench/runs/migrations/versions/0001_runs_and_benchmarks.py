"""Runs and their benchmarks: the first schema of a database store.

Revision ID: 0001
Revises:
"""

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "runs",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("environment_key", sa.String(255), nullable=False),
        sa.Column("number", sa.Integer, nullable=False),
        sa.Column("label", sa.String(255), nullable=False),
        sa.Column("content_hash", sa.String(64), nullable=False),
        sa.Column("commit_id", sa.String(64)),
        sa.Column("run_datetime", sa.String(64)),
        sa.Column("saved_at", sa.String(64), nullable=False),
        sa.Column("document", sa.Text, nullable=False),
        sa.UniqueConstraint("environment_key", "number", name="uq_runs_environment_number"),
        sa.UniqueConstraint("content_hash", name="uq_runs_content_hash"),
    )
    op.create_table(
        "benchmarks",
        sa.Column("run_id", sa.Integer, sa.ForeignKey("runs.id", ondelete="CASCADE"),
                  primary_key=True),
        sa.Column("key", sa.String(1000), primary_key=True),
        sa.Column("name", sa.String(1000), nullable=False),
        sa.Column("group_name", sa.String(255)),
        sa.Column("median_s", sa.Float),
        sa.Column("rounds", sa.Integer),
        sa.Column("samples", sa.Text, nullable=False),
    )
    op.create_index("ix_benchmarks_key", "benchmarks", ["key"])


def downgrade() -> None:
    op.drop_index("ix_benchmarks_key", table_name="benchmarks")
    op.drop_table("benchmarks")
    op.drop_table("runs")
