"""Recall-quality pieces: time cues, informative query words, score fusion with boosts, BM25 idf,
and the Postgres recall using them end to end."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import pytest

from extraction.embeddings import HashingEmbedder
from store.model import Memory
from store.rules.cues import (
    TimeWindow,
    asks_when,
    informative_query,
    mentions_time,
    parse_time_cue,
    speaks_for_self,
    states_constraint,
)
from store.rules.recall import (
    ScoreFusion,
    bm25_idf,
    candidate_features,
    fuse_scores,
    mean_direction,
    query_cues,
    term_stats,
)
from store.sqlite.fts import bm25_expression
from tests.factories import stored_fact, user_fact
from tests.store.store_testkit import MakeStore, Store

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


@dataclass
class RecordingEmbedder:
    """An embedder that records the texts of each call."""

    inner: HashingEmbedder
    texts: list[list[str]] = field(default_factory=list)

    @property
    def dim(self) -> int:
        return self.inner.dim

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        self.texts.append(list(texts))
        return await self.inner.embed(texts)


@pytest.mark.parametrize(
    ("query", "start", "end", "remaining"),
    [
        (
            "What did Maria share on 16 June, 2023?",
            datetime(2023, 6, 16),
            datetime(2023, 6, 17),
            "What did Maria share ?",
        ),
        (
            "What did Maria share on June 16th, 2023?",
            datetime(2023, 6, 16),
            datetime(2023, 6, 17),
            "What did Maria share ?",
        ),
        (
            "Where did John travel in August 2023?",
            datetime(2023, 8, 1),
            datetime(2023, 9, 1),
            "Where did John travel ?",
        ),
        (
            "Which gigs did I play in 2022?",
            datetime(2022, 1, 1),
            datetime(2023, 1, 1),
            "Which gigs did I play ?",
        ),
        (
            "What did I say yesterday about Rust?",
            datetime(2026, 11, 28),
            datetime(2026, 11, 29),
            "What did I say about Rust?",
        ),
    ],
)
def test_time_cue_finds_the_window_and_removes_its_words(
    query: str, start: datetime, end: datetime, remaining: str
) -> None:
    cue = parse_time_cue(query, now=NOW)
    assert cue is not None
    assert cue.window == TimeWindow(start=start.replace(tzinfo=UTC), end=end.replace(tzinfo=UTC))
    assert cue.remaining_query == remaining


@pytest.mark.parametrize("query", ["what is my name", "I may go to 42nd street", "the year 2023 model"])
def test_queries_without_a_time_expression_have_no_cue(query: str) -> None:
    assert parse_time_cue(query, now=NOW) is None


def test_an_impossible_day_falls_back_to_its_month() -> None:
    cue = parse_time_cue("what happened on 31 February, 2023", now=NOW)
    assert cue is not None
    assert cue.window == TimeWindow(
        start=datetime(2023, 2, 1, tzinfo=UTC), end=datetime(2023, 3, 1, tzinfo=UTC)
    )


def test_informative_query_drops_words_most_memories_contain() -> None:
    share = {"caroline": 0.6, "support": 0.02, "group": 0.05}
    assert (
        informative_query("When did Caroline join the support group?", share)
        == "When did join the support group?"
    )


def test_informative_query_keeps_the_query_when_every_word_is_common() -> None:
    assert informative_query("Caroline", {"caroline": 0.9}) == "Caroline"


def test_bm25_idf_falls_as_more_documents_contain_the_term() -> None:
    assert bm25_idf(100, 1) > bm25_idf(100, 10) > bm25_idf(100, 90) > 0.0


def test_term_stats_maps_words_to_their_highest_share() -> None:
    stats = term_stats([("running", "run", 5, 10, 7.0), ("caroline", "carolin", 8, 10, 7.0)])
    assert stats.documents == 10
    assert stats.word_share == {"running": 0.5, "caroline": 0.8}
    assert stats.idf["run"] > stats.idf["carolin"]


def test_mean_direction_is_unit_length_between_its_inputs() -> None:
    assert mean_direction([[1.0, 0.0], [0.0, 1.0]]) == pytest.approx([2**-0.5, 2**-0.5])


def _memory(key: str, *, created: datetime = NOW, channel: uuid.UUID | None = None) -> Memory:
    return stored_fact(
        key, key, at=created, owner_id=uuid.UUID(int=1), source_channel_id=channel, confidence=1.0
    )


def test_score_fusion_mixes_normalised_branch_scores() -> None:
    a, b, c = _memory("a k"), _memory("b k"), _memory("c k")
    hits = fuse_scores(
        [a, b, c],
        {"vector": {a.id: 0.9, b.id: 0.5, c.id: 0.1}, "text": {c.id: 6.0, b.id: 8.0}},
        limit=3,
        fusion=ScoreFusion(conversation_boost=0.0),
    )
    assert [h.memory.id for h in hits] == [b.id, a.id, c.id]  # b: .25+.5, a: .5+0, c: 0+.375
    assert hits[0].sources == ("vector", "text")


def test_time_boost_lifts_memories_from_the_named_window() -> None:
    old = _memory("old fact", created=datetime(2023, 6, 16, 15, tzinfo=UTC))
    new = _memory("new fact", created=datetime(2024, 1, 1, tzinfo=UTC))
    weak = _memory("weak fact")
    scores = {"vector": {new.id: 0.8, old.id: 0.7, weak.id: 0.0}}
    window = TimeWindow(start=datetime(2023, 6, 16, tzinfo=UTC), end=datetime(2023, 6, 17, tzinfo=UTC))
    plain = fuse_scores([old, new, weak], scores, limit=2)
    cued = fuse_scores([old, new, weak], scores, limit=2, time_window=window)
    assert plain[0].memory.id == new.id
    assert cued[0].memory.id == old.id


def test_conversation_boost_lifts_memories_told_with_the_strongest_hits() -> None:
    talk = uuid.uuid4()
    strong = _memory("strong hit", channel=talk)
    sibling = _memory("sibling fact", channel=talk)
    stranger = _memory("stranger fact", channel=uuid.uuid4())
    scores = {"vector": {strong.id: 1.0, stranger.id: 0.5, sibling.id: 0.45, uuid.uuid4(): 0.0}}
    without = fuse_scores(
        [strong, sibling, stranger], scores, limit=3, fusion=ScoreFusion(conversation_boost=0)
    )
    with_boost = fuse_scores([strong, sibling, stranger], scores, limit=3)
    assert [h.memory.id for h in without][1] == stranger.id
    assert [h.memory.id for h in with_boost][1] == sibling.id


async def test_recall_uses_the_time_cue_and_owner_term_statistics_on_both_stores(
    make_store: MakeStore,
) -> None:
    store = await make_store()
    user = uuid.uuid4()
    june = datetime(2023, 6, 16, 10, tzinfo=UTC)
    facts = [
        ("joined gym", "Maria joined a gym and loves the people there", june),
        ("shelter volunteering", "Maria volunteers at a homeless shelter", june - timedelta(days=60)),
        ("new puppy", "Maria adopted a puppy named Coco", june + timedelta(days=90)),
        ("favourite food", "Maria likes spicy chili", june + timedelta(days=120)),
    ]
    for key, value, when in facts:
        await store.writes.upsert(
            user_fact(
                user,
                key,
                value,
                status="active",
                observed_at=when,
            )
        )
    dated = [h.memory.key for h in await store.recall(user, None, "What did Maria do on 16 June, 2023?", 4)]
    undated = [h.memory.key for h in await store.recall(user, None, "What did Maria do?", 4)]
    # the date's words leave the matched text, and the memory from that day moves up
    assert dated.index("joined gym") < undated.index("joined gym")
    assert dated.index("joined gym") <= 1
    # "maria" is in every memory: it alone ranks nothing first by keyword
    keyword = await store.recall(user, None, "Maria puppy", 4, retriever="keyword")
    assert keyword[0].memory.key == "new puppy"


async def test_informative_words_cue_changes_the_query_vector_on_both_stores(make_store: MakeStore) -> None:
    """The owner's name is in every memory: with the cue the query is also embedded without it."""
    embedder = RecordingEmbedder(HashingEmbedder(dim=384))
    store = await make_store(embedder)
    user = uuid.uuid4()
    hobbies = ("tea", "jazz", "chess", "rain", "dogs", "maps", "figs", "vinyl", "kites", "trains", "opera")
    values = ["Caroline paints"] + [f"Caroline likes {x}" for x in hobbies]
    for i, value in enumerate([*values, "Caroline went hiking", "Caroline adopted a dog"]):
        await store.writes.upsert(user_fact(user, f"fact {i}", value, status="active"))
    embedder.texts.clear()
    await store.recall(user, None, "what does Caroline paint", 3, retriever="vector")
    assert embedder.texts == [["what does Caroline paint", "what does paint"]]


async def test_conversation_cue_lifts_a_sibling_fact_on_both_stores(make_store: MakeStore) -> None:
    store = await make_store()
    user = uuid.uuid4()
    talk, other = uuid.uuid4(), uuid.uuid4()
    rows = [
        ("trip", "went to Lisbon for the marathon", talk),
        ("trip food", "ate grilled sardines with friends", talk),
        ("lunch", "ate grilled cheese at the office", other),
        *(
            (f"hobby {i}", f"collects {thing}", other)
            for i, thing in enumerate(("stamps", "coins", "shells"))
        ),
    ]
    for key, value, channel in rows:
        await store.writes.upsert(
            user_fact(
                user,
                key,
                value,
                status="active",
                source_channel_id=channel,
            )
        )
    hits = await store.recall(user, None, "Lisbon marathon grilled", 3, retriever="keyword")
    assert [h.memory.key for h in hits][:2] == ["trip", "trip food"]


def test_candidate_features_describe_each_branch_and_cue() -> None:
    a, b = _memory("alpha fact", created=datetime(2023, 6, 16, tzinfo=UTC)), _memory("Maria beta fact")
    window = TimeWindow(start=datetime(2023, 6, 16, tzinfo=UTC), end=datetime(2023, 6, 17, tzinfo=UTC))
    features = candidate_features(
        {a.id: a, b.id: b},
        {"vector": {a.id: 0.9, b.id: 0.3}, "text": {b.id: 4.0}},
        fusion=ScoreFusion(),
        time_window=window,
    )
    assert features[a.id] == {
        "vector": 1.0, "text": 0.0, "cosine": 0.9, "vector_rank": 1.0, "text_rank": 0.0, "both": 0.0,
        "time": 1.0, "when": 0.0, "constraint": 0.0,
    }  # fmt: skip
    assert features[b.id]["both"] == 1.0 and features[b.id]["text"] == 1.0
    assert features[b.id]["vector_rank"] == 0.5


def test_fusion_reads_a_candidate_the_same_by_its_uuid_or_the_uuids_integer() -> None:
    """Fusion keys candidates by `UUID.int` inside (it hashes in C): the features are the same,
    and equal scores still order by id."""
    rows = [_memory(f"m{i}", channel=uuid.UUID(int=7)) for i in range(6)]
    cosines = {m.id: c for m, c in zip(rows, (0.9, 0.5, 0.5, 0.5, 0.2, 0.1), strict=True)}
    text = {rows[1].id: 3.0, rows[4].id: 3.0}
    by_uuid = candidate_features(
        {m.id: m for m in rows}, {"vector": cosines, "text": text}, fusion=ScoreFusion()
    )
    by_int = candidate_features(
        {m.id.int: m for m in rows},
        {"vector": {k.int: v for k, v in cosines.items()}, "text": {k.int: v for k, v in text.items()}},
        fusion=ScoreFusion(),
    )
    assert {key.int: entry for key, entry in by_uuid.items()} == by_int
    hits = fuse_scores(rows, {"vector": {m.id: 0.5 for m in rows}}, limit=6, fusion=ScoreFusion())
    assert [h.memory.id for h in hits] == sorted(m.id for m in rows)


def test_vector_floor_rank_scales_cosines_down_to_that_rank() -> None:
    rows = [_memory(f"m{i}") for i in range(5)]
    cosines = {m.id: c for m, c in zip(rows, (0.9, 0.8, 0.7, 0.6, 0.5), strict=True)}
    by_id = {m.id: m for m in rows}

    def vector_side(fusion: ScoreFusion) -> list[float]:
        features = candidate_features(by_id, {"vector": cosines}, fusion=fusion)
        return [round(features[m.id]["vector"], 6) for m in rows]

    assert vector_side(ScoreFusion(vector_floor_rank=None)) == [1.0, 0.75, 0.5, 0.25, 0.0]
    assert vector_side(ScoreFusion(vector_floor_rank=3)) == [1.0, 0.5, 0.0, 0.0, 0.0]
    assert vector_side(ScoreFusion(vector_floor_rank=60)) == [1.0, 0.75, 0.5, 0.25, 0.0]  # fewer: all


def test_vector_floor_rank_keeps_the_head_whatever_the_number_of_candidates() -> None:
    """More weak vector candidates (a bigger limit fetches more) must not shrink the vector side's
    scale against the full-text side: with the floor the head keeps its order."""
    both_strong_text, close_weaker_text = _memory("t1"), _memory("t2")
    head = {both_strong_text.id: 0.2, close_weaker_text.id: 0.8}
    text = {both_strong_text.id: 1.0, close_weaker_text.id: 0.47}
    fillers = [_memory(f"f{i}") for i in range(118)]
    tail = {m.id: 0.85 - 0.0142 * i for i, m in enumerate(fillers)}
    few = dict(list(tail.items())[:58])
    rows = [both_strong_text, close_weaker_text, *fillers]

    def top_two(fusion: ScoreFusion, vector: dict[uuid.UUID, float]) -> list[uuid.UUID]:
        scores = {"vector": {**head, **vector}, "text": text}
        return [h.memory.id for h in fuse_scores(rows, scores, limit=2, fusion=fusion)]

    floor, no_floor = ScoreFusion(vector_floor_rank=60), ScoreFusion(vector_floor_rank=None)
    assert top_two(floor, few) == top_two(no_floor, few) == [close_weaker_text.id, both_strong_text.id]
    assert top_two(floor, tail) == [close_weaker_text.id, both_strong_text.id]
    assert top_two(no_floor, tail) == [both_strong_text.id, close_weaker_text.id]


@dataclass
class AngleEmbedder:
    """Every query embeds to the first axis; a memory's vector (given at write time) has a chosen
    cosine to it."""

    dim: int = 384

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        return [[1.0] + [0.0] * (self.dim - 1) for _ in texts]

    def at(self, cosine: float, axis: int) -> list[float]:
        vector = [0.0] * self.dim
        vector[0], vector[axis] = cosine, (1.0 - cosine * cosine) ** 0.5
        return vector

    async def seed(self, store: Store, user: uuid.UUID, rows: Sequence[tuple[str, str, float]]) -> None:
        """Active memories of `user`, one per (key, value, cosine to the query), each on its own axis."""
        for axis, (key, value, cosine) in enumerate(rows, start=1):
            await store.writes.upsert(
                user_fact(
                    user,
                    key,
                    value,
                    status="active",
                    embedding=self.at(cosine, axis),
                )
            )


async def test_a_bigger_limit_keeps_the_head_of_the_ranking_on_both_stores(make_store: MakeStore) -> None:
    """Recall for 40 fetches 120 candidates per branch instead of 60 (for 20): with the vector floor
    (default rank 60) the best results come in the same order; without it the weak extra cosines
    shrink the vector side and the full-text side wins the head."""
    embedder = AngleEmbedder()
    user = uuid.uuid4()
    rows = [
        ("both words", "zephyr quasar", 0.2),  # matches both query words, far in vector space
        ("one word", "quasar", 0.8),  # matches one, close in vector space
        *((f"filler {i}", f"filler note {i}", 0.85 - 0.0142 * i) for i in range(128)),
    ]

    async def ranked(fusion: ScoreFusion | None, limit: int) -> list[str]:
        store = await make_store(embedder, fusion=fusion)
        await embedder.seed(store, user, rows)
        return [h.memory.key for h in await store.recall(user, None, "zephyr quasar", limit)][:2]

    assert await ranked(None, 20) == await ranked(None, 40) == ["one word", "both words"]
    assert await ranked(ScoreFusion(vector_floor_rank=None), 40) == ["both words", "one word"]


@pytest.mark.parametrize(("key_weight", "first"), [(0.5, "in value morning"), (2.0, "in key zebra")])
async def test_key_weight_ranks_a_word_in_the_value_against_the_same_word_in_the_key_on_both_stores(
    make_store: MakeStore, key_weight: float, first: str
) -> None:
    """Two memories with the same words, the query word in the key of one and in the value of the
    other: below 1 the value match ranks first, above 1 the key match."""
    store = await make_store(fusion=ScoreFusion(key_weight=key_weight, conversation_boost=0.0))
    user = uuid.uuid4()
    for key, value in (("in key zebra", "quiet morning"), ("in value morning", "quiet zebra")):
        await store.writes.upsert(user_fact(user, key, value, status="active"))
    hits = await store.recall(user, None, "zebra", 2, retriever="keyword")
    assert hits[0].memory.key == first
    assert hits[0].score > hits[1].score


def test_key_weight_by_default_counts_a_key_only_word_below_a_value_word() -> None:
    assert 0.0 < ScoreFusion().key_weight < 1.0


def test_sqlite_bm25_expression_carries_the_key_weight() -> None:
    assert bm25_expression(0.5) == "bm25(memories_fts, 0.0, 0.0, 0.0, 0.5, 1.0, 0.5)"


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("When did Caroline go to the support group?", True),
        ("  when is Maria's birthday", True),
        ("What did Caroline do when she moved?", False),
        ("Whenever it rains, what does Mel do?", False),
    ],
)
def test_asks_when_reads_the_first_word(query: str, expected: bool) -> None:
    assert asks_when(query) is expected
    assert query_cues(query, now=NOW).when is expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('Caroline said, "I went to a support group yesterday."', True),
        ("We adopted Coco two weeks ago", True),
        ("Last weekend our city held a parade", True),
        ("I started painting in 2018", True),
        ("We went camping in July", True),
        ("Painting is a fun way to relax", False),
        ("Dayton is lovely", False),
    ],
)
def test_mentions_time_finds_relative_words_months_and_years(text: str, expected: bool) -> None:
    assert mentions_time(text) is expected


@pytest.mark.parametrize(
    ("query", "fusion", "first"),
    [
        ("When did Maria adopt Coco?", None, "dated"),
        ("When did Maria adopt Coco?", ScoreFusion(when_boost=0.0), "undated"),
        ("What did Maria adopt?", None, "undated"),
    ],
)
async def test_when_boost_lifts_a_memory_naming_a_time_for_a_when_question_on_both_stores(
    make_store: MakeStore, query: str, fusion: ScoreFusion | None, first: str
) -> None:
    """Two memories of one event, the closer one in vector space without a time: a "When …?"
    question ranks the one saying "last week" first (default `when_boost`), other questions do not."""
    embedder = AngleEmbedder()
    store = await make_store(embedder, fusion=fusion)
    user = uuid.uuid4()
    rows = [
        ("undated", "Maria adopted a puppy called Coco", 0.9),
        ("dated", "Maria adopted a puppy called Coco last week", 0.85),
        ("filler", "Maria likes spicy chili", 0.1),
    ]
    await embedder.seed(store, user, rows)
    hits = await store.recall(user, None, query, 3, retriever="vector")
    assert hits[0].memory.key == first


def test_when_boost_by_default_lifts_dated_memories_for_when_questions() -> None:
    dated, undated = _memory("adopted Coco last week"), _memory("adopted Coco")
    scores = {"vector": {undated.id: 0.9, dated.id: 0.85, uuid.uuid4(): 0.1}}
    assert fuse_scores([dated, undated], scores, limit=2)[0].memory.id == undated.id
    assert fuse_scores([dated, undated], scores, limit=2, when=True)[0].memory.id == dated.id
    assert ScoreFusion().when_boost > 0.0


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("What should I cook for dinner tonight?", True),
        ("Can you recommend a Spanish podcast?", True),
        ("Where should we go for a weekend getaway?", True),
        ("Can you find us flights to Osaka?", True),
        ("i want something quick", True),
        ("What did Caroline research?", False),
        ("Which US state did Jolene visit during her internship?", False),
        ("Is it safe to do sit-ups on the floor?", False),
    ],
)
def test_speaks_for_self_reads_first_and_second_person(query: str, expected: bool) -> None:
    assert speaks_for_self(query) is expected
    assert query_cues(query, now=NOW).personal is expected


@pytest.mark.parametrize(
    ("key", "value", "expected"),
    [
        ("diet", "Is vegan", True),
        ("allergy", "Is allergic to shellfish", True),
        ("son_allergy", "Rui is allergic to sesame", True),
        ("wife_diet", "Wife Inês is gluten intolerant", True),
        ("alcohol", "Doesn\u2019t drink alcohol", True),
        ("daughter_spice", "Sofia won't eat anything spicy", True),
        ("injury", "Right wrist hurt in a fall", True),
        ("hearing", "Hard of hearing in the left ear", True),
        ("pregnancy", "Is 34 weeks pregnant", True),
        ("home_city", "Lives in Lisbon", False),
        ("favourite_cuisine", "Favourite cuisine is Ethiopian", False),
        ("painting", "Painted a sunset by the lake", False),
    ],
)
def test_states_constraint_finds_allergies_diets_and_conditions(key: str, value: str, expected: bool) -> None:
    assert states_constraint(key, value) is expected


def test_speaks_for_self_is_linear_on_hostile_text() -> None:
    """A message is a stranger's text: 100,000 characters of any shape cost milliseconds."""
    import time

    for text in ("a" * 100_000, "x " * 50_000, "U" * 100_000, "Us" * 50_000, "you" * 33_000):
        started = time.perf_counter()
        speaks_for_self(text)
        assert time.perf_counter() - started < 0.1


def test_constraint_boost_lifts_a_far_constraint_for_a_personal_message_only() -> None:
    """A diet far from "What should I cook tonight?" in vector space rises above nearer facts that
    limit nothing when the message speaks for the person; a third-person question keeps the order."""
    near = [_memory(f"cooks dish {n}") for n in range(6)]
    far = [_memory(f"unrelated {n}") for n in range(4)]
    vegan = stored_fact("diet", "Is vegan", at=NOW, owner_id=uuid.UUID(int=1), confidence=1.0)
    scores = {
        "vector": {
            **{m.id: 0.40 - 0.01 * n for n, m in enumerate(near)},
            vegan.id: 0.30,
            **{m.id: 0.20 - 0.01 * n for n, m in enumerate(far)},
        }
    }
    rows = [*near, vegan, *far]
    plain = [hit.memory.id for hit in fuse_scores(rows, scores, limit=11)]
    personal = [hit.memory.id for hit in fuse_scores(rows, scores, limit=11, personal=True)]
    assert plain.index(vegan.id) == len(near)
    assert personal.index(vegan.id) < plain.index(vegan.id)
    unboosted = fuse_scores(rows, scores, limit=11, personal=True, fusion=ScoreFusion(constraint_boost=0.0))
    assert [hit.memory.id for hit in unboosted] == plain
