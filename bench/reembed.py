"""Re-embed a benchmark data dir with a local model, in place: every memory, pending revision and
conversation turn, as the worker would have embedded them, and the model recorded.

The data dir is one `bench/api_load.py --data-dir` made (an embedded Postgres in `D/pg`, database
`bench`), at any schema from 0011 on. The texts are the product's own:
- a memory: `embedding_text(key, value)`, folded with `evidence_embedding_text` when it has
  evidence (`worker.planning.fold_evidence`); a pending revision the same with its new value;
- a turn: each conversation's stored turns, in position order, made into its event again
  (role, text, speaker) for `worker.planning.plan_turns`, whose two texts a turn (its own line, and
  the lines before it then its own) `split_embeddings` folds as the worker does.
They are embedded in batches through `build_embedder` (`PMEM_EMBEDDING_PROVIDER=local`, offline).
The vectors are written in one transaction, `UPDATE … FROM unnest(…)` in batches in the rows'
physical order (so the rewritten table keeps the loaded order), with `pmem_embedding`'s row, so
`pmem serve` with PMEM_EMBEDDING_PROVIDER=local and this model accepts the data and an interrupted
run leaves the data as it was. Then VACUUM FULL (the table and its indexes at their loaded size,
not twice it) and VACUUM ANALYZE (the visibility map index-only reads need; the statistics).

    python bench/reembed.py --data-dir /var/tmp/D [--model all-MiniLM-L6-v2] [--batch 512]

Progress on stderr: a turn is two texts, ~4 times a memory's cost (all-MiniLM-L6-v2, 100,000
turns: ~1 h on two cores shared with other work). Not part of the test suite.
Use: bench/README.md, "Platform load".
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
import uuid
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from cli.embedded import EmbeddedPostgres
from config import Settings
from extraction.embeddings import build_embedder, close_embedder, embedding_identity
from extraction.types import Candidate
from store.protocols import Embedder
from store.rules.keys import embedding_text
from worker.events import ConversationEnded, EventMessage
from worker.planning import (
    EVIDENCE_EMBEDDING_WEIGHT,
    evidence_embedding_text,
    fold_evidence,
    plan_turns,
    split_embeddings,
)

# (id, key, value, evidence) of the rows whose embedding is a fact's
MEMORY_ROWS = {
    "memories": "SELECT m.id, m.key, m.value, {evidence} FROM memories m",
    "memory_revisions": (
        "SELECT r.id, m.key, r.new_value, {evidence} "
        "FROM memory_revisions r JOIN memories m ON m.id = r.memory_id"
    ),
}
TURN_ROWS = (
    "SELECT id, event_id, channel_id, user_id, role, text, at, {speaker} FROM conversation_turns "
    "ORDER BY event_id, position"
)
Vectors = dict[uuid.UUID, str]


class Progress:
    """Rows done of a total, and the rate, on stderr at most every few seconds."""

    def __init__(self, what: str, total: int) -> None:
        self.what, self.total, self.done = what, total, 0
        self.started = self.shown = time.monotonic()

    def add(self, rows: int) -> None:
        """Count `rows` more; print when 5 s passed since the last line, or at the end."""
        self.done += rows
        now = time.monotonic()
        if now - self.shown >= 5 or self.done >= self.total:
            self.shown = now
            rate = self.done / max(now - self.started, 1e-9)
            print(f"  {self.what}: {self.done} / {self.total} ({rate:.0f} rows/s)", file=sys.stderr)


def vector_literal(vector: Sequence[float]) -> str:
    """pgvector's text form of a vector."""
    return "[" + ",".join(f"{x:.7g}" for x in vector) + "]"


def has_column(conn: psycopg.Connection[Any], table: str, column: str) -> bool:
    """Whether `table` has `column` (the schema differs between revisions)."""
    found = conn.execute(
        "SELECT 1 FROM information_schema.columns WHERE table_name = %s AND column_name = %s",
        (table, column),
    ).fetchone()
    return found is not None


def batches(items: Sequence[Any], size: int) -> Iterator[Sequence[Any]]:
    """`items` in consecutive slices of at most `size`."""
    for start in range(0, len(items), size):
        yield items[start : start + size]


async def fact_vectors(conn: psycopg.Connection[Any], embedder: Embedder, table: str, batch: int) -> Vectors:
    """Each row's fact embedding (folded with its evidence's when it has one), by id."""
    evidence = f"{table[0]}.evidence" if has_column(conn, table, "evidence") else "NULL"
    rows = conn.execute(MEMORY_ROWS[table].format(evidence=evidence)).fetchall()
    progress, found = Progress(f"{table} embedded", len(rows)), Vectors()
    for part in batches(rows, batch):
        facts = [embedding_text(key, value) for _, key, value, _ in part]
        # a candidate only for its key and value: the text the worker embeds beside the fact's
        cited = [
            evidence_embedding_text(Candidate(key=key, value=value, confidence=1.0, scope="user"), said)
            for _, key, value, said in part
            if said is not None
        ]
        vectors = await embedder.embed([*facts, *cited])
        with_evidence = iter(vectors[len(facts) :])
        for (row_id, _, _, said), own in zip(part, vectors[: len(facts)], strict=True):
            vector = (
                own if said is None else fold_evidence(own, next(with_evidence), EVIDENCE_EMBEDDING_WEIGHT)
            )
            found[row_id] = vector_literal(vector)
        progress.add(len(part))
    return found


def conversations(rows: Sequence[Any]) -> Iterator[tuple[list[uuid.UUID], ConversationEnded]]:
    """The stored turns (in event and position order) as their events again, with the turns' ids."""
    start = 0
    while start < len(rows):
        end = start
        while end < len(rows) and rows[end][1] == rows[start][1]:
            end += 1
        turns = rows[start:end]
        _, event_id, channel_id, user_id, *_ = turns[0]
        messages = tuple(
            EventMessage(role=role, content=text, at=at, name=speaker)
            for *_, role, text, at, speaker in turns
        )
        event = ConversationEnded(
            event_id=event_id,
            type="conversation.ended",
            channel_id=channel_id,
            user_id=user_id,
            messages=messages,
        )
        yield [turn[0] for turn in turns], event
        start = end


async def turn_vectors(conn: psycopg.Connection[Any], embedder: Embedder, batch: int) -> Vectors:
    """Each turn's embedding, by id: its conversation planned again as the worker plans it."""
    speaker = "speaker" if has_column(conn, "conversation_turns", "speaker") else "NULL"
    rows = conn.execute(TURN_ROWS.format(speaker=speaker)).fetchall()
    progress, found = Progress("conversation_turns embedded", len(rows)), Vectors()
    pending: list[tuple[list[uuid.UUID], list[str], list[str]]] = []
    now = datetime.now(UTC)  # a turn's time is its own: stored with it

    async def embed_pending() -> None:
        texts = [text for _, own, around in pending for text in (*own, *around)]
        vectors = await embedder.embed(texts)
        offset = 0
        for ids, own, _ in pending:
            count = len(own)
            _, folded = split_embeddings(vectors[offset : offset + 2 * count], [], [], count)
            found.update(zip(ids, map(vector_literal, folded), strict=True))
            offset += 2 * count
            progress.add(count)
        pending.clear()

    for ids, event in conversations(rows):
        # the stored texts are already what the worker kept: passed as the redacted texts as they are
        planned, own, around = plan_turns(event, now=now, redacted=[m.content for m in event.messages])
        if len(planned) != len(ids):
            raise SystemExit(f"event {event.event_id}: {len(ids)} stored turns, {len(planned)} planned")
        pending.append((ids, own, around))
        if sum(len(texts) for _, texts, _ in pending) * 2 >= batch:
            await embed_pending()
    if pending:
        await embed_pending()
    return found


def write(conn: psycopg.Connection[Any], table: str, vectors: Vectors, batch: int) -> None:
    """Set each row's embedding, batch by batch in the table's physical order (inside the caller's
    transaction): the new row versions follow each other as the loaded ones did."""
    ids = [row[0] for row in conn.execute(f"SELECT id FROM {table} ORDER BY ctid").fetchall()]
    if set(ids) != vectors.keys():
        raise SystemExit(f"{table}: its rows changed while they were embedded")
    progress = Progress(f"{table} written", len(ids))
    for part in batches(ids, batch):
        conn.execute(
            f"UPDATE {table} t SET embedding = CAST(v.embedding AS vector) "
            "FROM unnest(CAST(%s AS uuid[]), CAST(%s AS text[])) AS v(id, embedding) WHERE t.id = v.id",
            (list(part), [vectors[row_id] for row_id in part]),
        )
        progress.add(len(part))


async def reembed(url: str, model: str, batch: int) -> None:
    """Embed every row's text with `model`, then write the vectors and the model's identity."""
    settings = Settings(embedding_provider="local", embedding_model=model)
    identity = embedding_identity(settings)
    embedder = build_embedder(settings)
    tables = ("memories", "memory_revisions", "conversation_turns")
    try:
        with psycopg.connect(url) as conn:
            revision = conn.execute("SELECT version_num FROM pmem_alembic_version").fetchone()
            print(f"schema {revision[0] if revision else '?'}; model {identity}", file=sys.stderr)
            vectors = {table: await fact_vectors(conn, embedder, table, batch) for table in tables[:2]}
            vectors["conversation_turns"] = await turn_vectors(conn, embedder, batch)
            conn.rollback()  # the reads' snapshot ends; the writes are one transaction of their own
            with conn.transaction():
                for table in tables:
                    write(conn, table, vectors[table], 2000)
                conn.execute(
                    "INSERT INTO pmem_embedding (id, provider, model, dim) VALUES (1, %s, %s, %s) "
                    "ON CONFLICT (id) DO UPDATE SET provider = excluded.provider, model = excluded.model, "
                    "dim = excluded.dim, reembed_provider = NULL, reembed_model = NULL, "
                    "reembed_after = NULL, updated_at = now()",
                    (identity.provider, identity.model, identity.dim),
                )
    finally:
        await close_embedder(embedder)
    with psycopg.connect(url, autocommit=True) as conn:
        for table in tables:
            started = time.perf_counter()
            conn.execute(f"VACUUM FULL {table}")
            conn.execute(f"VACUUM ANALYZE {table}")
            print(f"  {table} vacuumed in {time.perf_counter() - started:.0f} s", file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    """Parse arguments, start the data dir's Postgres, re-embed, stop it."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--data-dir", type=Path, required=True, help="an api_load.py data dir (changed in place)"
    )
    parser.add_argument("--model", default="all-MiniLM-L6-v2", help="a local model (PMEM_EMBEDDING_MODEL)")
    parser.add_argument("--batch", type=int, default=512, help="texts a call to the embedder")
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the model is a local directory: never the hub
    started = time.perf_counter()
    postgres = EmbeddedPostgres(data_dir=args.data_dir / "pg").start()
    try:
        asyncio.run(reembed(postgres.url_for("bench"), args.model, args.batch))
    finally:
        postgres.stop()
    print(f"done in {time.perf_counter() - started:.0f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
