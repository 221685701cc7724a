"""Unit tests of the pure store modules: URLs, recall (scopes, terms, fusion, merging), write policy,
and hint. No I/O."""

from __future__ import annotations

import dataclasses
import uuid
from datetime import UTC, datetime, timedelta

import pytest

from store.core.writes import key_identity
from store.model import (
    Memory,
    NewMemory,
    OwnerRef,
    RecallHit,
    Revision,
    Scope,
    Status,
    UpsertResult,
)
from store.postgres.dialect import websearch_or_query
from store.postgres.event_write import plan_stored_keys
from store.postgres.recall_sql import owner_sql, recall_sql
from store.rules.hint import build_memory_hint
from store.rules.policy import merge_settings, plan_approve, plan_reject, plan_upsert, same_value
from store.rules.recall import (
    candidate_count,
    fuse,
    normalize_key,
    resolve_scopes,
    rrf_scores,
    top_order,
    writable_owner,
)
from store.rules.terms import is_empty_query, keyword_terms
from store.rules.urls import DatabaseUrlError, backend_of, to_sqlalchemy_url
from tests.factories import user_fact

T0 = datetime(2026, 1, 1, tzinfo=UTC)
USER = uuid.UUID(int=1)
PERSONA = uuid.UUID(int=2)


def memory(
    key: str,
    *,
    scope: Scope = "user",
    value: str = "v",
    status: Status = "active",
    confidence: float = 1.0,
    age: int = 0,
    id_: int | None = None,
) -> Memory:
    return Memory(
        id=uuid.UUID(int=id_) if id_ is not None else uuid.uuid4(),
        scope=scope,
        owner_id=USER if scope == "user" else PERSONA,
        user_id=USER if scope == "persona_user" else None,
        key=key,
        value=value,
        source_channel_id=None,
        confidence=confidence,
        status=status,
        created_at=T0,
        updated_at=T0 - timedelta(minutes=age),
    )


def new(value: str, status: Status = "pending_review") -> NewMemory:
    return user_fact(USER, "k", value, status=status)


def revision(new_value: str) -> Revision:
    return Revision(
        id=uuid.uuid4(),
        memory_id=uuid.uuid4(),
        old_value="old",
        new_value=new_value,
        confidence=0.5,
        source_event_id=None,
        status="pending",
        created_at=T0,
    )


# -- urls -------------------------------------------------------------------------------------------


def test_plain_postgres_urls_become_psycopg_urls() -> None:
    url = to_sqlalchemy_url("postgresql://app:s3cr%40t@db.internal:5433/pmem?sslmode=require")
    assert url.drivername == "postgresql+psycopg"
    assert (url.username, url.password, url.host, url.port, url.database) == (
        "app",
        "s3cr@t",
        "db.internal",
        5433,
        "pmem",
    )
    assert url.query == {"sslmode": "require"}
    assert to_sqlalchemy_url("postgres://u@h/d").drivername == "postgresql+psycopg"


def test_unix_socket_urls_with_an_empty_password_are_kept() -> None:
    url = to_sqlalchemy_url("postgresql://postgres:@/t1_abc?host=/tmp/pg/sock")
    assert url.drivername == "postgresql+psycopg"
    assert (url.username, url.password, url.host, url.database) == ("postgres", "", None, "t1_abc")
    assert url.query == {"host": "/tmp/pg/sock"}


def test_sqlite_urls_pick_the_async_or_blocking_driver() -> None:
    assert to_sqlalchemy_url("sqlite:///data/m.db").render_as_string() == "sqlite+aiosqlite:///data/m.db"
    assert to_sqlalchemy_url("sqlite:////abs/m.db", asynchronous=False).drivername == "sqlite+pysqlite"
    assert backend_of("sqlite:///x.db") == "sqlite" and backend_of("postgresql://h/d") == "postgresql"


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("mysql://u:p@h/d", "unsupported database URL scheme 'mysql'"),
        ("localhost:5432/db", "not a database URL"),
        ("sqlite://", "names no file"),
    ],
)
def test_unusable_urls_are_refused_with_what_to_write(url: str, message: str) -> None:
    with pytest.raises(DatabaseUrlError, match=message):
        to_sqlalchemy_url(url)


def test_url_errors_never_echo_the_password() -> None:
    with pytest.raises(DatabaseUrlError) as caught:
        to_sqlalchemy_url("mysql://admin:hunter2@db/x")
    assert "hunter2" not in str(caught.value)


# -- scopes and query terms -------------------------------------------------------------------------


def test_with_a_persona_recall_reads_three_scopes_most_specific_first() -> None:
    assert resolve_scopes(USER, PERSONA) == (
        OwnerRef(scope="persona_user", owner_id=PERSONA, user_id=USER),
        OwnerRef(scope="persona", owner_id=PERSONA),
        OwnerRef(scope="user", owner_id=USER),
    )


def test_without_a_persona_recall_reads_the_user_scope_only() -> None:
    assert resolve_scopes(USER, None) == (OwnerRef(scope="user", owner_id=USER),)


def test_explicit_saves_go_to_persona_user_with_a_persona_else_user() -> None:
    assert writable_owner(USER, PERSONA) == OwnerRef(scope="persona_user", owner_id=PERSONA, user_id=USER)
    assert writable_owner(USER, None) == OwnerRef(scope="user", owner_id=USER)


def test_the_tsquery_input_ors_every_term_and_cannot_inject_syntax() -> None:
    assert websearch_or_query("Where does she WORK?") == "where or does or she or work"
    assert websearch_or_query('-"drop" <-> or !x') == "drop or x"
    assert websearch_or_query("?!") is None


def test_keyword_terms_drop_stopwords_and_single_letters() -> None:
    assert keyword_terms("What is the name of her dog, a Labrador?") == ["name", "dog", "labrador"]


def test_a_query_without_words_is_empty() -> None:
    assert is_empty_query("") and is_empty_query("  ?! ") and not is_empty_query("dog")


def test_keys_merge_case_and_whitespace_insensitively() -> None:
    assert normalize_key("  Favourite   Food ") == normalize_key("favourite food")


def test_candidate_count_fetches_more_than_the_limit() -> None:
    assert candidate_count(20) == 60 and candidate_count(1) == 30


# -- fusion -----------------------------------------------------------------------------------------


def test_rrf_sums_weighted_reciprocal_ranks_with_k_60() -> None:
    a, b, c = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    scores = rrf_scores({"vector": [a, b], "text": [b, c]})
    assert scores[a] == (pytest.approx(1 / 61), ("vector",))
    assert scores[b] == (pytest.approx(1 / 62 + 1 / 61), ("vector", "text"))
    weighted = rrf_scores({"vector": [a], "text": [c]}, weights={"vector": 2.0, "text": 0.5}, k=10)
    assert weighted[a][0] == pytest.approx(2 / 11) and weighted[c][0] == pytest.approx(0.5 / 11)


def test_fuse_ranks_rows_in_both_branches_first() -> None:
    both, vec, txt = memory("both"), memory("vec"), memory("txt")
    hits = fuse([both, vec, txt], {"vector": [vec.id, both.id], "text": [txt.id, both.id]}, limit=10)
    assert hits[0].memory is both and hits[0].sources == ("vector", "text")
    assert {h.memory.key for h in hits[1:]} == {"vec", "txt"}


def test_fuse_shows_the_most_specific_scope_with_the_best_score_of_its_key() -> None:
    user_row = memory("Diet", scope="user", value="vegetarian")
    persona_row = memory("diet", scope="persona", value="menu is vegan")
    override = memory("diet ", scope="persona_user", value="eats fish")
    other = memory("city")
    hits = fuse([user_row, persona_row, override, other], {"text": [user_row.id, other.id]}, limit=10)
    assert [h.memory for h in hits] == [override, other]
    assert hits[0].score == pytest.approx(1 / 61) and hits[0].sources == ("text",)


def test_fuse_ignores_rows_that_share_no_key_with_a_ranked_row() -> None:
    ranked, unranked = memory("a"), memory("b")
    assert [h.memory for h in fuse([ranked, unranked], {"vector": [ranked.id]}, limit=10)] == [ranked]


def test_fuse_cuts_at_the_limit_after_merging() -> None:
    rows = [memory(f"k{i}") for i in range(5)]
    same_key = memory("k0", scope="persona_user")
    hits = fuse([*rows, same_key], {"vector": [r.id for r in rows]}, limit=3)
    assert [h.memory.key for h in hits] == ["k0", "k1", "k2"] and hits[0].memory is same_key


def test_top_order_is_confidence_then_recency() -> None:
    rows = [
        memory("old-high", confidence=0.9, age=10),
        memory("low", confidence=0.2),
        memory("new-high", confidence=0.9, age=1),
    ]
    assert [m.key for m in top_order(rows)] == ["new-high", "old-high", "low"]


# -- SQL shape (pure strings) -----------------------------------------------------------------------


def test_recall_sql_filters_every_branch_by_owner_and_active_status() -> None:
    owners = resolve_scopes(USER, PERSONA)
    sql = recall_sql(owners=owners, branches=["vector", "text"], embedding_dim=384)
    assert sql.count("m.status = 'active'") == 2 and sql.count(owner_sql(owners, "m")) == 2
    assert "w.status = 'active'" in sql and owner_sql(owners, "w") in sql
    assert (
        "CAST(CAST(%(qv)s AS real[]) AS vector(384))" in sql
        and "websearch_to_tsquery('english', %(tq)s)" in sql
    )


def test_recall_sql_weighs_key_only_words_only_when_value_weighted() -> None:
    owners = resolve_scopes(USER, None)
    plain = recall_sql(owners=owners, branches=["vector", "text"], embedding_dim=384)
    weighted = recall_sql(owners=owners, branches=["vector", "text"], embedding_dim=384, value_weighted=True)
    assert "key_weight" not in plain and "to_tsvector" not in plain
    assert "to_tsvector('english', m.value)" in weighted
    assert "THEN 1 ELSE %(key_weight)s END" in weighted


def test_recall_sql_casts_to_halfvec_above_2000_dimensions() -> None:
    sql = recall_sql(owners=resolve_scopes(USER, None), branches=["vector"], embedding_dim=3072)
    assert "CAST(m.embedding AS halfvec(3072)) <=> CAST(CAST(%(qv)s AS real[]) AS halfvec(3072))" in sql
    assert "hits AS (SELECT DISTINCT id FROM ranked)" in sql


def test_owners_read_first_are_read_once_and_every_branch_ranks_their_rows() -> None:
    owners = resolve_scopes(USER, PERSONA)
    branches = ["vector", "text", "standing", "pinned"]
    sql = recall_sql(
        owners=owners, branches=branches, embedding_dim=384, value_weighted=True, owned_first=True
    )
    assert (
        sql.count(owner_sql(owners, "m")) == 1
        and "owned AS MATERIALIZED (SELECT m.id, m.embedding <=>" in sql
    )
    assert sql.count("FROM memories m") == 1 and sql.count("FROM owned m") == 4
    owned, branches_sql = sql.split("vec AS", 1)
    # the columns the branches rank by come from `owned`: the value (value-weighted), the key
    # (standing), and no branch reads the table itself (the HNSW or GIN paths)
    assert "m.value" in owned and "m.key" in owned and "m.pinned" in owned
    assert "memories m WHERE" not in branches_sql


# -- write policy -----------------------------------------------------------------------------------


def test_a_new_key_is_inserted_with_its_status() -> None:
    plan = plan_upsert(None, None, new("x"))
    assert (plan.kind, plan.action, plan.audit, plan.status) == ("insert", "created", "add", "pending_review")


def test_extraction_against_an_active_memory_proposes_never_updates() -> None:
    active = memory("k", value="vegetarian")
    assert plan_upsert(active, None, new("vegan")).kind == "propose"
    assert plan_upsert(active, None, new(" vegetarian ")).kind == "unchanged"
    assert plan_upsert(active, revision("vegan"), new("vegan")).kind == "unchanged"
    replaced = plan_upsert(active, revision("vegan"), new("pescatarian"))
    assert (replaced.kind, replaced.replace_revision) == ("propose", True)


def test_extraction_updates_pending_rows_and_reopens_archived_ones_only_for_new_values() -> None:
    pending = memory("k", value="a", status="pending_review")
    archived = memory("k", value="a", status="archived")
    assert plan_upsert(pending, None, new("b")).status == "pending_review"
    assert plan_upsert(pending, None, new("a")).kind == "unchanged"
    assert plan_upsert(archived, None, new("a")).kind == "unchanged"
    assert (plan_upsert(archived, None, new("b")).kind, plan_upsert(archived, None, new("b")).status) == (
        "update",
        "pending_review",
    )


def test_explicit_writes_update_directly_and_close_the_open_proposal() -> None:
    active = memory("k", value="a")
    plan = plan_upsert(active, revision("b"), new("c", status="active"))
    assert (plan.kind, plan.status, plan.close_revision) == ("update", "active", True)
    assert plan_upsert(active, None, new("a", status="active")).kind == "unchanged"
    pending = memory("k", value="a", status="pending_review")
    assert plan_upsert(pending, None, new("a", status="active")).status == "active"


def test_review_plans() -> None:
    assert plan_approve(memory("k"), revision("b")) == "apply_revision"
    assert plan_approve(memory("k", status="pending_review"), None) == "activate"
    assert plan_approve(memory("k"), None) == "nothing"
    assert plan_approve(memory("k", status="archived"), None) == "nothing"
    assert plan_reject(memory("k"), revision("b")) == "discard_revision"
    assert plan_reject(memory("k", status="pending_review"), None) == "archive"
    assert plan_reject(memory("k"), None) == "nothing"


def test_values_compare_modulo_whitespace_only() -> None:
    assert same_value(" Likes  tea", "Likes tea") and not same_value("Likes tea", "likes tea")


def test_settings_merge_most_specific_non_null_wins() -> None:
    merged = merge_settings(
        [
            {"enabled": True, "min_confidence": 0.6, "extraction_prompt": "global"},
            {"enabled": False, "min_confidence": None, "persona_learning": None},
            {"persona_learning": True, "extraction_prompt": "  "},
        ]
    )
    assert (merged.enabled, merged.persona_learning, merged.min_confidence) == (False, True, 0.6)
    assert merged.extraction_prompt is None  # an empty override clears the inherited one
    assert merge_settings([]).min_confidence == 0.5


# -- hint -------------------------------------------------------------------------------------------


def test_hint_is_bullets_of_key_and_value_best_first() -> None:
    first = RecallHit(memory=memory("diet", value="Is vegetarian"), score=0.03)
    second = RecallHit(memory=memory("city", value="Lives in\nLisbon"), score=0.01)
    assert build_memory_hint([second, first]) == "- diet: Is vegetarian\n- city: Lives in Lisbon"


def test_hint_of_nothing_is_empty() -> None:
    assert build_memory_hint([]) == ""


def test_hint_stays_under_the_cap_without_cutting_a_bullet() -> None:
    hits = [
        RecallHit(memory=memory(f"fact {i:03}", value="x" * 90), score=1.0 - i / 1000) for i in range(200)
    ]
    hint = build_memory_hint(hits)
    assert 5800 < len(hint) <= 6000
    assert all(line.startswith("- fact ") and line.endswith("x" * 90) for line in hint.split("\n"))
    assert hint.split("\n")[0].startswith("- fact 000")


def test_hint_skips_a_bullet_too_long_for_the_cap_and_keeps_the_rest() -> None:
    huge = RecallHit(memory=memory("essay", value="y" * 7000), score=0.9)
    small = RecallHit(memory=memory("pet", value="cat"), score=0.1)
    assert build_memory_hint([huge, small]) == "- pet: cat"
    assert build_memory_hint([small], max_chars=5) == ""


def test_hint_of_bare_memories_ranks_specific_scopes_then_confidence() -> None:
    rows = [
        memory("a", scope="user", confidence=1.0),
        memory("b", scope="persona_user", confidence=0.1),
        memory("c", scope="persona", confidence=0.9),
        memory("d", scope="user", confidence=0.5),
    ]
    assert [line[2] for line in build_memory_hint(rows).split("\n")] == ["b", "c", "a", "d"]


def test_dedup_verdicts_split_an_event_into_skipped_respelled_and_stored_keys() -> None:
    from store.core.writes import apply_dedup, write_order
    from store.model import DedupVerdict, Neighbour

    owner, stored_id, other_id = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    now = datetime(2026, 1, 1, tzinfo=UTC)

    def new(key: str) -> NewMemory:
        return user_fact(owner, key, key, confidence=0.9)

    def stored(memory_id: uuid.UUID, key: str) -> Neighbour:
        memory = Memory(
            id=memory_id, scope="user", owner_id=owner, user_id=None, key=key, value=key,
            source_channel_id=None, confidence=0.9, status="active", created_at=now, updated_at=now,
        )  # fmt: skip
        return Neighbour(memory=memory, similarity=0.9)

    def rule(memory: NewMemory, found: object) -> DedupVerdict:
        if memory.key == "home city":
            return DedupVerdict(duplicate_of=stored_id)
        if memory.key == "Pet":
            return DedupVerdict(key="pet")  # the stored spelling
        return DedupVerdict()

    rows = [new("home city"), new("Pet"), new("diet"), new("job")]
    near = [[stored(stored_id, "city")], [stored(other_id, "pet")], [stored(other_id, "pet")], []]
    results, stored_key = apply_dedup(rows, near, rule)
    assert list(results) == [0] and results[0].near_duplicate and results[0].memory_id == stored_id
    assert rows[1].key == "pet" and stored_key == {1}  # respelled onto a stored key: an upsert
    assert [rows[i].key for i in write_order(rows)] == ["diet", "home city", "job", "pet"]


def test_occurrence_rounds_put_a_repeated_key_in_a_later_round_keeping_the_order() -> None:
    from store.core.writes import occurrence_rounds

    owner, other = uuid.uuid4(), uuid.uuid4()

    def new(key: str, who: uuid.UUID = owner) -> NewMemory:
        return user_fact(who, key, key, confidence=0.9)

    rows = [new("city"), new("pet"), new("city"), new("city", other), new("city"), new("pet")]
    assert occurrence_rounds(rows, [0, 1, 2, 3, 4, 5]) == [[0, 1, 3], [2, 5], [4]]
    assert occurrence_rounds(rows, [5, 3]) == [[5, 3]]
    assert occurrence_rounds(rows, []) == []


def test_stored_keys_are_planned_in_order_as_plan_upsert_decides() -> None:
    stored = {
        "city": memory("city", value="Lives in Lyon", status="pending_review"),
        "pet": memory("pet", value="Has a cat"),
        "job": memory("job", value="Works as a nurse"),
        "hobby": memory("hobby", value="Plays the violin", status="pending_review"),
        "food": memory("food", value="Eats meat"),
    }
    open_job = dataclasses.replace(revision("Works as a surgeon"), memory_id=stored["job"].id)
    open_food = dataclasses.replace(revision("Eats no meat"), memory_id=stored["food"].id)
    rows = [
        user_fact(USER, key, value)
        for key, value in (
            ("city", "Lives in Porto"),  # pending: updated
            ("pet", "Has a dog"),  # reviewed: a new proposal
            ("job", "Teaches chemistry"),  # reviewed, revision open: that revision replaced
            ("hobby", "Plays  the violin"),  # the same value: unchanged
            ("food", "Eats no meat"),  # what the open revision proposes: unchanged, naming it
        )
    ]
    results: dict[int, UpsertResult] = {}
    planned = plan_stored_keys(
        rows,
        [[float(i)] for i in range(len(rows))],
        [4, 3, 2, 1, 0],
        {key_identity(m): m for m in stored.values()},
        {open_job.memory_id: open_job, open_food.memory_id: open_food},
        results,
    )

    assert [(p.existing.key, p.new.value, p.vector) for p in planned] == [
        ("job", "Teaches chemistry", [2.0]),
        ("pet", "Has a dog", [1.0]),
        ("city", "Lives in Porto", [0.0]),
    ]
    assert planned[0].revision_id == open_job.id
    assert planned[1].revision_id is not None and planned[1].revision_id != open_job.id
    assert planned[2].revision_id is None
    assert {i: (r.memory_id, r.action, r.revision_id) for i, r in results.items()} == {
        0: (stored["city"].id, "updated", None),
        1: (stored["pet"].id, "revision_proposed", planned[1].revision_id),
        2: (stored["job"].id, "revision_proposed", open_job.id),
        3: (stored["hobby"].id, "unchanged", None),
        4: (stored["food"].id, "unchanged", open_food.id),
    }
