"""Memory store: schema, migrations, Postgres and SQLite stores, recall, hint and tools.

Layout, by backend and role (no module outside `postgres/` and `sqlite/` tests which database it
runs on, and `core/` imports neither: `tests/test_directory_layering.py`):

    model.py       the store's types (Memory, NewMemory, Turn, Scope, …)
    protocols.py   what the store needs from the outside (the `Embedder` Protocol)
    errors.py      the store's own errors
    migrate.py     schema creation and alembic migrations; factory.py opens a store from a URL
    read_scope.py  a request's read preference (the primary after its own write) and whether it wrote
    team_scope.py  the teams the running work may touch (Postgres row-level security keys on it)
    rules/         pure decisions, no I/O: policy (upsert plans), keys, terms (a query's words, stop
                   words), cues (time and entity cues of a query), recall (score and rank fusion,
                   scope merging), turn_recall (turn fusion, merging memories and turns), hint (the
                   prompt hint), directory (display names), admission, evidence, forgetting,
                   pagination, urls
    core/          the one store, in SQLAlchemy Core, database-neutral: store (`CoreStore`,
                   composed of one role object per module, which callers ask: `store.writes`,
                   `store.review`, `store.pinning`, `store.listing`, `store.erasure`,
                   `store.forgetting`, `store.gate` (regate), `store.settings`, `store.api_keys`,
                   `store.ui_sessions`, `store.embedding_models`, `store.directory`, `store.turns`,
                   `store.channels` (channel_turns); each role inherits only `StoreBase` and reaches
                   another through its module's functions), backend (the `Backend` Protocol: every
                   database-specific operation — connections, transactions, the clock, replica
                   routing, recall, the event write, the schema check — is a method of the backend
                   the store holds), base (`StoreBase`,
                   `replica_read`, embeddings, audit rows), rows (one column list and decoder per row
                   kind, the model's fields), schema (the tables, built with a backend's
                   `SchemaDialect`)
    postgres/      the Postgres + pgvector backend: store (`PostgresMemoryStore`: the core store
                   holding a `PgBackend`), backend (`PgBackend`, composed of the parts below),
                   connections (`PgConnections`: engines, reused driver connections, the one vector
                   dumper registered on connect), replicas (`ReadReplicas`: read replicas, their lag
                   checks and the fallback to the primary), event_write with write_sql (the pipelined
                   event write), recall with recall_sql, neighbours_sql, turns_sql, dialect (the nil
                   uuid, text search, HNSW), params (the vector parameter; arrays go as lists),
                   schema (`POSTGRES`), migrations/ (alembic)
    sqlite/        the SQLite backend: store (`SqliteMemoryStore`: the core store holding a
                   `SqliteBackend`), backend, fts (the FTS5 table and its MATCH), ranking and
                   turn_ranking (vectors and BM25 in numpy), schema (`SQLITE`)
    services/      built on a store: context_recall, settings_cache over ttl_cache, tools (the OpenAI
                   function tools), query_embeddings (recall's query vectors, embedded once per text)
"""
