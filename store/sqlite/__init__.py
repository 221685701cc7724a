"""The SQLite store: FTS5 keyword search and vectors ranked in Python."""
