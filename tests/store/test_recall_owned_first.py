"""Postgres recall for owners known to be small (`recall_sql(owned_first=True)`, planned once per
connection) ranks exactly as the statement the planner fits to each owner: the same hits, facts
and proposals for every branch, with a persona's overrides and in a team."""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import pytest

import store.postgres.recall as recall_module
from store.model import RecallQuery
from store.postgres.recall_sql import owned_first_fits, recall_sql
from tests.factories import user_fact
from tests.store.conftest import DIM, truncate
from tests.store.store_testkit import postgres_store
from tests.store.test_context_facts import QUERIES, TEAM, _context

MORE_QUERIES = ("Which city did the user visit by train?", "fish lentils sea")


class DistinctEmbedder:
    """A random unit vector per text (seeded by the text): no two texts at the same distance from
    a query, so the k nearest are one set whatever order a plan reads the rows in."""

    dim: int = DIM

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One vector per text."""
        vectors = []
        for text in texts:
            seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big")
            vector = np.random.default_rng(seed).standard_normal(self.dim)
            vectors.append([float(x) for x in vector / np.linalg.norm(vector)])
        return vectors


async def test_small_owners_read_first_rank_as_the_planner_chosen_statement(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    truncate(pg_url)
    store = postgres_store(pg_url, DistinctEmbedder())
    shapes: list[bool] = []
    real_sql: Callable[..., str] = recall_sql

    def spying_sql(**kwargs: Any) -> str:
        shapes.append(bool(kwargs.get("owned_first")))
        return real_sql(**kwargs)

    monkeypatch.setattr(recall_module, "recall_sql", spying_sql)
    try:
        user, persona = await _context(store)
        for i in range(40):
            fact = user_fact(user, f"trip {i}", f"Visited city {i % 7} by train, ate fish", confidence=i / 50)
            await store.writes.upsert(replace(fact, status="active", team_id=TEAM if i % 3 == 0 else None))

        async def reads() -> list[object]:
            found: list[object] = []
            for persona_id, team_id, query, limit in itertools.product(
                (None, persona), (None, TEAM), (*QUERIES, *MORE_QUERIES), (2, 10)
            ):
                asked = RecallQuery(
                    user_id=user, persona_id=persona_id, team_id=team_id, text=query, limit=limit
                )
                found.append(await store.context_facts(asked, standing=40, pinned=True))
                found.append(await store.context_facts(asked, standing=3, pinned=False))
                found.append(await store.recall(user, persona_id, query, limit, team_id=team_id))
            return found

        read_first = await reads()
        assert True in shapes
        shapes.clear()
        monkeypatch.setattr(recall_module, "owned_first_fits", lambda *_, **__: False)
        planned = await reads()
        assert shapes and True not in shapes
        assert read_first == planned
    finally:
        await store.close()


def test_an_owner_whose_rows_were_not_all_counted_is_not_small() -> None:
    assert owned_first_fits(120, sample=5000)
    assert not owned_first_fits(5000, sample=5000)  # the count stopped at the sample
    assert not owned_first_fits(1200, sample=5000, limit=1000)
    assert not owned_first_fits(0, sample=5000)  # no count was read
