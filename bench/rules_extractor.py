"""Recall and precision of the offline rules extractor on the first-hour set.

The set (bench/data/first_hour/, written for this project) holds short conversations, each
labelled with the facts a careful person would note about the user. `tune.json` is the half rules
may be tuned on; `held_out.json` was written first and is not read while tuning. Each conversation
runs through `RulesExtractor` (scopes as the worker allows them: `persona_user` with a persona),
then through the worker's grounding check (`worker.planning.ground_candidates`): what grounding
drops is counted as `ungrounded` (the rules never invent, so it should stay 0) and not scored.
Matching (`evaluation.labelled_facts`): same scope, same attribute of the key, same
polarity, and the candidate's value holds the label's salient words.

    python bench/rules_extractor.py [--split tune|held_out|both] [--show] [--json [FILE]] [--variant NAME]

`--show` prints, per conversation of the tuning half, the labels missed and the candidates that
match no label; the held-out half only ever prints its figures, so that tuning cannot read it.
`--json` without a file writes bench/results/rules_extractor_<YYYYMMDD>.json."""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from evaluation.labelled_facts import (
    CATEGORIES,
    ExtractedFact,
    LabelledConversation,
    SplitScore,
    load_conversations,
    score_split,
)
from extraction.rules import RulesExtractor
from extraction.types import ExtractionRequest
from store.model import Scope
from worker.planning import ground_candidates

HERE = Path(__file__).resolve().parent
DATA = HERE / "data" / "first_hour"
SPLITS = ("tune", "held_out")


async def extract(conversation: LabelledConversation) -> tuple[list[ExtractedFact], int]:
    """The grounded candidates of one conversation, and how many grounding dropped."""
    scopes: tuple[Scope, ...] = ("user", "persona", "persona_user") if conversation.persona else ("user",)
    request = ExtractionRequest(
        messages=conversation.messages, allowed_scopes=scopes, persona_name=conversation.persona
    )
    result = await RulesExtractor().extract(request)
    kept, dropped = ground_candidates(result.candidates, conversation.messages, names=conversation.names)
    return [ExtractedFact(key=c.key, value=c.value, scope=c.scope) for c in kept], len(dropped)


def _percent(share: float | None) -> str:
    return "   —  " if share is None else f"{100 * share:5.1f}%"


def report(name: str, score: SplitScore, ungrounded: int) -> dict[str, Any]:
    """Print one split's figures and return them for the JSON report."""
    total = score.total
    print(
        f"{name}: recall {_percent(total.recall)} ({total.labels_found}/{total.labels}), "
        f"precision {_percent(total.precision)} ({total.extracted_right}/{total.extracted}), "
        f"ungrounded {ungrounded}"
    )
    for category in CATEGORIES:
        counts = score.by_category[category]
        if counts.labels or counts.extracted:
            found = f"({counts.labels_found:2}/{counts.labels:2})"
            right = f"({counts.extracted_right:2}/{counts.extracted:2})"
            recall, precision = _percent(counts.recall), _percent(counts.precision)
            print(f"  {category:15} recall {recall} {found}  precision {precision} {right}")
    figures: dict[str, Any] = {
        "total": total.as_dict(),
        "ungrounded": ungrounded,
        "by_category": {c: score.by_category[c].as_dict() for c in CATEGORIES},
    }
    if name == "tune":  # the held-out half's misses stay unread, as in `--show`
        figures["missed"] = {
            cid: [f"{f.key}: {f.value}" for f in facts] for cid, facts in score.missed.items()
        }
        figures["wrong"] = {cid: [f"{f.key}: {f.value}" for f in facts] for cid, facts in score.wrong.items()}
    return figures


def show(score: SplitScore) -> None:
    """Per conversation: labels missed, candidates matching no label."""
    for cid in sorted(set(score.missed) | set(score.wrong)):
        print(f"  {cid}")
        for label in score.missed.get(cid, []):
            print(f"    missed  {label.key}: {label.value}")
        for candidate in score.wrong.get(cid, []):
            print(f"    wrong   {candidate.key}: {candidate.value}")


async def run(splits: tuple[str, ...], *, details: bool) -> dict[str, Any]:
    """Score every split asked for; print and return the figures."""
    figures: dict[str, Any] = {}
    for name in splits:
        conversations = load_conversations(DATA / f"{name}.json")
        extracted: dict[str, list[ExtractedFact]] = {}
        ungrounded = 0
        for conversation in conversations:
            extracted[conversation.id], dropped = await extract(conversation)
            ungrounded += dropped
        score = score_split(conversations, extracted)
        figures[name] = report(name, score, ungrounded)
        if details and name == "tune":
            show(score)
    return figures


def _commit() -> str:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
        )
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return out.stdout.strip()


def main() -> None:
    """Command line: see the module docstring."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--split", choices=(*SPLITS, "both"), default="both")
    parser.add_argument(
        "--show", action="store_true", help="print the missed labels and the wrong candidates"
    )
    parser.add_argument(
        "--json",
        nargs="?",
        const=HERE / "results" / f"rules_extractor_{datetime.now(UTC):%Y%m%d}.json",
        type=Path,
        help="write the figures as JSON (default file under bench/results/)",
    )
    parser.add_argument(
        "--variant", default="", help="what was measured, recorded in the JSON (e.g. main's rules)"
    )
    args = parser.parse_args()
    splits = SPLITS if args.split == "both" else (args.split,)
    figures = asyncio.run(run(splits, details=args.show))
    if args.json:
        document = {
            "bench": "rules_extractor",
            "commit": _commit(),
            "variant": args.variant,
            "date": f"{datetime.now(UTC):%Y-%m-%d}",
            "data": str(DATA.relative_to(HERE.parent)),
            "splits": figures,
        }
        args.json.write_text(json.dumps(document, indent=1, ensure_ascii=False) + "\n")
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
