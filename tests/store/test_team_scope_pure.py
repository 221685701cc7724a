"""The team scope's pure parts: the setting row-level security reads, narrowing, who gets what."""

from __future__ import annotations

import asyncio
import logging
import uuid

import pytest

from api.access import principal_scope, request_scope
from api.principal import Principal
from store.postgres.connections import role_sql
from store.team_scope import (
    EVERY_TEAM,
    NO_TEAM,
    TeamScope,
    bind_scope,
    current_setting,
    narrowed,
    platform_scope,
    request_cell,
    scope_setting,
    team_scope,
    teams_scope,
)

A, B = uuid.UUID(int=1), uuid.UUID(int=2)


def test_the_setting_is_every_team_the_teams_or_nothing() -> None:
    assert scope_setting(TeamScope(teams=None)) == EVERY_TEAM == "*"
    assert scope_setting(teams_scope([B, None, A])) == f"{A},{B}"
    assert scope_setting(teams_scope([])) == NO_TEAM == ""
    assert scope_setting(None) == NO_TEAM


def test_a_request_only_narrows_a_scope_never_widens_it() -> None:
    assert narrowed(TeamScope(teams=None), A).teams == {A}
    assert narrowed(teams_scope([A]), A).teams == {A}
    assert narrowed(teams_scope([A]), B).teams == frozenset()
    assert narrowed(teams_scope([A, B]), None).teams == frozenset()


def test_each_caller_gets_its_own_teams_and_only_an_admin_the_platform_scope(
    caplog: pytest.LogCaptureFixture,
) -> None:
    person = Principal(role="user", subject=uuid.uuid4(), teams=frozenset({A}))
    team_admin = Principal(role="team_admin", subject=uuid.uuid4(), teams=frozenset({B}))
    admin = Principal(role="admin", subject=uuid.uuid4())
    service = Principal(role="service", service_name="platform")
    assert principal_scope(person).teams == {A}
    assert principal_scope(team_admin).teams == {B}
    assert principal_scope(service).teams == frozenset()
    with caplog.at_level(logging.INFO, logger="pmem.platform_scope"):
        assert principal_scope(admin).is_platform
    assert str(admin.subject) in caplog.text
    # a request naming a team: a service or an admin may act in any, a person in their own
    assert request_scope(service, B).teams == {B}
    assert request_scope(admin, A).teams == {A}
    assert request_scope(person, A).teams == {A}
    assert request_scope(person, B).teams == frozenset()


def test_scopes_nest_and_a_request_cell_is_filled_once_the_caller_is_known(
    caplog: pytest.LogCaptureFixture,
) -> None:
    assert current_setting() == NO_TEAM
    with request_cell():
        assert current_setting() == NO_TEAM
        bind_scope(teams_scope([A]))
        assert current_setting() == str(A)
        with team_scope(teams_scope([B])):
            assert current_setting() == str(B)
        assert current_setting() == str(A)
    with caplog.at_level(logging.INFO, logger="pmem.platform_scope"), platform_scope("retention"):
        assert current_setting() == EVERY_TEAM
    assert "retention" in caplog.text
    assert current_setting() == NO_TEAM
    with pytest.raises(ValueError, match="no request scope"):
        bind_scope(teams_scope([A]))


def test_tasks_started_in_a_scope_keep_it() -> None:
    async def started() -> str:
        return current_setting()

    async def main() -> str:
        with team_scope(teams_scope([A])):
            return await asyncio.create_task(started())

    assert asyncio.run(main()) == str(A)


def test_the_database_role_is_a_plain_identifier() -> None:
    assert role_sql("pmem_app") == ["SET ROLE pmem_app"]
    assert role_sql(None) == role_sql("") == []
    for bad in ("pmem_app; DROP TABLE memories", "Pmem", "a-b", "x" * 64):
        with pytest.raises(ValueError, match="database role"):
            role_sql(bad)


@pytest.fixture(autouse=True)
def the_test_sees_every_team() -> None:
    """No ambient scope here: these tests enter the scopes themselves."""
