"""The chat-scenario set (`bench/data/chat_scenarios/`, one JSON file per user): its data model, its
loading and validation, and the extractor reply that writes its facts (pure).

Each user talks to one persona over a dozen conversations or more: everyday questions, the facts
the user states, filler ("Thanks!", the persona's sign-off) and earlier questions that restate the
next messages. Each fact names the messages it was said in (`evidence`, numbered from 1) and the
reviewer's decision (`approved` or `rejected`). Each probe is a next message with the approved
facts its answer needs and the earlier messages that restate it. Users belong to the `tuning` half
(constants are chosen on it) or the `heldout` half (reported)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

Split = Literal["tuning", "heldout"]
SPLITS: tuple[Split, ...] = ("tuning", "heldout")
FACT_STATUSES = ("approved", "rejected")
FACT_SCOPES = ("user", "persona_user")


class ScenarioFormatError(ValueError):
    """A scenario file does not hold what the set promises; the message names the file and part."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Message:
    """One chat message: who said it, what, and whether it is filler (no content to remember)."""

    role: Literal["user", "assistant"]
    content: str
    filler: bool = False


@dataclass(frozen=True, kw_only=True, slots=True)
class Said:
    """Where a message is: its conversation's id and its number in it (from 1)."""

    conversation: str
    message: int


@dataclass(frozen=True, kw_only=True, slots=True)
class ChatConversation:
    """One conversation: its id, when it ended and its messages in order."""

    id: str
    at: datetime
    messages: tuple[Message, ...]


@dataclass(frozen=True, kw_only=True, slots=True)
class Fact:
    """One fact as a capable extractor writes it, with the reviewer's decision."""

    id: str
    key: str
    value: str
    scope: str
    status: str
    evidence: tuple[Said, ...]


@dataclass(frozen=True, kw_only=True, slots=True)
class Probe:
    """A next message, the approved facts (ids) it needs, and the earlier messages restating it."""

    id: str
    message: str
    needs: tuple[str, ...]
    restated_by: tuple[Said, ...]


@dataclass(frozen=True, kw_only=True, slots=True)
class Scenario:
    """One user's history with one persona."""

    user: str
    persona: str
    split: Split
    conversations: tuple[ChatConversation, ...]
    facts: tuple[Fact, ...]
    probes: tuple[Probe, ...]

    def text_of(self, said: Said) -> str:
        """The text of the message `said` points at."""
        conversation = next(c for c in self.conversations if c.id == said.conversation)
        return conversation.messages[said.message - 1].content

    def filler_texts(self) -> tuple[str, ...]:
        """Every filler message's text, once each."""
        return tuple(dict.fromkeys(m.content for c in self.conversations for m in c.messages if m.filler))

    def rejected_values(self) -> tuple[str, ...]:
        """The values of the facts the reviewer rejected."""
        return tuple(f.value for f in self.facts if f.status == "rejected")

    def fact(self, fact_id: str) -> Fact:
        """The fact of that id."""
        return next(f for f in self.facts if f.id == fact_id)

    def facts_of(self, conversation_id: str) -> tuple[Fact, ...]:
        """The facts first said in that conversation (an extractor writes a fact where it is said)."""
        return tuple(f for f in self.facts if f.evidence and f.evidence[0].conversation == conversation_id)


def _said(raw: Any, where: str) -> Said:
    try:
        return Said(conversation=str(raw["conversation"]), message=int(raw["message"]))
    except (KeyError, TypeError, ValueError) as exc:
        raise ScenarioFormatError(f"{where}: expected {{conversation, message}}, got {raw!r}") from exc


def parse_scenario(data: Mapping[str, Any], where: str = "scenario") -> Scenario:
    """One user's scenario from its JSON, validated: every reference points at a message, every
    probe needs approved facts, ids are unique (ScenarioFormatError names what is wrong)."""
    try:
        conversations = tuple(
            ChatConversation(
                id=str(c["id"]),
                at=datetime.fromisoformat(str(c["at"]).replace("Z", "+00:00")),
                messages=tuple(
                    Message(role=m["role"], content=str(m["content"]), filler=bool(m.get("filler", False)))
                    for m in c["messages"]
                ),
            )
            for c in data["conversations"]
        )
        facts = tuple(
            Fact(
                id=str(f["id"]),
                key=str(f["key"]),
                value=str(f["value"]),
                scope=str(f["scope"]),
                status=str(f["status"]),
                evidence=tuple(_said(e, f"{where}: fact {f['id']}") for e in f["evidence"]),
            )
            for f in data["facts"]
        )
        probes = tuple(
            Probe(
                id=str(p["id"]),
                message=str(p["message"]),
                needs=tuple(str(n) for n in p["needs"]),
                restated_by=tuple(_said(e, f"{where}: probe {p['id']}") for e in p.get("restated_by", ())),
            )
            for p in data["probes"]
        )
        scenario = Scenario(
            user=str(data["user"]),
            persona=str(data["persona"]),
            split=data["split"],
            conversations=conversations,
            facts=facts,
            probes=probes,
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise ScenarioFormatError(f"{where}: {exc!r}") from exc
    _validate(scenario, where)
    return scenario


def _validate(scenario: Scenario, where: str) -> None:
    if scenario.split not in SPLITS:
        raise ScenarioFormatError(f"{where}: split {scenario.split!r} is not one of {SPLITS}")
    lengths = {c.id: len(c.messages) for c in scenario.conversations}
    if len(lengths) != len(scenario.conversations):
        raise ScenarioFormatError(f"{where}: conversation ids repeat")
    for conversation in scenario.conversations:
        for message in conversation.messages:
            if message.role not in ("user", "assistant") or not message.content.strip():
                raise ScenarioFormatError(f"{where}: {conversation.id} has an empty or unknown message")

    def check(said: Said, what: str) -> None:
        if not 1 <= said.message <= lengths.get(said.conversation, 0):
            raise ScenarioFormatError(f"{where}: {what} points at no message ({said})")

    facts = {f.id: f for f in scenario.facts}
    if len(facts) != len(scenario.facts) or len({f.key for f in scenario.facts}) != len(scenario.facts):
        raise ScenarioFormatError(f"{where}: fact ids or keys repeat")
    for fact in scenario.facts:
        if fact.status not in FACT_STATUSES or fact.scope not in FACT_SCOPES or not fact.evidence:
            raise ScenarioFormatError(f"{where}: fact {fact.id} needs a status, a scope and evidence")
        for said in fact.evidence:
            check(said, f"fact {fact.id}")
            if _message(scenario, said).role != "user":
                raise ScenarioFormatError(f"{where}: fact {fact.id} cites an assistant message")
    for probe in scenario.probes:
        if not probe.needs or any(facts.get(n) is None or facts[n].status != "approved" for n in probe.needs):
            raise ScenarioFormatError(f"{where}: probe {probe.id} must need approved facts of the set")
        for said in probe.restated_by:
            check(said, f"probe {probe.id}")


def _message(scenario: Scenario, said: Said) -> Message:
    conversation = next(c for c in scenario.conversations if c.id == said.conversation)
    return conversation.messages[said.message - 1]


def load_scenarios(directory: Path) -> list[Scenario]:
    """Every `*.json` scenario in `directory`, in file-name order."""
    files = sorted(directory.glob("*.json"))
    if not files:
        raise ScenarioFormatError(f"{directory}: no scenario files (*.json)")
    return [parse_scenario(json.loads(path.read_text(encoding="utf-8")), path.name) for path in files]


def extractor_reply(scenario: Scenario, conversation_id: str) -> str:
    """The reply a capable extractor gives for one conversation: the facts first said in it, each
    with its evidence numbers in that conversation (the JSON the extraction prompt asks for)."""
    memories = [
        {
            "key": fact.key,
            "value": fact.value,
            "confidence": 0.9,
            "scope": fact.scope,
            "evidence": [s.message for s in fact.evidence if s.conversation == conversation_id],
        }
        for fact in scenario.facts_of(conversation_id)
    ]
    return json.dumps({"memories": memories})


def restating_texts(scenario: Scenario, probe: Probe) -> tuple[str, ...]:
    """The earlier messages that restate `probe`."""
    return tuple(scenario.text_of(said) for said in probe.restated_by)


def set_summary(scenarios: Sequence[Scenario]) -> dict[str, Any]:
    """What the set holds: users, personas, conversations, probes and approved facts per user."""
    return {
        "users": len(scenarios),
        "personas": sorted({s.persona for s in scenarios}),
        "probes": sum(len(s.probes) for s in scenarios),
        "by_user": {
            s.user: {
                "persona": s.persona,
                "split": s.split,
                "conversations": len(s.conversations),
                "approved_facts": sum(1 for f in s.facts if f.status == "approved"),
                "probes": len(s.probes),
            }
            for s in scenarios
        },
    }
