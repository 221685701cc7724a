"""Memory store: schema, migrations, Postgres and SQLite stores, recall, hint and tools.

Layout, by backend and role:

    model.py       the store's types (Memory, MemoryDraft, Scope, …)
    protocols.py   the per-consumer Protocols (what the worker, the API and the tools need)
    errors.py      the store's own errors
    migrate.py     schema creation and alembic migrations; factory.py opens a store from a URL
    rules/         pure decisions, no I/O: policy (upsert plans), keys, cues (time and entity cues of a
                   query), hint (the prompt hint), pagination, urls
    core/          what both backends share through SQLAlchemy Core: schema, base (engines, embedding),
                   writes, neighbours (near-duplicate reads), review, listing, erasure, settings, api_keys,
                   embedding_models, directory, ui_sessions, turns, channel_turns, recall (rank fusion),
                   store (the shared store class)
    postgres/      the Postgres + pgvector store: store, event_write (the pipelined event write),
                   params (raw SQL parameters), migrations/ (alembic)
    sqlite/        the SQLite store (FTS5 and vectors in Python)
    services/      built on a store: context_recall, settings_cache, tools (the OpenAI function tools)
"""
