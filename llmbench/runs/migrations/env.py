"""Alembic's environment for a database store: migrations run on the connection the store
hands over (`database._upgrade`), inside its transaction and under its lock."""

from alembic import context

connection = context.config.attributes["connection"]
context.configure(connection=connection, target_metadata=None)
with context.begin_transaction():
    context.run_migrations()
