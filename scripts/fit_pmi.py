"""Fit the PMI reader's weighing (choice.PmiWeights, `rag-answer --reader pmi`) on the development corpora.

    just fit-pmi                          # = python3 scripts/fit_pmi.py (the default local model)
    python3 scripts/fit_pmi.py --check    # only check ragline.answer.choice.PMI_FITTED against results/pmi-fit.json

For each corpus of `rag-eval plan default` (the five development corpora): the default index and
hits (as scripts/fit_answer.py builds them, under build/fit). Every answerable question is
answered from the same top blocks, as fit_answer.py answers them: the extractive reader ranks the
pieces once, then each point of GRID rescores the pieces of its best blocks by the local model's
PMI with the question (`ragline.answer.pmi`) and the extractive choice runs on the new order.
The model scores each piece once (log-probabilities with and without the question, cached under
build/fit-span/MODEL/, the span fit's cache: the same prompts), and the grid re-reads them.
Scored without the question's time and token budget: the fit measures the model, not the machine
(the end-to-end run `just eval-llm local-pmi` has the budget). The cost is measured apart: the first
TIMED answerable questions of each corpus scored afresh by a newly loaded model, seconds and prompt
tokens a question. So is a refusal signal: the ROC AUC of the best weighed piece's PMI, answerable
against unanswerable questions.

The objective is fit_answer.py's: answer-ok (every `answer_contains` phrase in the answer, and at
most LONG_WORDS words) of answerable questions, the mean over the corpora; the chosen point is the
best (ties: fewer blocks weighed, cheaper; then the lighter weight). Beside it, always the
extractive reader alone (EXTRACTIVE, the shipped default). Leave-one-corpus-out: for each corpus,
the point chosen on the other four, scored on it. By kind of question, and "gold block first,
answer wrong" (issue 36's count), too. results/pmi-fit.json holds all of it;
ragline.answer.choice.PMI_FITTED must equal its `chosen`.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from fit_answer import LONG_WORDS, hits_for, plan  # noqa: E402
from fit_span import Recorded, capturing, figures, row  # noqa: E402
from fit_span import chosen_text as span_text  # noqa: E402

import rag_answer  # noqa: E402
import rag_embed  # noqa: E402
import rag_index  # noqa: E402
from ragline import local_models  # noqa: E402
from ragline.answer import choice  # noqa: E402
from ragline.answer import context as answer_context  # noqa: E402
from ragline.answer.local import LocalModel  # noqa: E402
from ragline.answer.pmi import PmiScored  # noqa: E402
from ragline.eval.golden import load_golden  # noqa: E402
from ragline.eval.metrics import answer_ok  # noqa: E402

OUT = ROOT / "results" / "pmi-fit.json"
GRID = [choice.PmiWeights(blocks=b, weight=w) for b, w in itertools.product((1, 2), (0.1, 0.25, 0.5, 1.0, 2.0, 4.0))]
EXTRACTIVE = "extractive"  # the shipped reader's choice, as a row of the table
TIMED = 8  # answerable questions of each corpus whose scoring is timed afresh, the cache bypassed


Captured = capturing(PmiScored)


def chosen_text(reader: Any, captured: tuple | None, point: choice.PmiWeights | str) -> str:
    """The answer `point` quotes (EXTRACTIVE: the extractive reader's own choice): fit_span.py's, the weighing set."""
    return span_text(reader, captured, point, "weighing")


def answers(corpus: str, docs: str, golden: str, work: Path, cache: Path, model: str, threads: int) -> tuple[dict[Any, dict], dict]:
    """Per point (and EXTRACTIVE): answer-ok, words and kind of each answerable question; and the model's cost."""
    idx, records = hits_for(corpus, docs, golden, work)
    index = rag_index.load(str(idx))
    known = json.loads(cache.read_text()) if cache.exists() else {}
    recorder = Recorded(known)
    made: list[LocalModel] = []

    def make() -> LocalModel:
        path, sha = local_models.model_file(model)
        made.append(LocalModel(path, threads, 4096, sha, model))
        return made[-1]

    recorder.make = make  # type: ignore[method-assign]
    reader = Captured(
        recorder,  # type: ignore[arg-type]
        rag_answer.FEATURES,
        index.bm25,
        rag_answer.embed_with(rag_embed.load_embedder(index.manifest["model"])),
    )
    questions = load_golden(str(ROOT / golden)).by_id()
    asked, unanswerable = [], []
    for r in records:
        q = questions[r["id"]]
        reader.captured = None
        reader.generate(q.question, answer_context.context(r["hits"], rag_answer.CONTEXT))
        first = r["hits"][0]["chunk_id"] if r["hits"] else None
        (asked if q.answerable else unanswerable).append((q, reader.captured, first in q.gold))
    widest = choice.PmiWeights(blocks=max(p.blocks for p in GRID), weight=1.0)
    start = time.perf_counter()
    for _, captured, _ in asked:  # every piece any point weighs, scored once (the widest point's pieces hold the rest)
        chosen_text(reader, captured, widest)
    if recorder.asked:
        print(f"fit_pmi: {corpus}: {recorder.asked} pieces scored in {time.perf_counter() - start:.0f} s", file=sys.stderr)
    signals = {True: [best_pmi(reader, c, widest) for _, c, _ in asked], False: [best_pmi(reader, c, widest) for _, c, _ in unanswerable]}
    cost = {"refusal_auc": auc(signals[True], signals[False])} | timed(reader, recorder, [c for _, c, _ in asked[:TIMED]], make)
    table: dict[Any, dict] = {}
    for point in [EXTRACTIVE, *GRID]:
        ok, words = [], []
        for q, captured, _ in asked:
            text = chosen_text(reader, captured, point)
            words.append(len(text.split()))
            ok.append(answer_ok(text, False, q.answer_contains, True, words[-1]))
        kinds = [q.kind for q, _, _ in asked]
        firsts = [f for _, _, f in asked]
        table[point] = figures(ok, words, kinds) | {
            "gold_first": int(sum(firsts)),
            "gold_first_wrong": int(sum(f and not o for f, o in zip(firsts, ok, strict=True))),
            "wrong": [q.id for (q, _, _), o in zip(asked, ok, strict=True) if not o],
        }
    cache.parent.mkdir(parents=True, exist_ok=True)
    cache.write_text(json.dumps(recorder.known))
    return table, cost


def timed(reader: Any, recorder: Recorded, sample: list[tuple | None], make: Any) -> dict[str, Any]:
    """The model's cost at the chosen reader's widest weighing, measured afresh (the cache bypassed, the model
    loaded before the clock starts) on `sample`: seconds and prompt tokens a question, on this machine as it is."""
    model = make()
    reader.model, reader.weighing = model, choice.PmiWeights(blocks=max(p.blocks for p in GRID), weight=1.0)
    start = time.perf_counter()
    for captured in sample:
        question, blocks, ranked, _, cands, _ = captured
        reader.values(question, blocks, reader.scored(ranked, cands))
    seconds = time.perf_counter() - start
    prompt = model.take_counts()[0]
    model.close()
    reader.model = recorder  # type: ignore[assignment]
    return {
        "timed_questions": len(sample),
        "seconds_per_question": round(seconds / len(sample), 2),
        "prompt_tokens_per_question": round(prompt / len(sample)),
    }


def best_pmi(reader: Any, captured: tuple | None, point: choice.PmiWeights) -> float:
    """The largest PMI of any piece `point` weighs (-inf when none is weighed): how much the question
    explains the best piece of the best blocks, a candidate refusal signal."""
    if captured is None:
        return -math.inf
    question, blocks, ranked, _, cands, _ = captured
    reader.weighing = point
    weighed = reader.scored(ranked, cands)
    return max(reader.values(question, blocks, weighed), default=-math.inf) if weighed else -math.inf


def auc(positive: list[float], negative: list[float]) -> float | None:
    """ROC AUC of telling `positive` (answerable) from `negative` (unanswerable) by the value: the share of
    pairs the positive wins, ties half. None with either side empty."""
    if not positive or not negative:
        return None
    wins = sum((p > n) + 0.5 * (p == n) for p in positive for n in negative)
    return round(wins / (len(positive) * len(negative)), 4)


def choose(table: dict[str, dict], corpora: list[str]) -> choice.PmiWeights:
    return max(GRID, key=lambda p: (round(float(np.mean([table[c][p]["answer_ok"] for c in corpora])), 6), -p.blocks, -p.weight))


def mean(table: dict[str, dict], point: Any, corpora: list[str]) -> float:
    return round(float(np.mean([table[c][point]["answer_ok"] for c in corpora])), 4)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--work", default="build/fit", help="where the default indexes and hits are built")
    parser.add_argument("--model", default=rag_answer.options.default("local_model", "answer"), help="the local model scoring pieces")
    parser.add_argument("--threads", type=int, default=0, help="llama.cpp's threads (0: one per core)")
    parser.add_argument("--out", default=str(OUT), help="the fit's result file")
    parser.add_argument("--check", action="store_true", help="only check ragline.answer.choice.PMI_FITTED against the committed fit")
    args = parser.parse_args()
    if args.check:
        chosen = json.loads(OUT.read_text())["chosen"]["weights"]
        if dataclasses.asdict(choice.PMI_FITTED) != chosen:
            raise SystemExit(f"fit_pmi: choice.PMI_FITTED is not {OUT.name}'s chosen point: {chosen}")
        return
    runs = plan()
    table, costs = {}, {}
    for corpus, docs, golden in runs:
        cache = ROOT / "build" / "fit-span" / args.model / f"{corpus}.json"
        table[corpus], costs[corpus] = answers(corpus, docs, golden, ROOT / args.work, cache, args.model, args.threads)
    corpora = [c for c, _, _ in runs]
    chosen = choose(table, corpora)
    loco = {}
    for held in corpora:
        point = choose(table, [c for c in corpora if c != held])
        loco[held] = {"chosen_on_the_others": row(point, table[held][point]), "extractive": row(EXTRACTIVE, table[held][EXTRACTIVE])}
    result = {
        "schema": "pmi-fit/1",
        "model": args.model,
        "objective": f"mean answer-ok (and at most {LONG_WORDS} words) of answerable questions over the corpora; ties: fewer blocks, lighter weight",
        "corpora": corpora,
        "grid_points": len(GRID),
        "cost": costs,
        "chosen": {"weights": dataclasses.asdict(chosen), "mean_answer_ok": mean(table, chosen, corpora)}
        | {"per_corpus": {c: row(chosen, table[c][chosen]) for c in corpora}},
        "extractive": {"mean_answer_ok": mean(table, EXTRACTIVE, corpora)}
        | {"per_corpus": {c: row(EXTRACTIVE, table[c][EXTRACTIVE]) for c in corpora}},
        "leave_one_corpus_out": loco,
        "grid": [{"weights": dataclasses.asdict(p), "mean_answer_ok": mean(table, p, corpora)} for p in GRID],
    }
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    print(
        json.dumps(
            {
                "chosen": result["chosen"]["weights"],
                "mean": (result["chosen"]["mean_answer_ok"], result["extractive"]["mean_answer_ok"]),
                "loco": {c: (v["chosen_on_the_others"]["answer_ok"], v["extractive"]["answer_ok"]) for c, v in loco.items()},
                "grid": [(g["weights"]["blocks"], g["weights"]["weight"], g["mean_answer_ok"]) for g in result["grid"]],
            }
        )
    )


if __name__ == "__main__":
    main()
