"""Fit the learned fusion (`FusionKnobs.learned`, bench/fusion_knobs.py) on the LoCoMo `dev` split only.

Runs every dev question through the real store's hybrid recall (SQLite or Postgres), records each
candidate's features (`bench.fusion_knobs.knob_features`) plus its `conversation` share (computed from the
hand-set first stage), labels a candidate 1 when its unit covers one of the question's evidence
dia_ids, and fits a logistic regression (numpy, L2) on the standardised features. The weights,
scaled back to the raw features, are printed as a `FusionKnobs(learned=...)` literal.

    python bench/fit_fusion.py /path/to/locomo10.json [--store sqlite] [--unit observation]"""

from __future__ import annotations

import asyncio
import io
import json
import sys
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.fusion_knobs import (
    KNOB_FEATURES,
    FusionKnobs,
    knob_features,
    knob_first_stage,
    knobs_applied,
)
from bench.locomo_dev import STORES, locomo_parser
from evaluation.locomo import load_locomo, select_split
from evaluation.options import DEFAULT_EMBEDDING_CACHE, EvalOptions
from evaluation.runner import run_locomo
from store.model import Memory
from store.rules.recall import ScoreFusion, conversation_scores

NAMES = (*KNOB_FEATURES, "conversation")


def features_of(
    rows: Sequence[Memory],
    branch_scores: Mapping[str, Mapping[uuid.UUID, float]],
    fusion: ScoreFusion,
    time_window: Any,
    when: bool,
    entities: Sequence[str],
) -> dict[uuid.UUID, list[float]]:
    """Feature vectors (`NAMES` order) of one recall's candidates."""
    by_id = {m.id: m for m in rows}
    features = knob_features(
        by_id, branch_scores, fusion=fusion, time_window=time_window, when=when, entities=entities
    )
    branches = sum(1 for name, s in branch_scores.items() if s and name in ("vector", "text"))
    plain = FusionKnobs()
    first = {mid: knob_first_stage(entry, fusion, plain, branches) for mid, entry in features.items()}
    conversation = conversation_scores(by_id, first, fusion.conversation_top)
    return {
        mid: [entry[n] for n in KNOB_FEATURES] + [conversation.get(mid, 0.0)]
        for mid, entry in features.items()
    }


def fit_logistic(x: np.ndarray[Any, Any], y: np.ndarray[Any, Any], l2: float = 1e-3) -> np.ndarray[Any, Any]:
    """Weights (bias last) of an L2-regularised logistic regression by gradient descent."""
    design = np.hstack([x, np.ones((x.shape[0], 1))])
    weights = np.zeros(design.shape[1])
    positive = y.mean()
    sample = np.where(y == 1, 0.5 / positive, 0.5 / (1 - positive))  # balanced classes
    for _ in range(3000):
        p = 1.0 / (1.0 + np.exp(-(design @ weights)))
        gradient = design.T @ (sample * (p - y)) / len(y) + l2 * np.r_[weights[:-1], 0.0]
        weights -= 0.5 * gradient
    return weights


async def main(argv: list[str] | None = None) -> int:
    """Record dev features, fit, print the weights."""
    parser = locomo_parser(__doc__)
    parser.add_argument("--store", default="sqlite", choices=STORES)
    args = parser.parse_args(argv)
    fusion = ScoreFusion()
    recorded: list[tuple[list[Memory], dict[uuid.UUID, list[float]]]] = []

    def record(rows: list[Memory], branch_scores: Any, kw: Mapping[str, Any], names: tuple[str, ...]) -> None:
        features = features_of(
            rows, branch_scores, fusion, kw.get("time_window"), kw.get("when", False), names
        )
        recorded.append((rows, features))

    with knobs_applied(FusionKnobs(), observe=record):
        options = EvalOptions(
            file=args.file,
            unit=args.unit,
            ks=(10,),
            retrievers=("hybrid",),
            embedding_provider="local",
            database_url=None,
            data_dir=None,
            concurrency=1,  # recalls in question order, so the recordings line up with the questions
            fusion=fusion,
            split="dev",
            store=args.store,
            embedding_cache=DEFAULT_EMBEDDING_CACHE,
        )
        await run_locomo(options, progress_stream=io.StringIO())
    questions = [q for c in select_split(load_locomo(args.file), "dev") for q in c.questions]
    units = {
        u.text: set(u.dia_ids)
        for c in select_split(load_locomo(args.file), "dev")
        for u in c.units(args.unit)
    }
    if len(recorded) != len(questions):
        raise SystemExit(f"recorded {len(recorded)} recalls for {len(questions)} questions")
    xs, ys = [], []
    for (rows, features), question in zip(recorded, questions, strict=True):
        evidence = set(question.evidence)
        by_id = {m.id: m for m in rows}
        for memory_id, vector in features.items():
            xs.append(vector)
            ys.append(1.0 if units.get(by_id[memory_id].value, set()) & evidence else 0.0)
    x, y = np.asarray(xs), np.asarray(ys)
    mean, std = x.mean(axis=0), x.std(axis=0)
    std[std == 0] = 1.0
    weights = fit_logistic((x - mean) / std, y)
    raw = weights[:-1] / std  # the bias and the means shift every candidate alike: ranking unchanged
    learned = tuple(
        (name, round(float(w / np.abs(raw).max()), 4)) for name, w in zip(NAMES, raw, strict=True)
    )
    print(json.dumps({"candidates": len(y), "positives": int(y.sum()), "learned": learned}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
