"""Memory store: schema, migrations, Postgres and SQLite stores, recall, hint and tools."""
