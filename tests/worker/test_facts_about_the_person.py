"""Through the worker's pipeline on SQLite with the rules extractor: what a user says about
themselves to one persona is a `user` fact, so another persona of the team recalls it once
approved; a preference stays with the persona that heard it."""

from __future__ import annotations

import uuid
from pathlib import Path

from extraction.embeddings import HashingEmbedder
from extraction.rules import RulesExtractor
from store.sqlite.store import SqliteMemoryStore
from tests.store.as_the_worker import event_of
from worker.metrics import Metrics
from worker.pipeline import PipelineDeps, process_event


async def test_what_the_user_tells_the_chef_about_themselves_the_coach_knows(tmp_path: Path) -> None:
    store = SqliteMemoryStore(f"sqlite:///{tmp_path}/people.db", HashingEmbedder(dim=64))
    try:
        user, team, chef, coach = uuid.uuid4(), uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
        event = event_of(
            [
                "My name is Dana. I'm vegan and I'm allergic to shellfish.",
                "Noted, Dana.",
                "I live in Lisbon and I work as a nurse. I have asthma.",
                "Thanks for telling me.",
                "My husband Rui cooks on Sundays. I prefer quick recipes over elaborate ones.",
                "Quick it is.",
            ],
            user=user,
            channel=uuid.uuid4(),
            team=team,
            persona=chef,
        )
        deps = PipelineDeps(
            store=store, extractor=RulesExtractor(), embedder=store.embedder, metrics=Metrics()
        )
        outcome = await process_event(event, deps)
        assert outcome.status == "processed"
        scopes = {written.key: written.scope for written in outcome.written}
        assert scopes == {
            "user name": "user",
            "diet preference": "user",
            "allergy shellfish": "user",
            "home location": "user",
            "job title": "user",
            "health asthma": "user",
            "husband's name": "user",
            "prefers quick recipes": "persona_user",
        }
        for written in outcome.written:
            await store.review.approve(written.id, actor="reviewer")
        heard_by_coach = {
            hit.memory.value
            for hit in await store.recall(user, coach, "what should I know", 20, team_id=team)
        }
        assert "Is allergic to shellfish" in heard_by_coach and "Has asthma" in heard_by_coach
        assert "Prefers quick recipes over elaborate ones" not in heard_by_coach
        heard_by_chef = {
            hit.memory.value for hit in await store.recall(user, chef, "recipes", 20, team_id=team)
        }
        assert "Prefers quick recipes over elaborate ones" in heard_by_chef
    finally:
        await store.close()
