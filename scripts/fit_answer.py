"""Fit the extractive answer's sentence choice (choice.ChoiceWeights) on the development corpora.

    just fit-answer                     # = python3 scripts/fit_answer.py
    python3 scripts/fit_answer.py --check   # only check ragline.answer.choice.FITTED against results/answer-fit.json

For each corpus of `rag-eval plan default` (the five development corpora): the default index
(built under build/fit/CORPUS as `just eval` builds it, through the vector cache) and the default
retrieval's hits for the golden questions. Then every point of GRID answers every answerable
question from the same top blocks, and its answer-ok (every `answer_contains` phrase in the
answer: ragline.eval.metrics.answer_ok, and the answer at most LONG_WORDS words: the answer
among filler is no answer) is counted per corpus. A point is feasible when the
answers' length stays within the issue's bound on every corpus (median <= MEDIAN_WORDS, nine in
ten <= P90_WORDS words). The chosen point is the feasible one with the best mean answer-ok
over the corpora (ties: the earlier point of the grid).

Leave-one-corpus-out: for each corpus, the point chosen on the other four, scored on it, beside
the hand-set weights the fit replaced (HAND). Each row also counts, of the answerable questions
whose gold block the default retrieval ranked first, those answered wrong (the failure report's
"gold first, answer wrong", here without the refusals). results/answer-fit.json holds all of it;
ragline.answer.choice.FITTED must equal its `chosen` (tests/test_golden.py checks).

The refusals (`missing_evidence`, the abstain threshold) do not depend on these weights: every
answerable question is answered here, refused or not, so the fit sees the choice alone.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import rag_answer  # noqa: E402
import rag_embed  # noqa: E402
import rag_index  # noqa: E402
import ragline.records  # noqa: E402
from ragline.answer import choice  # noqa: E402
from ragline.answer import context as answer_context  # noqa: E402
from ragline.eval import failures, metrics  # noqa: E402
from ragline.eval.golden import load_golden, read_chunking, resolve_gold  # noqa: E402
from ragline.eval.metrics import answer_ok  # noqa: E402

OUT = ROOT / "results" / "answer-fit.json"
MEDIAN_WORDS = 60
P90_WORDS = 120
LONG_WORDS = metrics.LONG_WORDS  # the answer among filler is no answer (ragline.eval.metrics.answer_ok)
HAND = choice.ChoiceWeights(headings=0.3, cue=0.3, dense=0.6, rank=0.3, keep=0.75, most=3, budget=1000)
GRID = [
    choice.ChoiceWeights(headings=h, cue=c, dense=d, rank=r, keep=k, most=3, budget=b, listed=n)
    for h, c, d, r, k, b, n in itertools.product(
        (0.0, 0.3), (0.3, 0.6), (0.3, 0.6, 1.0), (0.0, 0.15, 0.3), (0.35, 0.5, 0.75), (60, 80, 120), (60, 100)
    )
]


def plan() -> list[tuple[str, str, str]]:
    """(corpus, docs, golden) of each default run, from `rag-eval plan default`."""
    lines = subprocess.run(["rag-eval", "plan", "default"], check=True, capture_output=True, text=True, cwd=ROOT).stdout
    return [(f[0], f[2], f[3]) for f in (line.split("\t") for line in lines.splitlines() if line)]


def hits_for(corpus: str, docs: str, golden: str, work: Path, k: int | None = None) -> tuple[Path, list[dict]]:
    """The default index of the corpus (built once into work/CORPUS, its chunks beside it in chunks.jsonl) and the
    default hits of its golden questions (with `k`, that many each)."""
    idx, chunks, hits = (
        work / corpus / "idx",
        work / corpus / "chunks.jsonl",
        work / corpus / ("hits.jsonl" if k is None else f"hits-{k}.jsonl"),
    )
    if not hits.exists():
        (work / corpus).mkdir(parents=True, exist_ok=True)
        cache = os.environ.get("RAG_EMBED_CACHE", ".cache/embed-cache.sqlite")
        script = (
            f'rag-chunk "{docs}" > "{chunks}.tmp" && mv "{chunks}.tmp" "{chunks}" && '
            f'rag-embed --quiet --cache "{cache}" < "{chunks}" | rag-index --out "{idx}" && '
            f'rag-eval questions "{golden}" | rag-search --index "{idx}" {"" if k is None else f"--k {k}"} > "{hits}.tmp" && mv "{hits}.tmp" "{hits}"'
        )
        subprocess.run(["bash", "-euo", "pipefail", "-c", script], check=True, cwd=ROOT)
    return idx, [json.loads(line) for line in hits.read_text().splitlines()]


def answers(corpus: str, docs: str, golden: str, work: Path) -> tuple[list[tuple[str, list[int]]], dict[str, float]]:
    """Per grid point: answer-ok of each answerable question, and the words of each answer."""
    idx, records = hits_for(corpus, docs, golden, work)
    index = rag_index.load(str(idx))
    generator = rag_answer.Extractive(
        rag_answer.FEATURES, index.bm25, rag_answer.embed_with(rag_embed.load_embedder(index.manifest["model"]))
    )
    loaded = load_golden(str(ROOT / golden))
    questions = loaded.by_id()
    # gold under this chunking, as rag-eval score resolves it for the failure report
    chunks = idx.parent / "chunks.jsonl"
    chunking = read_chunking(ragline.records.read_records([str(chunks)]), str(chunks))
    asked = [
        (q, answer_context.context(r["hits"], rag_answer.CONTEXT), gold_first(r["hits"], resolve_gold(q, chunking, loaded.where(q))[0]))
        for r in records
        if (q := questions[r["id"]]).answerable
    ]
    scores = {}
    for point in [HAND, *GRID]:
        generator.choice = point
        ok, words = [], []
        for q, blocks, _ in asked:
            text = generator.generate(q.question, blocks)
            words.append(len(text.split()))
            ok.append(answer_ok(text, False, q.answer_contains, True, words[-1]))
        first_wrong = sum(1 for (_, _, first), right in zip(asked, ok, strict=True) if first and not right)
        scores[point] = (
            float(np.mean(ok)),
            float(np.median(words)),
            float(np.percentile(words, 90)),
            first_wrong,
            sum(a[2] for a in asked),
        )
    return scores


def gold_first(hits: list[dict], gold: tuple[str, ...]) -> bool:
    """Whether the block ranked first is one of the question's gold blocks: the failure report's "gold first"
    (`ragline.eval.failures.gold_first`), asked of an answerable question's hits."""
    return failures.gold_first({"answerable": True, "ranked": [h["chunk_id"] for h in hits[:1]], "gold": gold})


def choose(table: dict[str, dict], corpora: list[str]) -> choice.ChoiceWeights:
    feasible = [p for p in GRID if all(table[c][p][1] <= MEDIAN_WORDS and table[c][p][2] <= P90_WORDS for c in corpora)]
    return max(feasible, key=lambda p: (np.mean([table[c][p][0] for c in corpora]), -GRID.index(p)))


def row(point: choice.ChoiceWeights, figures: tuple[float, ...]) -> dict:
    """A point's figures on one corpus: answer-ok, the answers' words at the median and p90, and of the answerable
    questions whose gold block was ranked first, how many are answered wrong (and how many there are)."""
    return {
        "weights": dataclasses.asdict(point),
        "answer_ok": round(figures[0], 4),
        "words_p50": figures[1],
        "words_p90": round(figures[2], 1),
        "gold_first_wrong": figures[3],
        "gold_first": figures[4],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--work", default="build/fit", help="where the default indexes and hits are built")
    parser.add_argument("--check", action="store_true", help="only check ragline.answer.choice.FITTED against the committed fit")
    args = parser.parse_args()
    if args.check:
        chosen = json.loads(OUT.read_text())["chosen"]["weights"]
        if dataclasses.asdict(choice.FITTED) != chosen:
            raise SystemExit(f"fit_answer: choice.FITTED is not {OUT.name}'s chosen point: {chosen}")
        return
    runs = plan()
    table = {corpus: answers(corpus, docs, golden, ROOT / args.work) for corpus, docs, golden in runs}
    corpora = [c for c, _, _ in runs]
    chosen = choose(table, corpora)
    loco = {}
    for held in corpora:
        point = choose(table, [c for c in corpora if c != held])
        loco[held] = {"chosen_on_the_others": row(point, table[held][point]), "hand": row(HAND, table[held][HAND])}
    result = {
        "schema": "answer-fit/1",
        "objective": f"mean answer-ok (and at most {LONG_WORDS} words) of answerable questions over the corpora; answers' median <= {MEDIAN_WORDS} and p90 <= {P90_WORDS} words on each",
        "corpora": corpora,
        "grid_points": len(GRID),
        "chosen": {"weights": dataclasses.asdict(chosen), "answer_ok": round(float(np.mean([table[c][chosen][0] for c in corpora])), 4)}
        | {"per_corpus": {c: row(chosen, table[c][chosen]) for c in corpora}},
        "hand": {c: row(HAND, table[c][HAND]) for c in corpora},
        "leave_one_corpus_out": loco,
    }
    OUT.write_text(json.dumps(result, indent=1) + "\n")
    print(
        json.dumps(
            {
                "chosen": result["chosen"]["weights"],
                "loco": {c: (v["chosen_on_the_others"]["answer_ok"], v["hand"]["answer_ok"]) for c, v in loco.items()},
            }
        )
    )


if __name__ == "__main__":
    main()
