"""`MemoryClient` over real HTTP against `pmem serve`: the platform's calls, the reviewer's, the
person's, the directory and settings, and an error, each through the synchronous client."""

from __future__ import annotations

import json
import uuid

import pytest

from api.auth import mint_jwt
from pmem_client import MemoryApiError, MemoryClient
from tests.api.conftest import SECRET
from tests.api.serve_harness import Served

TEAM = uuid.UUID(int=0xA)


def test_the_sync_client_drives_a_running_server(served: Served) -> None:
    user = uuid.uuid4()
    admin = mint_jwt(secret=SECRET, subject=uuid.uuid4(), role="admin")
    person = mint_jwt(secret=SECRET, subject=user, teams=(TEAM,))
    with (
        MemoryClient(served.base, served.service_key) as service,
        MemoryClient(served.base + "/", admin) as reviewer,
        MemoryClient(served.base, person) as me,
    ):
        assert reviewer.put_settings("team", {"review_tool_saves": True}, TEAM)["own"]["review_tool_saves"]
        saved = service.call_tool(
            "memory_save",
            json.dumps({"key": "pet", "value": "Has a cat named Miso"}),
            user_id=user,
            team_id=TEAM,
        )
        assert saved["saved"] is True
        pending = reviewer.review_queue(team_id=TEAM, user_id=user)["items"]
        assert [item["value"] for item in pending] == ["Has a cat named Miso"]
        approved = reviewer.approve(pending[0]["id"])
        assert approved["status"] == "active"
        assert reviewer.memory(approved["id"])["history"][-1]["action"] == "approve"
        assert "Has a cat named Miso" in service.hint(user, team_id=TEAM, query="pets")
        values = [
            item.get("value") for item in service.recall(user, team_id=TEAM, include=["memories"])["items"]
        ]
        assert values == ["Has a cat named Miso"]
        assert [m["key"] for m in me.my_memories()["items"]] == ["pet"]
        assert me.edit_my_memory(approved["id"], "Has two cats")["value"] == "Has two cats"
        assert service.set_name("users", user, "Ana")["name"] == "Ana"
        assert reviewer.settings("global")["level"] == "global"
        assert me.export_my_data()["memories"][0]["value"] == "Has two cats"
        assert service.erase_user(user) >= 1
        with pytest.raises(MemoryApiError) as caught:
            me.reject_my_memory(approved["id"])
        assert caught.value.status == 404 and caught.value.message
    with pytest.raises(ValueError, match="credential"):
        MemoryClient(served.base, "")
