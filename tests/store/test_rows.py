"""The one shape of a row: the tables hold the columns named like the model's fields, and the
decoders read them back into the same model."""

from __future__ import annotations

import dataclasses
import uuid
from datetime import UTC, datetime

import pytest

from store.core.rows import (
    MEMORY_COLUMNS,
    REVISION_COLUMNS,
    TURN_COLUMNS,
    memory_from_row,
    revision_from_row,
    turn_from_row,
)
from store.core.schema import SchemaDialect, build_schema
from store.model import Memory, Revision, Turn
from store.postgres.schema import POSTGRES
from store.sqlite.schema import SQLITE
from tests.factories import past_turn

NOW = datetime(2026, 12, 5, 9, 0, tzinfo=UTC)


@pytest.mark.parametrize("dialect", [POSTGRES, SQLITE], ids=["postgres", "sqlite"])
def test_each_table_holds_its_models_columns_and_only_the_stores_own_beside_them(
    dialect: SchemaDialect,
) -> None:
    schema = build_schema(8, dialect)
    tables = (
        (schema.memories, MEMORY_COLUMNS, {"embedding", "search_tsv"}),
        (
            schema.revisions,
            REVISION_COLUMNS,
            {"embedding", "source_channel_id", "proposed_by", "decided_by", "decided_at"},
        ),
        # `text_key` and `window_tsv`: Postgres' context index reads the window from them
        (
            schema.turns,
            TURN_COLUMNS,
            {"search_text", "embedding", "created_at", "search_tsv", "text_key", "window_tsv"},
        ),
    )
    for table, model_columns, stores_own in tables:
        names = set(table.c.keys())
        assert set(model_columns) <= names, table.name
        assert names - set(model_columns) <= stores_own, table.name


def test_the_column_lists_are_the_models_fields_in_order() -> None:
    for model, columns in ((Memory, MEMORY_COLUMNS), (Revision, REVISION_COLUMNS), (Turn, TURN_COLUMNS)):
        assert columns == tuple(field.name for field in dataclasses.fields(model))


def test_a_row_reads_back_as_the_model_it_was_made_of() -> None:
    memory = Memory(
        id=uuid.uuid4(),
        scope="persona_user",
        owner_id=uuid.uuid4(),
        user_id=uuid.uuid4(),
        key="city",
        value="Porto",
        source_channel_id=uuid.uuid4(),
        confidence=0.7,
        status="active",
        created_at=NOW,
        updated_at=NOW,
        team_id=uuid.uuid4(),
        evidence='user: "I live in Porto"',
        observed_at=NOW,
    )
    revision = Revision(
        id=uuid.uuid4(),
        memory_id=memory.id,
        old_value="Porto",
        new_value="Lisbon",
        confidence=0.9,
        source_event_id=None,
        status="pending",
        created_at=NOW,
    )
    turn = past_turn("I moved to Lisbon", speaker="Ana")
    assert memory_from_row(dataclasses.asdict(memory)) == memory
    assert revision_from_row(dataclasses.asdict(revision)) == revision
    assert turn_from_row(dataclasses.asdict(turn)) == turn


def test_optional_columns_left_out_read_as_none_and_a_required_one_left_out_fails() -> None:
    row = {
        "id": uuid.uuid4(),
        "scope": "user",
        "owner_id": uuid.uuid4(),
        "user_id": None,
        "key": "city",
        "value": "Porto",
        "source_channel_id": None,
        # REAL reads 0.7 back as 0.69999998
        "confidence": 0.699999988079071,
        "status": "active",
        "created_at": NOW,
        "updated_at": NOW,
    }
    memory = memory_from_row(row)
    assert (memory.team_id, memory.evidence, memory.observed_at, memory.confidence) == (None, None, None, 0.7)
    with pytest.raises(KeyError, match="status"):
        memory_from_row({name: value for name, value in row.items() if name != "status"})
