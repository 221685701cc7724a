"""Reviewed facts lead recall on both stores: a user with many remembered turns and one approved
memory that answers the question gets that memory first from `/v1/recall`, and it stands in the
hint's facts; the turns follow, without repeating what the fact quotes."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import httpx
import pytest

from api.app import create_app
from store.protocols import Embedder
from store.rules.hint import EARLIER_HEADER, KNOWN_HEADER
from store.services.context_recall import DEFAULT_TURN_LIMIT
from tests.api.conftest import AUTH
from tests.store.store_testkit import MakeStore, Store
from tests.store.test_store_turns import fact, turn

CHATTER = (
    "The weather was grey all week",
    "I finished the book about the lighthouse keeper",
    "Work has been busy with the quarterly planning",
    "We watched a film about a chef in Lyon",
    "My sister called about the food festival",
    "The train was late again this morning",
    "I want to try the new bakery near the station",
    "We talked about which restaurant to book for Friday",
    "The kids loved the museum of science",
    "I am thinking about learning to cook Thai curries",
)
SAID = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)


@asynccontextmanager
async def served(store: Store) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(store=store, auth=AUTH, max_body_bytes=64_000)  # type: ignore[arg-type]
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://pmem.test") as client:
        yield client


@pytest.fixture
async def http(store: Store) -> AsyncIterator[httpx.AsyncClient]:
    async with served(store) as client:
        yield client


@pytest.fixture(scope="module")
def minilm() -> Embedder:
    """The default local embedder (all-MiniLM-L6-v2, 384-d), what a deployment with `local` runs."""
    pytest.importorskip("sentence_transformers", reason="the `local` extra is not installed")
    from extraction.embeddings import LocalEmbedder

    return LocalEmbedder()


async def remember_conversations(store: Store, user: uuid.UUID, turns: int) -> None:
    """`turns` messages of everyday talk over ten conversations, food among the topics, embedded
    as the worker embeds them."""
    per_event = turns // 10
    for event in range(10):
        channel = uuid.uuid4()
        said = [
            turn(
                user,
                position,
                f"{CHATTER[(event + position) % len(CHATTER)]} (week {event}, {position})",
                channel=channel,
                at=SAID + timedelta(days=event, minutes=position),
            )
            for position in range(1, per_event + 1)
        ]
        vectors = await store.embedder.embed([t.text for t in said])
        await store.writes.write_event(
            event_id=uuid.uuid4(),
            memories=[],
            turns=[replace(t, embedding=v) for t, v in zip(said, vectors, strict=True)],
        )


async def test_an_approved_fact_that_answers_the_question_comes_first_and_stands_in_the_hint(
    make_store: MakeStore, minilm: Embedder
) -> None:
    # a real embedder: the lead compares the fact's and the turns' closeness to the question, which
    # the lexical hashing embedder only measures by shared words (and its collisions)
    store = await make_store(minilm)
    question = "What does the user eat? Any diet?"
    user = uuid.uuid4()
    await remember_conversations(store, user, 100)
    await store.writes.upsert(
        fact(
            user,
            "diet",
            "Prefers vegan food",
            status="active",
            evidence="user: I went vegan last spring, so no meat or cheese for me",
            observed_at=SAID,
        )
    )
    _, key = await store.api_keys.create_api_key("chat-backend")
    headers = {"Authorization": f"Bearer {key}"}
    body = {"user_id": str(user), "query": question}
    async with served(store) as http:
        recalled = await http.post("/v1/recall", json=body, headers=headers)
        hinted = await http.post("/v1/hint", json=body, headers=headers)
    assert recalled.status_code == 200, recalled.text
    items = recalled.json()["items"]
    # the facts within the limit, then the turns within their own limit (the default 5)
    assert (items[0]["kind"], items[0]["value"]) == ("memory", "Prefers vegan food")
    assert [item["kind"] for item in items[1:]] == ["turn"] * DEFAULT_TURN_LIMIT  # what the fact lacks

    assert hinted.status_code == 200, hinted.text
    known, _, earlier = hinted.json()["hint"].partition(EARLIER_HEADER)
    assert known.startswith(KNOWN_HEADER)
    assert "- diet: Prefers vegan food (said 1 March 2026)" in known
    assert '"I went vegan last spring, so no meat or cheese for me"' in known  # what was said
    assert earlier.count("\n- ") >= 1


async def test_a_turn_the_leading_fact_already_quotes_is_not_repeated(
    store: Store, http: httpx.AsyncClient
) -> None:
    user = uuid.uuid4()
    channel = uuid.uuid4()
    said = "I went vegan last spring, so no meat or cheese for me"
    await store.writes.write_event(
        event_id=uuid.uuid4(),
        memories=[],
        turns=[turn(user, 1, said, channel=channel), turn(user, 2, "Vegan food is easy in Lyon")],
    )
    await store.writes.upsert(
        fact(
            user,
            "diet",
            "Prefers vegan food",
            status="active",
            evidence=f"user: {said}",
            source_channel_id=channel,
        )
    )
    _, key = await store.api_keys.create_api_key("chat-backend")
    recalled = await http.post(
        "/v1/recall",
        json={"user_id": str(user), "query": "vegan food"},
        headers={"Authorization": f"Bearer {key}"},
    )
    assert recalled.status_code == 200, recalled.text
    items = recalled.json()["items"]
    assert items[0]["kind"] == "memory"
    assert [item.get("text") for item in items if item["kind"] == "turn"] == ["Vegan food is easy in Lyon"]
