"""The tables of a database store (`database`), as SQLAlchemy Core describes them.

The migrations (`migrations/versions/`) create and change them; these descriptions are what
the store's queries are written against, and a test holds the two to each other.

- `runs`: one row a run. `document` is its JSON, whole, exactly as saved (a run moved to a
  folder and back is byte-identical); `content_hash` its identity; (environment_key,
  number) its place, unique, as a folder store's `<environment>/NNNN_<label>.json`.
- `benchmarks`: one row a benchmark of a run: its median and raw per-round samples, for
  queries of one benchmark across runs and machines that read no document.
"""

from __future__ import annotations

import sqlalchemy as sa

metadata = sa.MetaData()

runs = sa.Table(
    "runs", metadata,
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

benchmarks = sa.Table(
    "benchmarks", metadata,
    sa.Column("run_id", sa.Integer, sa.ForeignKey("runs.id", ondelete="CASCADE"),
              primary_key=True),
    sa.Column("key", sa.String(1000), primary_key=True),
    sa.Column("name", sa.String(1000), nullable=False),
    sa.Column("group_name", sa.String(255)),
    sa.Column("median_s", sa.Float),
    sa.Column("rounds", sa.Integer),
    sa.Column("samples", sa.Text, nullable=False),  # JSON: the raw per-round seconds
    sa.Index("ix_benchmarks_key", "key"),
)
