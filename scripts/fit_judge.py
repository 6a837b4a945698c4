"""Fit how the local model's judgement joins the extractive choice (choice.JudgeWeights) on the development corpora.

    just fit-judge                          # = python3 scripts/fit_judge.py (the default local model)
    python3 scripts/fit_judge.py --check    # only check ragline.answer.choice.JUDGED against results/judge-fit.json

For each corpus of `rag-eval plan default`: the default index and hits (as scripts/fit_answer.py
builds them, under build/fit), then the local model judges, once, the MOST best pieces of
every question the default answer stage would answer (P(yes) of each, cached under
build/fit-judge/MODEL/METHOD/). Every point of GRID then answers every question through the real
answer stage (`rag_answer.answer`, the default threshold and refusals) with a judge that
reads those cached P(yes): the pieces judged, P(yes)'s weight in the score, the floor under
which a question is refused. A point is feasible when it wrongly refuses at most one
answerable question in REFUSAL_BUDGET on every corpus. The chosen point is the feasible one
with the best mean answer-ok over all questions (answerable ones answered right, unanswerable
ones refused) over the corpora; ties: fewer pieces judged (cheaper), then the earlier point.

Leave-one-corpus-out: for each corpus, the point chosen on the others, scored on it, beside
the extractive reader alone. results/judge-fit.json holds it all; ragline.answer.choice.JUDGED
must equal its `chosen` (tests/test_golden.py checks).
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from fit_answer import hits_for, plan  # noqa: E402

import rag_answer  # noqa: E402
import rag_embed  # noqa: E402
import rag_index  # noqa: E402
from ragline import local_models  # noqa: E402
from ragline.answer import choice  # noqa: E402
from ragline.answer.judge import Judged  # noqa: E402
from ragline.answer.local import METHOD, METHODS, Judge, LocalModel  # noqa: E402
from ragline.eval.golden import load_golden  # noqa: E402
from ragline.eval.metrics import answer_ok  # noqa: E402

OUT = ROOT / "results" / "judge-fit.json"
MOST = 12  # pieces judged per question for the cache: every grid point judges a prefix of them
REFUSAL_BUDGET = 8  # at most one answerable question in eight refused wrongly, on every corpus
GRID = [
    choice.JudgeWeights(pieces=n, weight=w, floor=f)
    for n, w, f in itertools.product((4, 8, 12), (0.5, 1.0, 2.0, 4.0, 8.0), (0.0, 0.02, 0.05, 0.1, 0.2))
]
NONE = choice.JudgeWeights(pieces=0, weight=0.0, floor=0.0)  # the extractive reader alone
LAZY: dict[str, Any] = {}  # "judge": makes the real judge when the cache lacks a piece


class Recorded:
    """A judge that answers from what the real one said (and, for `learn`, asks it first)."""

    def __init__(self, known: dict[str, float], real: Judge | None = None, method: str = METHOD):
        self.known, self.real = known, real
        self.model = real.model if real is not None else self
        self.method = real.method if real is not None else method

    def record(self) -> dict[str, Any]:  # as LocalModel.record, for the answer record
        return {"local_model": "recorded", "local_model_sha256": None}

    def take_counts(self) -> tuple[int, int]:  # as LocalModel.take_counts: a recorded judgement decodes no tokens
        return (0, 0)

    def scores(self, question: str, pieces: list[tuple[Any, str]], budget: Any = None) -> list[float]:
        """As `Judge.scores`; the fit judges without the reader's time bound (`budget` unused): a
        judgement cut short on a loaded machine would be cached as none at all."""
        keys = [json.dumps([question, list(h), t]) for h, t in pieces]
        missing = [i for i, k in enumerate(keys) if k not in self.known]
        if missing:
            if self.real is None:
                self.real = LAZY["judge"]()  # a piece the cache has not seen (the code changed since): judged now, and kept
            for i, p in zip(missing, self.real.scores(question, [pieces[i] for i in missing]), strict=True):
                self.known[keys[i]] = p
        return [self.known[k] for k in keys]


def judging(base: rag_answer.Extractive, judge: Any, point: choice.JudgeWeights) -> Judged:
    """The judge reader over the same index as `base` (its features, idf and embedder), judged by `judge`."""
    return Judged(judge, base.features, base.idf_source, base.embed, judging=point)


def judged(
    corpus: str, records: list[dict], generator: rag_answer.Extractive, cache: Path, model: str, threads: int, method: str
) -> dict[str, float]:
    """P(yes) of the MOST best pieces of every question, judged once and cached."""
    made: list[Judge] = []

    def judge() -> Judge:
        if not made:
            path, sha = local_models.model_file(model)
            made.append(Judge(LocalModel(path, threads, 4096, sha, model), method))
        return made[0]

    LAZY["judge"] = judge
    if cache.exists():
        return json.loads(cache.read_text())
    recorder = Recorded({}, judge())
    reader = judging(generator, recorder, choice.JudgeWeights(pieces=MOST, weight=0.0, floor=0.0))
    start = time.perf_counter()
    prompt = 0
    for r in records:  # each answer takes its question's token counts off the model (`llm_tokens`)
        out = rag_answer.answer(dict(r), reader, rag_answer.DEFAULT_ABSTAIN, rag_answer.CONTEXT)
        prompt += out.get("llm_tokens", {}).get("prompt", 0)
    print(
        f"fit_judge: {corpus}: {len(records)} questions judged in {time.perf_counter() - start:.0f} s, {prompt / len(records):.0f} prompt tokens each",
        file=sys.stderr,
    )
    cache.parent.mkdir(parents=True, exist_ok=True)
    cache.write_text(json.dumps(recorder.known))
    return recorder.known


def outcomes(
    records: list[dict], golden: str, generator: rag_answer.Extractive, known: dict[str, float], point: choice.JudgeWeights
) -> dict[str, float]:
    """answer-ok over all questions, over answerable ones, and the refusal rates, at one point."""
    questions = load_golden(str(ROOT / golden)).by_id()
    reader = judging(generator, Recorded(known), point) if point.pieces else generator
    ok, ok_answerable, refused_answerable, refused_unanswerable = [], [], [], []
    for r in records:
        q = questions[r["id"]]
        out = rag_answer.answer(dict(r), reader, rag_answer.DEFAULT_ABSTAIN, rag_answer.CONTEXT)
        good = answer_ok(out["answer"], out["refused"], q.answer_contains, q.answerable)
        ok.append(good)
        (ok_answerable if q.answerable else []).append(good)
        (refused_answerable if q.answerable else refused_unanswerable).append(out["refused"])
    return {
        "answer_ok": float(np.mean(ok)),
        "answer_ok_answerable": float(np.mean(ok_answerable)),
        "refused_when_answerable": float(np.mean(refused_answerable)),
        "refused_when_unanswerable": float(np.mean(refused_unanswerable)),
    }


def choose(table: dict[str, dict], corpora: list[str]) -> choice.JudgeWeights:
    feasible = [p for p in GRID if all(table[c][p]["refused_when_answerable"] <= 1 / REFUSAL_BUDGET for c in corpora)]
    return max(feasible, key=lambda p: (round(float(np.mean([table[c][p]["answer_ok"] for c in corpora])), 6), -p.pieces, -GRID.index(p)))


def row(point: choice.JudgeWeights, figures: dict[str, float]) -> dict:
    return {"weights": dataclasses.asdict(point)} | {k: round(v, 4) for k, v in figures.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--work", default="build/fit", help="where the default indexes and hits are built")
    parser.add_argument("--model", default=rag_answer.options.default("local_model", "answer"), help="the local model judging")
    parser.add_argument("--threads", type=int, default=0, help="llama.cpp's threads (0: one per core)")
    parser.add_argument("--method", default=METHOD, choices=METHODS, help="how the model judges a piece (ragline.answer.local.Judge)")
    parser.add_argument("--out", default=str(OUT), help="the fit's result file")
    parser.add_argument("--check", action="store_true", help="only check ragline.answer.choice.JUDGED against the committed fit")
    args = parser.parse_args()
    if args.check:
        chosen = json.loads(OUT.read_text())["chosen"]["weights"]
        if dataclasses.asdict(choice.JUDGED) != chosen:
            raise SystemExit(f"fit_judge: choice.JUDGED is not {OUT.name}'s chosen point: {chosen}")
        return
    table: dict[str, dict] = {}
    corpora = []
    for corpus, docs, golden in plan():
        idx_path, records = hits_for(corpus, docs, golden, ROOT / args.work)
        index = rag_index.load(str(idx_path))
        generator = rag_answer.Extractive(
            rag_answer.FEATURES, index.bm25, rag_answer.embed_with(rag_embed.load_embedder(index.manifest["model"]))
        )
        known = judged(
            corpus,
            records,
            generator,
            ROOT / "build" / "fit-judge" / args.model / args.method / f"{corpus}.json",
            args.model,
            args.threads,
            args.method,
        )
        table[corpus] = {p: outcomes(records, golden, generator, known, p) for p in [NONE, *GRID]}
        cache = ROOT / "build" / "fit-judge" / args.model / args.method / f"{corpus}.json"
        cache.write_text(json.dumps(known))  # with what was judged afresh
        corpora.append(corpus)
    chosen = choose(table, corpora)
    loco = {}
    for held in corpora:
        point = choose(table, [c for c in corpora if c != held])
        loco[held] = {"chosen_on_the_others": row(point, table[held][point]), "extractive": row(NONE, table[held][NONE])}
    result = {
        "schema": "judge-fit/1",
        "model": args.model,
        "method": args.method,
        "objective": (
            "mean answer-ok over all questions (answerable answered right, unanswerable refused) over the corpora; "
            f"refused_when_answerable <= 1/{REFUSAL_BUDGET} on each; ties: fewer pieces judged"
        ),
        "corpora": corpora,
        "grid_points": len(GRID),
        "chosen": {"weights": dataclasses.asdict(chosen), "per_corpus": {c: row(chosen, table[c][chosen]) for c in corpora}},
        "extractive": {c: row(NONE, table[c][NONE]) for c in corpora},
        "leave_one_corpus_out": loco,
    }
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    print(
        json.dumps(
            {
                "chosen": result["chosen"]["weights"],
                "loco": {c: (v["chosen_on_the_others"]["answer_ok"], v["extractive"]["answer_ok"]) for c, v in loco.items()},
            }
        )
    )


if __name__ == "__main__":
    main()
