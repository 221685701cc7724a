"""`pmem serve` as a real process on real Postgres, driven over real HTTP: sign-in with a JWT from
`pmem token`, a service key from `pmem keys create`, review, erasure, metrics and shutdown."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from cli.embedded import free_port
from store.migrate import migrate
from tests.api.conftest import SECRET, TEAM_A
from tests.api.serve_harness import ServeProcess, pmem
from tests.database_role import DATABASE_ROLE, clean_environment
from tests.factories import user_fact


@pytest.fixture
def serve_env(new_database: object) -> dict[str, str]:
    url = new_database()  # type: ignore[operator]
    migrate(url, 384)
    env = clean_environment("PMEM_")
    env.update(
        PMEM_DATABASE_URL=url,
        PMEM_AUTH_JWT_SECRET=SECRET,
        PMEM_API_PORT=str(free_port()),
        PYTHONPATH=str(Path(__file__).resolve().parents[2]),
    )
    return env


@pytest.fixture
def server(serve_env: dict[str, str]) -> Iterator[str]:
    process = ServeProcess(serve_env)
    yield process.start()
    assert process.stop() == 0


async def test_sign_in_review_and_erasure_over_real_http(server: str, serve_env: dict[str, str]) -> None:
    from extraction.embeddings import HashingEmbedder
    from store.postgres.store import PostgresMemoryStore

    user = uuid.uuid4()
    store = PostgresMemoryStore(
        serve_env["PMEM_DATABASE_URL"], HashingEmbedder(dim=384), database_role=DATABASE_ROLE
    )
    try:
        pending = await store.writes.upsert(
            user_fact(
                user,
                "hometown",
                "Grew up in Ghent",
                team_id=TEAM_A,
            )
        )
    finally:
        await store.close()
    admin = pmem(serve_env, "token", "--role", "team_admin", "--team", str(TEAM_A)).stdout.strip()
    # a person sees their memories of the teams their token lists (the database holds that line)
    person = pmem(serve_env, "token", "--sub", str(user), "--team", str(TEAM_A)).stdout.strip()
    created = pmem(serve_env, "keys", "create", "chat-backend")
    assert created.returncode == 0, created.stderr
    key = created.stdout.strip()

    async with httpx.AsyncClient(base_url=server, timeout=10) as http:
        queue = await http.get("/v1/review", headers={"Authorization": f"Bearer {admin}"})
        assert queue.status_code == 200
        assert [item["id"] for item in queue.json()["items"]] == [str(pending.memory_id)]
        approved = await http.post(
            f"/v1/review/{pending.memory_id}/approve", headers={"Authorization": f"Bearer {admin}"}
        )
        assert approved.status_code == 200 and approved.json()["status"] == "active"
        recall = await http.post(
            "/v1/recall",
            json={"user_id": str(user), "team_id": str(TEAM_A), "query": "where did they grow up"},
            headers={"Authorization": f"Bearer {key}"},
        )
        assert [hit["value"] for hit in recall.json()["items"]] == ["Grew up in Ghent"]
        mine = await http.get("/v1/me/memories", headers={"Authorization": f"Bearer {person}"})
        assert [m["key"] for m in mine.json()["items"]] == ["hometown"]
        erased = await http.delete("/v1/me/memories", headers={"Authorization": f"Bearer {person}"})
        assert erased.json() == {"erased": 1}
        again = await http.post(
            "/v1/recall",
            json={"user_id": str(user), "team_id": str(TEAM_A)},
            headers={"Authorization": f"Bearer {key}"},
        )
        assert again.json()["items"] == []
        metrics = (await http.get("/metrics")).text
        assert 'pmem_api_requests_total{method="POST",route="/v1/recall",status="200"} 2.0' in metrics
        assert 'pmem_review_queue_depth{scope="user"} 0.0' in metrics
        docs = await http.get("/openapi.json")
        assert "/v1/review/{item_id}/approve" in docs.json()["paths"]


def test_serve_refuses_to_start_without_auth_unless_insecure_dev(serve_env: dict[str, str]) -> None:
    env = {k: v for k, v in serve_env.items() if k != "PMEM_AUTH_JWT_SECRET"}
    refused = pmem(env, "serve")
    assert refused.returncode == 2
    assert "PMEM_AUTH_JWT_SECRET" in refused.stderr and "--insecure-dev" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1


def test_keys_list_never_shows_a_key_and_revoke_names_it(serve_env: dict[str, str]) -> None:
    key = pmem(serve_env, "keys", "create", "ops").stdout.strip()
    listing = pmem(serve_env, "keys", "list")
    assert "ops" in listing.stdout and "active" in listing.stdout and key not in listing.stdout
    assert pmem(serve_env, "keys", "revoke", "ops").returncode == 0
    assert "revoked" in pmem(serve_env, "keys", "list").stdout
    missing = pmem(serve_env, "keys", "revoke", "ops")
    assert missing.returncode == 1 and "no active key named 'ops'" in missing.stderr


def test_token_needs_the_secret(serve_env: dict[str, str]) -> None:
    env = {k: v for k, v in serve_env.items() if k != "PMEM_AUTH_JWT_SECRET"}
    result = pmem(env, "token")
    assert result.returncode == 2 and "PMEM_AUTH_JWT_SECRET" in result.stderr


def test_retention_reports_what_it_did(serve_env: dict[str, str]) -> None:
    result = pmem(serve_env, "retention")
    assert result.returncode == 0, result.stderr
    assert "rejected 0 pending memories" in result.stderr and "erased 0 archived memories" in result.stderr
