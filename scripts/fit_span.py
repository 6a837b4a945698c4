"""Fit the span reader's choice (choice.SpanWeights, `rag-answer --reader span`) on the development corpora.

    just fit-span                          # = python3 scripts/fit_span.py (the default local model)
    python3 scripts/fit_span.py --check    # only check ragline.answer.choice.SPANNED against results/span-fit.json

For each corpus of `rag-eval plan default` (the five development corpora): the default index and
hits (as scripts/fit_answer.py builds them, under build/fit). Every answerable question is
answered from the same top blocks, as fit_answer.py answers them: the extractive reader ranks the
pieces once, then each point of GRID chooses among the candidate spans (`ragline.answer.span`)
with the local model's PMI of each span with the question. The model scores each span once
(log-probabilities with and without the question, cached under build/fit-span/MODEL/); the grid
then re-reads them. Scored without the question's time and token budget: the fit measures the
model, not the machine (the end-to-end run `just eval-llm local-span` has the budget).

The objective is fit_answer.py's: answer-ok (every `answer_contains` phrase in the answer, and
at most LONG_WORDS words) of answerable questions, the mean over the corpora; the chosen point
is the best (ties: fewer spans scored, cheaper; then the earlier point). Beside it, always:
the extractive reader alone (EXTRACTIVE, the shipped default), and `weight` 0, the spans chosen
by extractive score with no model (what the span units alone do). Leave-one-corpus-out: for
each corpus, the point chosen on the other four, scored on it. By kind of question, too.
results/span-fit.json holds all of it; ragline.answer.choice.SPANNED must equal its `chosen`.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from fit_answer import LONG_WORDS, hits_for, plan  # noqa: E402

import rag_answer  # noqa: E402
import rag_embed  # noqa: E402
import rag_index  # noqa: E402
from ragline import local_models  # noqa: E402
from ragline.answer import choice  # noqa: E402
from ragline.answer import context as answer_context  # noqa: E402
from ragline.answer.citations import cite  # noqa: E402
from ragline.answer.local import LocalModel  # noqa: E402
from ragline.answer.span import SpanScored  # noqa: E402
from ragline.eval.golden import load_golden  # noqa: E402
from ragline.eval.metrics import answer_ok  # noqa: E402

OUT = ROOT / "results" / "span-fit.json"
GRID = [
    choice.SpanWeights(pieces=p, blocks=b, spans=s, weight=w)
    for p, b, s, w in itertools.product((3, 6), (1, 2), (4, 8), (0.0, 0.25, 0.5, 1.0, 2.0, 4.0))
]
EXTRACTIVE = "extractive"  # the shipped reader's choice (choice.select), as a row of the table
KINDS = ("factual", "identifier", "procedural", "semantic")


class Recorded:
    """A LocalModel's `logprobs` answered from what the real one said, asking it for what is missing."""

    def __init__(self, known: dict[str, list[float]], real: Any = None):
        self.known, self.real = known, real
        self.asked = 0  # spans the real model scored

    def logprobs(self, prefix: str, pairs: Sequence[tuple[str, str]], budget: Any = None) -> list[tuple[float, int]]:
        keys = [json.dumps([prefix, h, t]) for h, t in pairs]
        missing = [i for i, k in enumerate(keys) if k not in self.known]
        if missing:
            if self.real is None:
                self.real = self.make()
            got = self.real.logprobs(prefix, [pairs[i] for i in missing], None)  # unbudgeted: the model, not the machine
            for i, (total, size) in zip(missing, got, strict=True):
                self.known[keys[i]] = [total, size]
            self.asked += len(missing)
        return [(self.known[k][0], int(self.known[k][1])) for k in keys]

    def make(self) -> LocalModel:
        raise RuntimeError("fit_span: no model to ask")

    def record(self) -> dict[str, Any]:
        return {"local_model": "recorded", "local_model_sha256": None}

    def take_counts(self) -> tuple[int, int]:
        return (0, 0)


def capturing(reader: type) -> type:
    """`reader` (a reader the extractive ranking hands its pieces to), whose `choose` keeps what it was
    handed in `captured` and chooses nothing: each grid point then chooses from the same ranking
    (`chosen_text`). fit_pmi.py captures the PMI reader so."""

    def choose(self, question, blocks, ranked, every, cands, cue):  # type: ignore[no-untyped-def]
        self.captured = (question, blocks, ranked, every, cands, cue)
        return []

    return type(f"Captured{reader.__name__}", (reader,), {"choose": choose})


Captured = capturing(SpanScored)


def chosen_text(reader: Any, captured: tuple | None, point: Any, weights: str = "spanning") -> str:
    """The answer `point` quotes from what `reader` (made by `capturing`) captured: the reader's own choice
    with its `weights` attribute set to `point`, or with EXTRACTIVE the extractive reader's choice."""
    if captured is None:
        return ""
    if point == EXTRACTIVE:
        pieces = rag_answer.Extractive.choose(reader, *captured)
    else:
        setattr(reader, weights, point)
        pieces = type(reader).__mro__[1].choose(reader, *captured)
    return "\n".join(cite(c.text, c.block, c.kind, c.header) for c in pieces)


def answers(corpus: str, docs: str, golden: str, work: Path, cache: Path, model: str, threads: int) -> dict[Any, dict]:
    """Per point (and EXTRACTIVE): answer-ok, words and kind of each answerable question."""
    idx, records = hits_for(corpus, docs, golden, work)
    index = rag_index.load(str(idx))
    known = json.loads(cache.read_text()) if cache.exists() else {}
    recorder = Recorded(known)

    def make() -> LocalModel:
        path, sha = local_models.model_file(model)
        return LocalModel(path, threads, 4096, sha, model)

    recorder.make = make  # type: ignore[method-assign]
    reader = Captured(
        recorder,  # type: ignore[arg-type]
        rag_answer.FEATURES,
        index.bm25,
        rag_answer.embed_with(rag_embed.load_embedder(index.manifest["model"])),
    )
    questions = load_golden(str(ROOT / golden)).by_id()
    asked = []
    for r in records:
        q = questions[r["id"]]
        if not q.answerable:
            continue
        reader.captured = None
        reader.generate(q.question, answer_context.context(r["hits"], rag_answer.CONTEXT))
        asked.append((q, reader.captured))
    widest = choice.SpanWeights(
        pieces=max(p.pieces for p in GRID), blocks=max(p.blocks for p in GRID), spans=max(p.spans for p in GRID), weight=1.0
    )
    start = time.perf_counter()
    for _, captured in asked:  # every span any point scores, scored once (the widest point's candidates hold the rest)
        chosen_text(reader, captured, widest)
    if recorder.asked:
        seconds = time.perf_counter() - start
        print(
            f"fit_span: {corpus}: {recorder.asked} spans scored in {seconds:.0f} s ({seconds / len(asked):.1f} s a question)",
            file=sys.stderr,
        )
    table: dict[Any, dict] = {}
    for point in [EXTRACTIVE, *GRID]:
        ok, words = [], []
        for q, captured in asked:
            text = chosen_text(reader, captured, point)
            words.append(len(text.split()))
            ok.append(answer_ok(text, False, q.answer_contains, True, words[-1]))
        kinds = [q.kind for q, _ in asked]
        table[point] = figures(ok, words, kinds)
    cache.parent.mkdir(parents=True, exist_ok=True)
    cache.write_text(json.dumps(recorder.known))
    return table


def choose(table: dict[str, dict], corpora: list[str]) -> choice.SpanWeights:
    return max(GRID, key=lambda p: (round(float(np.mean([table[c][p]["answer_ok"] for c in corpora])), 6), -p.spans, -GRID.index(p)))


def figures(ok: list[bool], words: list[int], kinds: list[str]) -> dict:
    """One grid point's figures over the answerable questions: answer-ok, words at the median and p90,
    answer-ok by kind, how many right of how many (fit_pmi.py's table too)."""
    return {
        "answer_ok": float(np.mean(ok)),
        "words_p50": float(np.median(words)),
        "words_p90": round(float(np.percentile(words, 90)), 1),
        "by_kind": {k: round(float(np.mean([o for o, kk in zip(ok, kinds, strict=True) if kk == k])), 4) for k in KINDS if k in kinds},
        "right": int(sum(ok)),
        "of": len(ok),
    }


def row(point: Any, figures: dict) -> dict:
    """A point (a weights dataclass, or EXTRACTIVE) and its figures, as the result file holds them (fit_pmi.py's too)."""
    weights = point if isinstance(point, str) else dataclasses.asdict(point)
    return {"weights": weights} | {k: (round(v, 4) if isinstance(v, float) else v) for k, v in figures.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--work", default="build/fit", help="where the default indexes and hits are built")
    parser.add_argument("--model", default=rag_answer.options.default("local_model", "answer"), help="the local model scoring spans")
    parser.add_argument("--threads", type=int, default=0, help="llama.cpp's threads (0: one per core)")
    parser.add_argument("--out", default=str(OUT), help="the fit's result file")
    parser.add_argument("--check", action="store_true", help="only check ragline.answer.choice.SPANNED against the committed fit")
    args = parser.parse_args()
    if args.check:
        chosen = json.loads(OUT.read_text())["chosen"]["weights"]
        if dataclasses.asdict(choice.SPANNED) != chosen:
            raise SystemExit(f"fit_span: choice.SPANNED is not {OUT.name}'s chosen point: {chosen}")
        return
    runs = plan()
    table = {
        corpus: answers(
            corpus, docs, golden, ROOT / args.work, ROOT / "build" / "fit-span" / args.model / f"{corpus}.json", args.model, args.threads
        )
        for corpus, docs, golden in runs
    }
    corpora = [c for c, _, _ in runs]
    chosen = choose(table, corpora)
    unscored = dataclasses.replace(chosen, weight=0.0)
    loco = {}
    for held in corpora:
        point = choose(table, [c for c in corpora if c != held])
        loco[held] = {"chosen_on_the_others": row(point, table[held][point]), "extractive": row(EXTRACTIVE, table[held][EXTRACTIVE])}
    result = {
        "schema": "span-fit/1",
        "model": args.model,
        "objective": f"mean answer-ok (and at most {LONG_WORDS} words) of answerable questions over the corpora; ties: fewer spans scored",
        "corpora": corpora,
        "grid_points": len(GRID),
        "chosen": {
            "weights": dataclasses.asdict(chosen),
            "mean_answer_ok": round(float(np.mean([table[c][chosen]["answer_ok"] for c in corpora])), 4),
        }
        | {"per_corpus": {c: row(chosen, table[c][chosen]) for c in corpora}},
        "extractive": {"mean_answer_ok": round(float(np.mean([table[c][EXTRACTIVE]["answer_ok"] for c in corpora])), 4)}
        | {"per_corpus": {c: row(EXTRACTIVE, table[c][EXTRACTIVE]) for c in corpora}},
        "unscored": {
            "weights": dataclasses.asdict(unscored),
            "mean_answer_ok": round(float(np.mean([table[c][unscored]["answer_ok"] for c in corpora])), 4),
        }
        | {"per_corpus": {c: row(unscored, table[c][unscored]) for c in corpora}},
        "leave_one_corpus_out": loco,
        "grid": [
            {"weights": dataclasses.asdict(p), "mean_answer_ok": round(float(np.mean([table[c][p]["answer_ok"] for c in corpora])), 4)}
            for p in GRID
        ],
    }
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    print(
        json.dumps(
            {
                "chosen": result["chosen"]["weights"],
                "mean": (result["chosen"]["mean_answer_ok"], result["extractive"]["mean_answer_ok"], result["unscored"]["mean_answer_ok"]),
                "loco": {c: (v["chosen_on_the_others"]["answer_ok"], v["extractive"]["answer_ok"]) for c, v in loco.items()},
            }
        )
    )


if __name__ == "__main__":
    main()
