"""Postgres: the statements of the worker's event write (`store.postgres.event_write`), psycopg's
`%(name)s` parameters, columns as arrays (lists bound in binary, `%(name)b`): each is one statement
of fixed text whatever the number of rows (SQLAlchemy compiles a multi-row VALUES afresh for each
row count). Pure."""

from __future__ import annotations

import functools
import itertools
import uuid
from collections.abc import Sequence
from typing import Any

from store.core.base import AuditRows
from store.core.rows import MEMORY_COLUMNS, REVISION_COLUMNS, columns_sql
from store.core.schema import Schema
from store.model import NewMemory
from store.postgres.dialect import NIL_UUID_SQL
from store.postgres.neighbours_sql import OWNER_LOCKS_SQL, owner_lock_names
from store.postgres.params import float4_array
from store.rules.policy import storable_confidence

# new rows in array parameters (one per column), ordered; their embeddings one after another in
# one `real[]` (`starts`: where each row's begins, NULL for none); the key index's expressions as
# the conflict target; audit rows for the inserted ones in the input order (audit ids are write order)
_INSERT_NEW_SQL = (
    "WITH new_rows AS (SELECT * FROM unnest(CAST(%(ids)b AS uuid[]), CAST(%(scopes)b AS text[]), "
    "CAST(%(owners)b AS uuid[]), CAST(%(users)b AS uuid[]), CAST(%(keys)b AS text[]), "
    "CAST(%(values)b AS text[]), "
    "CAST(%(channels)b AS uuid[]), CAST(%(confidences)b AS float8[]), CAST(%(statuses)b AS text[]), "
    "CAST(%(starts)b AS int[]), CAST(%(observed)b AS timestamptz[]), CAST(%(teams)b AS uuid[]), "
    "CAST(%(evidences)b AS text[])) "
    "WITH ORDINALITY AS t(id, scope, owner_id, user_id, key, value, source_channel_id, confidence, "
    "status, start, observed_at, team_id, evidence, ord)), "
    "ins AS (INSERT INTO {memories} (id, scope, owner_id, user_id, key, value, source_channel_id, "
    "confidence, status, embedding, created_at, updated_at, team_id, evidence, observed_at) "
    "SELECT id, scope, owner_id, user_id, key, value, source_channel_id, confidence, status, "
    "CAST((CAST(%(embeddings)s AS real[]))[start:start + {dim} - 1] AS vector({dim})), "
    "coalesce(observed_at, now()), now(), team_id, evidence, observed_at FROM new_rows "
    "ORDER BY ord RETURNING id), "
    "audited AS (INSERT INTO {audit} (memory_id, action, scope, owner_id, user_id, key, old_value, "
    "new_value, actor, event_id, revision_id, team_id, at) "
    "SELECT n.id, 'add', n.scope, n.owner_id, n.user_id, n.key, NULL, n.value, %(actor)s, "
    "CAST(%(event_id)s AS uuid), NULL, n.team_id, now() FROM new_rows n JOIN ins ON ins.id = n.id "
    "ORDER BY n.ord) "
    "SELECT id FROM ins"
)

# the memories `m` of the identities in `key_identity_params`' arrays (through the key index)
_BY_KEYS_SQL = (
    "memories m JOIN unnest(CAST(%(scopes)b AS text[]), CAST(%(owners)b AS uuid[]), "
    "CAST(%(users)b AS uuid[]), CAST(%(teams)b AS uuid[]), CAST(%(keys)b AS text[])) "
    "AS w(scope, owner_id, user_id, team_id, key) "
    f"ON m.scope = w.scope AND m.owner_id = w.owner_id AND coalesce(m.user_id, {NIL_UUID_SQL}) = w.user_id "
    f"AND coalesce(m.team_id, {NIL_UUID_SQL}) = w.team_id AND m.key = w.key"
)
# a fixed lock order (by id) against deadlocks with other writers of these rows
LOCK_BY_KEYS_SQL = (
    f"SELECT {columns_sql(MEMORY_COLUMNS, 'm')} FROM {_BY_KEYS_SQL} ORDER BY m.id FOR UPDATE OF m"
)
# the same for the memories of `LOCK_BY_KEYS_SQL`'s identities, in the statement after it (their
# ids not yet known to the caller: both go in one round trip)
LOCK_OPEN_REVISIONS_BY_KEYS_SQL = (
    f"SELECT {columns_sql(REVISION_COLUMNS, 'r')} FROM memory_revisions r "
    f"JOIN ({_BY_KEYS_SQL}) ON r.memory_id = m.id WHERE r.status = 'pending' ORDER BY r.id FOR UPDATE OF r"
)


# the audit columns `audit_values` fills, but `at`, with their Postgres types
_AUDIT_COLUMNS = (
    ("memory_id", "uuid"),
    ("action", "text"),
    ("scope", "text"),
    ("owner_id", "uuid"),
    ("user_id", "uuid"),
    ("key", "text"),
    ("old_value", "text"),
    ("new_value", "text"),
    ("actor", "text"),
    ("event_id", "uuid"),
    ("revision_id", "uuid"),
    ("team_id", "uuid"),
)


@functools.lru_cache(maxsize=4)
def audit_insert_sql(table: str) -> str:
    """Postgres: audit rows from column arrays (`%(name)s` parameters), inserted in array order, so
    their ids follow the order they were collected in."""
    names = ", ".join(name for name, _ in _AUDIT_COLUMNS)
    arrays = ", ".join(f"CAST(%({name})b AS {kind}[])" for name, kind in _AUDIT_COLUMNS)
    return (
        f"INSERT INTO {table} ({names}, at) SELECT {names}, now() FROM unnest({arrays}) "
        f"WITH ORDINALITY AS t({names}, ord) ORDER BY ord"
    )


def audit_params(rows: AuditRows) -> dict[str, list[Any]]:
    """Postgres: `audit_insert_sql`'s column arrays for audit rows collected by `_audit`."""
    return {name: [row[name] for row in rows] for name, _ in _AUDIT_COLUMNS}


def claim_statement(
    table: str,
    event_id: uuid.UUID,
    memories: Sequence[NewMemory],
    *,
    actor: str,
    body_sha256: str | None = None,
) -> tuple[str, dict[str, Any]]:
    """Postgres: insert the processed-event row unless it exists and take the owners' advisory
    locks (`Backend.lock_owners`), in one statement whose `claimed` is 1 when this transaction
    claimed the event."""
    sql = (
        f"WITH claim AS (INSERT INTO {table} "
        "(event_id, processed_at, memory_count, actor, body_sha256) "
        "VALUES (%(event_id)s, now(), %(count)s, %(actor)s, %(body_sha256)s) "
        "ON CONFLICT (event_id) DO NOTHING RETURNING event_id) "
        f"SELECT (SELECT count(*) FROM claim) AS claimed, ({OWNER_LOCKS_SQL}) AS locked"
    )
    params = {
        "event_id": event_id,
        "count": len(memories),
        "actor": actor,
        "body_sha256": body_sha256,
        "names": owner_lock_names(memories),
    }
    return sql, params


def insert_new_statement(
    schema: Schema,
    ids: Sequence[uuid.UUID],
    rows: Sequence[NewMemory],
    vectors: Sequence[Sequence[float] | None],
    *,
    actor: str,
    event_id: uuid.UUID | None,
) -> tuple[str, dict[str, Any]]:
    """The new rows and their `add` audit rows in one statement of fixed text (columns as
    arrays), for the rows and their embeddings (of the store's dimension, or None); a stored key
    fails it (unique violation). Returns the ids inserted."""
    starts: list[int | None] = []
    stored = 0
    for vector in vectors:
        starts.append(None if vector is None else 1 + stored * schema.embedding_dim)
        stored += vector is not None
    sql = _INSERT_NEW_SQL.format(
        memories=schema.memories.name,
        audit=schema.audit.name,
        dim=schema.embedding_dim,
    )
    params = {
        "ids": list(ids),
        "scopes": [new.scope for new in rows],
        "owners": [new.owner_id for new in rows],
        "users": [new.user_id for new in rows],
        "keys": [new.key for new in rows],
        "values": [new.value for new in rows],
        "channels": [new.source_channel_id for new in rows],
        "confidences": [storable_confidence(new.confidence) for new in rows],
        "statuses": [new.status for new in rows],
        "starts": starts,
        "embeddings": float4_array(itertools.chain.from_iterable(v for v in vectors if v is not None)),
        "observed": [new.observed_at for new in rows],
        "teams": [new.team_id for new in rows],
        "evidences": [new.evidence for new in rows],
        "actor": actor,
        "event_id": event_id,
    }
    return sql, params


def key_identity_params(identities: Sequence[tuple[Any, ...]]) -> dict[str, list[Any]]:
    """`LOCK_BY_KEYS_SQL`'s array parameters for these `key_identity` tuples."""
    columns = list(zip(*identities, strict=True))
    names = ("scopes", "owners", "users", "teams", "keys")
    return {name: list(column) for name, column in zip(names, columns, strict=True)}
