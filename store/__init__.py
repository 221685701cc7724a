"""Memory store: schema, migrations, Postgres and SQLite stores, recall, hint and tools.

Layout, by backend and role (no module outside `postgres/` and `sqlite/` tests which database it
runs on):

    model.py       the store's types (Memory, NewMemory, Turn, Scope, …)
    protocols.py   the per-consumer Protocols (what the worker, the API and the tools need)
    errors.py      the store's own errors
    migrate.py     schema creation and alembic migrations; factory.py opens a store from a URL
    read_scope.py  a request's read preference (the primary after its own write) and whether it wrote
    rules/         pure decisions, no I/O: policy (upsert plans), keys, cues (time and entity cues of a
                   query), hint (the prompt hint), pagination, urls
    core/          what both backends share through SQLAlchemy Core: schema (the tables, built with a
                   backend's `SchemaDialect`), backend (the `Backend` Protocol each store provides),
                   rows (one column list and decoder per row kind), base (engines, embedding), writes,
                   review, listing, erasure, settings, api_keys, embedding_models, directory,
                   ui_sessions, turns and channel_turns (conversation memory), recall (rank fusion),
                   store (the shared store class)
    postgres/      the Postgres + pgvector store, composed: store (delegates to the parts below),
                   connections (`PgConnections`: engines, reused driver connections, the one vector
                   dumper registered on connect), event_write with write_sql (the pipelined event
                   write), recall with recall_sql, backend with neighbours_sql, params (the vector
                   parameter), schema (`POSTGRES`), replicas (`ReadReplicas`: read replicas, their
                   lag checks and the fallback to the primary), migrations/ (alembic)
    sqlite/        the SQLite store: store, backend, schema (`SQLITE`; FTS5 and vectors in Python)
    services/      built on a store: context_recall, settings_cache over ttl_cache, tools (the OpenAI
                   function tools), query_embeddings (recall's query vectors, embedded once per text)
"""
