"""`pmem demo` offline: the scripted persona learner adds persona-scope facts only where allowed."""

from __future__ import annotations

from cli.commands.demo_ui import ScriptedFact, ScriptedPersonaLearner
from extraction.rules import RulesExtractor
from extraction.types import ExtractionRequest, TranscriptMessage

SCRIPT = (ScriptedFact("without peanuts", "allergy-aware cooking", "Checks recipes for peanuts", 0.8),)
CHAT = (
    TranscriptMessage(role="user", content="I'm vegetarian."),
    TranscriptMessage(role="assistant", content="A Thai curry, without peanuts."),
)


async def test_persona_facts_are_added_when_persona_learning_allows_the_persona_scope() -> None:
    learner = ScriptedPersonaLearner(RulesExtractor(), SCRIPT)
    request = ExtractionRequest(messages=CHAT, allowed_scopes=("user", "persona", "persona_user"))
    result = await learner.extract(request)
    scopes = {(c.scope, c.key) for c in result.candidates}
    assert ("persona", "allergy-aware cooking") in scopes
    assert ("user", "diet preference") in scopes  # the rules' own candidates stay


async def test_no_persona_facts_without_persona_learning_or_without_the_phrase() -> None:
    learner = ScriptedPersonaLearner(RulesExtractor(), SCRIPT)
    off = await learner.extract(ExtractionRequest(messages=CHAT, allowed_scopes=("user", "persona_user")))
    assert all(c.scope != "persona" for c in off.candidates)
    quiet = (TranscriptMessage(role="user", content="without peanuts please"),)  # the user said it
    unsaid = await learner.extract(
        ExtractionRequest(messages=quiet, allowed_scopes=("user", "persona", "persona_user"))
    )
    assert all(c.scope != "persona" for c in unsaid.candidates)
