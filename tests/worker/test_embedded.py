"""The embedded services' pure parts: the server settings they write."""

from __future__ import annotations

import pytest

from worker.embedded import alter_system_sql


def test_a_list_setting_gets_one_literal_per_element() -> None:
    sql = alter_system_sql("shared_preload_libraries", ["pg_stat_statements", "auto_explain"])
    assert sql == "ALTER SYSTEM SET shared_preload_libraries = 'pg_stat_statements', 'auto_explain';"


def test_a_string_setting_is_one_literal_even_with_commas_and_quotes() -> None:
    sql = alter_system_sql("log_line_prefix", "%m, %p's ")
    assert sql == "ALTER SYSTEM SET log_line_prefix = '%m, %p''s ';"


@pytest.mark.parametrize(("name", "value"), [("work_mem; DROP TABLE x", "1MB"), ("search_path", [])])
def test_a_bad_name_or_an_empty_list_is_refused(name: str, value: str | list[str]) -> None:
    with pytest.raises(ValueError, match="Postgres setting"):
        alter_system_sql(name, value)
