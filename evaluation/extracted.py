"""LoCoMo through the extraction pipeline (pure part): each session becomes `conversation.ended`
events for one user, so the worker's pipeline extracts memories the way it would from a chat
platform.

A LoCoMo session is a talk between two people, and the pipeline extracts facts from the `user`'s
messages. So each session is sent twice, once as each speaker (their turns `user`, the other's
`assistant`), for the same owner: facts about both speakers end up in memory, as the questions ask
about both."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from evaluation.locomo import Conversation, dialog_text, session_datetime
from worker.events import ConversationEnded


@dataclass(frozen=True, kw_only=True, slots=True)
class SessionEvent:
    """One event to run through the pipeline, with the session and the speaker it speaks as."""

    session: int
    speaker: str
    event: ConversationEnded


def session_events(conversation: Conversation, owner: uuid.UUID) -> list[SessionEvent]:
    """Events for every session in order, once per speaker (ids derived from the owner, so a rerun
    of the same owner produces the same events)."""
    out: list[SessionEvent] = []
    sessions = sorted({turn.session for turn in conversation.turns})
    speakers = conversation.speakers or tuple(dict.fromkeys(t.speaker for t in conversation.turns))
    for session in sessions:
        turns = [t for t in conversation.turns if t.session == session]
        when = session_datetime(conversation.session_dates.get(session))
        for speaker in speakers:
            messages: list[Mapping[str, Any]] = [
                {
                    "role": "user" if turn.speaker == speaker else "assistant",
                    "content": turn.text
                    if not turn.blip_caption
                    else dialog_caption(turn.text, turn.blip_caption),
                    "at": when,
                    "name": turn.speaker,
                }
                for turn in turns
            ]
            event = ConversationEnded.model_validate(
                {
                    "event_id": uuid.uuid5(owner, f"session {session} as {speaker}"),
                    "type": "conversation.ended",
                    "occurred_at": when,
                    "channel_id": uuid.uuid5(owner, f"session {session}"),
                    "user_id": owner,
                    "persona_id": None,
                    "messages": messages,
                }
            )
            out.append(SessionEvent(session=session, speaker=speaker, event=event))
    return out


def dialog_caption(text: str, caption: str | None) -> str:
    """A turn's text, with the image it shares as the dialog units show it (` [shares …]`)."""
    if not caption:
        return text.strip()
    quoted = dialog_text("x", text, caption)
    return text.strip() + quoted[quoted.rindex('"') + 1 :]


def without_evidence_recall(summary: Mapping[str, Any]) -> dict[str, Any]:
    """A summary without evidence recall@k (extracted memories carry no dia_ids), by category too."""
    out = {k: v for k, v in summary.items() if not k.startswith("recall@")}
    if "by_category" in summary:
        out["by_category"] = {
            name: without_evidence_recall(entry) for name, entry in summary["by_category"].items()
        }
    return out


def usage_summary(per_session: Sequence[Mapping[str, int]]) -> dict[str, float]:
    """Mean and total prompt/completion tokens, LLM calls and memories written per event (one
    session as one speaker)."""
    count = len(per_session)
    keys = ("prompt_tokens", "completion_tokens", "llm_calls", "written")
    totals = {key: sum(int(item.get(key, 0)) for item in per_session) for key in keys}
    summary: dict[str, float] = {"events": count}
    for key in keys:
        summary[f"{key}_total"] = totals[key]
        summary[f"{key}_per_event"] = totals[key] / count if count else 0.0
    return summary
