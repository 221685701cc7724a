"""The Postgres + pgvector store: the store, its pipelined event write, raw SQL parameters, migrations."""
