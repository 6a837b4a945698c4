"""Fit rag-rerank (the local model reordering rag-search's hits) on the development corpora.

    just fit-rerank                          # = python3 scripts/fit_rerank.py (the default local model)
    python3 scripts/fit_rerank.py --check    # only check rag-rerank's --depth and --weight defaults against results/rerank-fit.json
    just fit-rerank --model qwen2.5-coder-1.5b-instruct --kinds semantic --out results/rerank-fit-1.5b-semantic.json
                                             # another model (`just llm-model qwen2.5-coder-1.5b-instruct` first), on
                                             # the semantic questions only: a first look at a fifth of the cost

For each corpus of `rag-eval plan default` (the five development corpora): the default index
(built under build/fit/CORPUS, its chunks kept for the gold ids, as `rag-eval score` finds them)
and the default retrieval's DEEPEST hits of every golden question. The model scores each
question after each of those hits (what `ragline.rerank.Reranker` asks it: the heading path
and the first `--words` words), and the question alone, once: cached under
build/fit-rerank/MODEL/known.json by the question and the text read, so a rerun asks only what
is new. Scored without a time budget: the fit measures the model, not the machine.

Every point of GRID (depth, weight) then reorders each question's hits with `Reranker.rerank`
itself, and is scored as rag-eval scores a run: MRR over the top 5 (`reciprocal_rank`, CUTOFF)
of answerable questions, by kind; the extractive reader's answer-ok (fit_answer.py's: every
`answer_contains` phrase, at most LONG_WORDS words) on the reordered hits. The objective is
the mean MRR over the corpora (each corpus weighs the same); ties: the shallower, then the
lighter point. Weight 0 is retrieval's own order, the baseline. Leave-one-corpus-out: each
corpus gets the point chosen on the other four. The issue's bar (issue 37) is checked per
corpus: semantic MRR at least 0.60, no other kind more than 0.02 below retrieval's.

Forms: the shipped sum (min-max normalised retrieval score plus weight x min-max normalised
log-likelihood) beside other ways of joining the two, each on its own small grid at the chosen
depth, chosen by the same objective and left out in turn (`FORMS`): reciprocal rank fusion of
the two orders, the sum of z-scores, a weight that shrinks as retrieval's first hit stands
further above its second (a confident retrieval keeps its order), and a weight that depends on
how much of the question's terms BM25 found (rag-search's `coverage`: a question asked in other
words than the page's leans on the model). results/rerank-fit*.json's `forms` says whether any
of them meets the issue's bar where the sum does not.

Refusal: the record's `relevance` (the best hit's PMI with the question, `ragline.rerank`)
as a refusal signal, swept as the abstain threshold is: the threshold that, with at most one
answerable question in eight refused on every corpus, refuses the most unanswerable ones;
chosen on all corpora and on the others (leave-one-corpus-out); beside rag-answer's own
refusals on the reordered hits (the abstain threshold on rag-search's confidence, a name the
handbook lacks, no evidence), and either. results/rerank-fit.json holds all of it.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import sys
import time
from collections.abc import Sequence
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
import ragline.records  # noqa: E402
from rag_eval import cut_labels  # noqa: E402
from ragline import local_models, options, rerank  # noqa: E402
from ragline.answer import context as answer_context  # noqa: E402
from ragline.eval.golden import load_golden, read_chunking, resolve_gold  # noqa: E402
from ragline.eval.metrics import answer_ok, reciprocal_rank  # noqa: E402
from ragline.eval.runs import CUTOFF  # noqa: E402

OUT = ROOT / "results" / "rerank-fit.json"
DEPTHS = (5, 10, 20)
WEIGHTS = (0.0, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 1000.0)
GRID = list(itertools.product(DEPTHS, WEIGHTS))
DEEPEST = max(DEPTHS)
KINDS = ("factual", "identifier", "procedural", "semantic")
SEMANTIC_BAR = 0.60  # issue 37: semantic MRR on each corpus
OTHER_LOSS = 0.02  # issue 37: the most any other kind may lose
REFUSED_ANSWERABLE = 0.125  # the abstain sweep's bound: at most one answerable question in eight refused


def _ranks(values: np.ndarray) -> np.ndarray:
    """Each value's place, 0 the best (ties: the earlier first, as `rerank.best_first`)."""
    out = np.empty(len(values), dtype=np.int64)
    out[rerank.best_first(values)] = np.arange(len(values))
    return out


def _z(values: np.ndarray) -> np.ndarray:
    spread = float(values.std())
    return (values - values.mean()) / spread if spread > 0 else np.zeros_like(values)


def _gap(base: np.ndarray) -> float:
    """How far retrieval's first hit stands above its second, on the min-max scale of the hits (1: alone)."""
    scaled = rerank.normalised(base)
    return float(scaled[0] - scaled[1]) if len(scaled) > 1 else 1.0


# each form: (its parameters, the order it gives the hits from retrieval's scores, the model's log-likelihoods and
# the record), its grid; `linear` is the shipped sum (`rerank.order`)
FORMS: dict[str, tuple[Any, list[dict[str, float]]]] = {
    "linear": (
        lambda p, base, logp, record: rerank.order(base, logp, p["weight"]),
        [{"weight": w} for w in WEIGHTS],
    ),
    "rrf": (
        lambda p, base, logp, record: rerank.best_first(1 / (p["k"] + _ranks(base)) + p["weight"] / (p["k"] + _ranks(logp))),
        [{"k": k, "weight": w} for k in (10.0, 60.0) for w in (0.5, 1.0, 2.0)],
    ),
    "z-score": (
        lambda p, base, logp, record: rerank.best_first(_z(base) + p["weight"] * _z(logp)),
        [{"weight": w} for w in (0.5, 1.0, 2.0, 4.0)],
    ),
    "gap-gated": (
        lambda p, base, logp, record: rerank.order(base, logp, p["weight"] * (1 - _gap(base)) ** p["power"]),
        [{"weight": w, "power": e} for w in (1.0, 2.0, 4.0) for e in (1.0, 2.0)],
    ),
    "coverage-gated": (
        lambda p, base, logp, record: rerank.order(
            base, logp, p["low"] if (record.get("confidence_parts") or {}).get("coverage", 1.0) < p["below"] else p["high"]
        ),
        [{"below": c, "low": lo, "high": hi} for c in (0.4, 0.6, 0.8) for lo, hi in ((2.0, 1.0), (4.0, 1.0), (2.0, 0.5), (4.0, 2.0))],
    ),
}


class Recorded:
    """The reranker's scorer, answered from what the real model said (the cache), asking it for what is missing."""

    def __init__(self, known: dict[str, float], model: str, threads: int):
        self.known, self.model, self.threads = known, model, threads
        self.judge: Any = None
        self.asked = 0

    def real(self) -> Any:
        if self.judge is None:
            from ragline.answer.local import Judge, LocalModel

            path, sha = local_models.model_file(self.model)
            self.judge = Judge(LocalModel(path, self.threads, 4096, sha, self.model))
        return self.judge

    def scores(self, question: str, pieces: Sequence[tuple[Sequence[str], str]], budget: Any = None) -> list[float]:
        keys = [json.dumps([question, list(h), t]) for h, t in pieces]
        missing = [i for i, k in enumerate(keys) if k not in self.known]
        if missing:
            for i, s in zip(missing, self.real().scores(question, [pieces[i] for i in missing]), strict=True):
                self.known[keys[i]] = s
            self.asked += len(missing)
        return [self.known[k] for k in keys]

    def prior(self, question: str, budget: Any = None) -> float:
        key = json.dumps([question, None, None])
        if key not in self.known:
            self.known[key] = self.real().prior(question)
            self.asked += 1
        return self.known[key]


def measure(corpus: str, docs: str, golden: str, work: Path, scorer: Recorded, kinds: Sequence[str] = KINDS) -> dict[str, Any]:
    """Per grid point: each question's reordered hits, reciprocal rank and relevance (answer-ok and refusal computed when
    asked, `answered` and `refusing`); and each question's kind and gold. With `kinds` fewer than KINDS: only the
    answerable questions of those kinds (a cheaper fit of what the model does for them, with no refusal to measure)."""
    idx, records = hits_for(corpus, docs, golden, work, DEEPEST)
    chunks = idx.parent / "chunks.jsonl"
    index = rag_index.load(str(idx))
    generator = rag_answer.Extractive(
        rag_answer.FEATURES, index.bm25, rag_answer.embed_with(rag_embed.load_embedder(index.manifest["model"]))
    )
    chunking = read_chunking(ragline.records.read_records([str(chunks)]), str(chunks))
    gold_file = cut_labels(load_golden(str(ROOT / golden)), chunking.texts)
    questions = gold_file.by_id()
    if set(kinds) != set(KINDS):
        records = [r for r in records if questions[r["id"]].answerable and questions[r["id"]].kind in kinds]
    start, asked = time.perf_counter(), scorer.asked
    out: dict[str, Any] = {"questions": [], "points": {}}
    for r in records:
        q = questions[r["id"]]
        gold = resolve_gold(q, chunking, gold_file.where(q))[0] if q.answerable else ()
        out["questions"].append({"id": q.id, "kind": q.kind, "answerable": q.answerable, "gold": gold})
    for depth, weight in GRID:
        rows = []
        for r, q in zip(records, out["questions"], strict=True):
            hits, relevance = rerank.Reranker(scorer, depth, weight).rerank(r["question"], r["hits"])
            row: dict[str, Any] = {"relevance": relevance, "hits": hits}
            if q["answerable"]:
                row["rr"] = reciprocal_rank([h["chunk_id"] for h in hits], q["gold"], CUTOFF)
            rows.append(row)
        out["points"][(depth, weight)] = rows
    if scorer.asked > asked:
        seconds = time.perf_counter() - start
        print(f"fit_rerank: {corpus}: {scorer.asked - asked} scores asked of the model in {seconds:.0f} s", file=sys.stderr)

    def answer(question: str, qid: str, hits: list[dict]) -> bool:
        text = generator.generate(question, answer_context.context(hits, rag_answer.CONTEXT))
        return answer_ok(text, False, questions[qid].answer_contains, True, len(text.split()))

    def refused(record: dict, hits: list[dict]) -> bool:
        """rag-answer's own refusal (the abstain threshold, a name the handbook lacks, no evidence) on these hits."""
        return bool(rag_answer.answer(record | {"hits": hits}, generator, rag_answer.DEFAULT_ABSTAIN, rag_answer.CONTEXT)["refused"])

    out["answer"], out["refused"], out["records"] = answer, refused, records
    return out


def refusing(m: dict[str, Any], point: tuple[int, float]) -> list[bool]:
    """rag-answer's refusal of each question at a point (on its reordered hits), computed once."""
    rows = m["points"][point]
    if "refused" not in rows[0]:
        for r, row in zip(m["records"], rows, strict=True):
            row["refused"] = m["refused"](r, row["hits"])
    return [row["refused"] for row in rows]


def answered(m: dict[str, Any], point: tuple[int, float]) -> list[bool]:
    """Answer-ok of each answerable question at a point (the extractive reader on its reordered hits), computed once."""
    asked = [(q, r, row) for q, r, row in zip(m["questions"], m["records"], m["points"][point], strict=True) if q["answerable"]]
    if asked and "ok" not in asked[0][2]:
        for q, r, row in asked:
            row["ok"] = m["answer"](r["question"], q["id"], row["hits"])
    return [row["ok"] for _, _, row in asked]


def figures(m: dict[str, Any], point: tuple[int, float], answers: bool = False) -> dict[str, Any]:
    """MRR (and, with `answers`, answer-ok) of the answerable questions, overall and by kind, at a point."""
    pairs = [(q, row) for q, row in zip(m["questions"], m["points"][point], strict=True) if q["answerable"]]
    if answers:
        answered(m, point)

    def of(rs: list[tuple[dict, dict]]) -> dict[str, Any]:
        out = {"n": len(rs), "mrr": round(float(np.mean([row["rr"] for _, row in rs])), 4)}
        return out | ({"answer_ok": round(float(np.mean([row["ok"] for _, row in rs])), 4)} if answers else {})

    return of(pairs) | {"by_kind": {k: of(rs) for k in KINDS if (rs := [(q, row) for q, row in pairs if q["kind"] == k])}}


def choose(table: dict[str, dict[str, Any]], corpora: list[str]) -> tuple[int, float]:
    return max(GRID, key=lambda p: (round(float(np.mean([figures(table[c], p)["mrr"] for c in corpora])), 6), -p[0], -p[1]))


def bar(mine: dict[str, Any], base: dict[str, Any]) -> dict[str, Any]:
    """Issue 37's bar on one corpus: semantic MRR >= SEMANTIC_BAR, no other kind more than OTHER_LOSS below retrieval's
    (None where that kind, or no other kind, was fitted: not measured, not met)."""
    semantic = mine["by_kind"].get("semantic", {}).get("mrr")
    losses = {k: round(base["by_kind"][k]["mrr"] - v["mrr"], 4) for k, v in mine["by_kind"].items() if k != "semantic"}
    worst = max(losses, key=lambda k: losses[k], default=None)
    return {
        "semantic_mrr": semantic,
        "semantic_met": semantic >= SEMANTIC_BAR if semantic is not None else None,
        "worst_other_kind": worst,
        "worst_other_loss": losses[worst] if worst else 0.0,
        "others_met": all(v <= OTHER_LOSS + 1e-9 for v in losses.values()) if losses else None,
    }


def form_rrs(m: dict[str, Any], depth: int, form: str, params: dict[str, float]) -> list[dict[str, Any]]:
    """(kind, reciprocal rank) of each answerable question, its first `depth` hits ordered by a form of FORMS; read off
    the hits in retrieval's order (the point of weight 0) with the model's log-likelihood of each."""
    order = FORMS[form][0]
    out = []
    for q, r, row in zip(m["questions"], m["records"], m["points"][(depth, 0.0)], strict=True):
        if not q["answerable"]:
            continue
        hits = row["hits"]
        base = np.array([float(h["signals"]["retrieved"]["score"]) for h in hits])
        logp = np.array([float(h["signals"]["local"]["logp"]) for h in hits])
        ids = [hits[i]["chunk_id"] for i in order(params, base, logp, r)] if hits else []
        out.append({"kind": q["kind"], "rr": reciprocal_rank(ids, q["gold"], CUTOFF)})
    return out


def form_figures(rows: list[dict[str, Any]]) -> dict[str, Any]:
    def of(rs: list[dict[str, Any]]) -> dict[str, Any]:
        return {"n": len(rs), "mrr": round(float(np.mean([r["rr"] for r in rs])), 4)}

    return of(rows) | {"by_kind": {k: of(rs) for k in KINDS if (rs := [r for r in rows if r["kind"] == k])}}


def _best(scored: list[dict[str, dict[str, Any]]], among: list[str]) -> int:
    """The grid point (its index) with the best mean MRR over the corpora `among`; ties: the first."""
    return max(range(len(scored)), key=lambda i: (round(float(np.mean([scored[i][c]["mrr"] for c in among])), 6), -i))


def forms(table: dict[str, dict[str, Any]], corpora: list[str], depth: int) -> dict[str, Any]:
    """Each form of FORMS at `depth`: the point of its grid with the best mean MRR over the corpora (ties: the grid's
    first), its MRR by kind and issue 37's bar on each corpus, and each corpus left out (the point the others choose)."""
    retrieval = {c: figures(table[c], (depth, 0.0)) for c in corpora}
    out = {}
    for form, (_, grid) in FORMS.items():
        scored = [{c: form_figures(form_rrs(table[c], depth, form, p)) for c in corpora} for p in grid]

        chosen = _best(scored, corpora)
        out[form] = {
            "point": grid[chosen],
            "mean_mrr": round(float(np.mean([scored[chosen][c]["mrr"] for c in corpora])), 4),
            "per_corpus": {c: scored[chosen][c] | {"bar": bar(scored[chosen][c], retrieval[c])} for c in corpora},
            "leave_one_corpus_out": {
                held: {"point": grid[i]} | scored[i][held] | {"bar": bar(scored[i][held], retrieval[held])}
                for held in corpora
                for i in [_best(scored, [c for c in corpora if c != held])]
            },
        }
    return out


def refusal_at(m: dict[str, Any], point: tuple[int, float], t: float, answering: bool = False) -> dict[str, float]:
    """Refusal rates refusing when relevance < t (and, `answering`, also where rag-answer refuses on the reordered hits)."""
    refused = {True: [], False: []}  # type: dict[bool, list[bool]]
    by_answer = refusing(m, point) if answering else [False] * len(m["questions"])
    for q, row, no in zip(m["questions"], m["points"][point], by_answer, strict=True):
        refused[q["answerable"]].append(no or row["relevance"] is None or row["relevance"] < t)
    return {
        "refused_when_unanswerable": round(float(np.mean(refused[False])), 4) if refused[False] else 0.0,
        "refused_when_answerable": round(float(np.mean(refused[True])), 4),
    }


def refusal_threshold(table: dict[str, dict[str, Any]], corpora: list[str], point: tuple[int, float], answering: bool) -> float:
    """The abstain rule on `relevance`: on every corpus at most REFUSED_ANSWERABLE answerable refused; within that the most
    unanswerable refused (the mean over the corpora), then the fewest answerable."""
    values = sorted({row["relevance"] for c in corpora for row in table[c]["points"][point] if row["relevance"] is not None})
    candidates = [-math.inf] + [(a + b) / 2 for a, b in itertools.pairwise(values)] + ([values[-1] + 1.0] if values else [])
    best, key = -math.inf, (-1.0, 0.0)
    for t in candidates:
        rates = [refusal_at(table[c], point, t, answering) for c in corpora]
        if any(r["refused_when_answerable"] > REFUSED_ANSWERABLE for r in rates):
            continue
        k = (
            float(np.mean([r["refused_when_unanswerable"] for r in rates])),
            -float(np.mean([r["refused_when_answerable"] for r in rates])),
        )
        if k > key:
            best, key = t, k
    return best


def refusals(table: dict[str, dict[str, Any]], corpora: list[str], point: tuple[int, float]) -> dict[str, Any]:
    """rag-answer's own refusals on the reordered hits; relevance alone as the refusal; and either, each threshold chosen
    on all corpora and on the others (leave-one-corpus-out)."""
    out: dict[str, Any] = {"answer_alone": {"per_corpus": {c: refusal_at(table[c], point, -math.inf, True) for c in corpora}}}
    for name, answering in (("relevance", False), ("relevance_or_answer", True)):
        t = refusal_threshold(table, corpora, point, answering)
        loco = {}
        for held in corpora:
            other = refusal_threshold(table, [c for c in corpora if c != held], point, answering)
            loco[held] = {"threshold": _finite(other)} | refusal_at(table[held], point, other, answering)
        out[name] = {
            "threshold": _finite(t),
            "per_corpus": {c: refusal_at(table[c], point, t, answering) for c in corpora},
            "leave_one_corpus_out": loco,
        }
    return out


def _finite(t: float) -> float | None:
    return None if math.isinf(t) else round(t, 6)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--work", default="build/fit", help="where the default indexes and hits are built")
    parser.add_argument("--model", default=options.default("local_model", "rerank"), help="the local model scoring the hits")
    parser.add_argument("--threads", type=int, default=0, help="llama.cpp's threads (0: one per core)")
    parser.add_argument("--out", default=str(OUT), help="the fit's result file")
    parser.add_argument(
        "--kinds",
        default=",".join(KINDS),
        type=lambda v: [k for k in v.split(",") if k],
        help="fit on the answerable questions of these kinds only (comma-separated; no refusal measured): a cheaper first look",
    )
    parser.add_argument("--check", action="store_true", help="only check rag-rerank's defaults against the committed fit")
    args = parser.parse_args()
    if not args.kinds or set(args.kinds) - set(KINDS):
        parser.error(f"--kinds: a comma-separated list of {', '.join(KINDS)}")
    shipped = {"depth": rerank.DEPTH, "weight": rerank.weight_for(args.model)}
    if args.check:
        for path, fit in fitted():
            mine = {"depth": rerank.DEPTH, "weight": rerank.weight_for(fit["model"])}
            if fit["chosen"]["point"] != mine:
                raise SystemExit(
                    f"fit_rerank: rag-rerank's defaults for {fit['model']} {mine} are not {path.name}'s chosen point {fit['chosen']['point']}"
                )
        return
    cache = ROOT / "build" / "fit-rerank" / args.model / "known.json"
    scorer = Recorded(json.loads(cache.read_text()) if cache.exists() else {}, args.model, args.threads)
    runs = plan()
    table = {}
    try:
        for corpus, docs, golden in runs:
            table[corpus] = measure(corpus, docs, golden, ROOT / args.work, scorer, args.kinds)
    finally:  # what the model said is kept, a run stopped halfway too
        cache.parent.mkdir(parents=True, exist_ok=True)
        cache.write_text(json.dumps(scorer.known))
    corpora = [c for c, _, _ in runs]
    chosen = choose(table, corpora)
    base = (chosen[0], 0.0)

    def point_row(p: tuple[int, float], c: str) -> dict[str, Any]:
        return {"point": {"depth": p[0], "weight": p[1]}} | figures(table[c], p, answers=True)

    result = {
        "schema": "rerank-fit/1",
        "model": args.model,
        "words": rerank.WORDS,
        "objective": f"mean MRR@{CUTOFF} of answerable questions over the corpora; ties: the shallower, then the lighter point",
        "corpora": corpora,
        "kinds": [k for k in KINDS if k in args.kinds],
        "grid_points": len(GRID),
        "chosen": {
            "point": {"depth": chosen[0], "weight": chosen[1]},
            "mean_mrr": round(float(np.mean([figures(table[c], chosen)["mrr"] for c in corpora])), 4),
            "per_corpus": {c: point_row(chosen, c) | {"bar": bar(figures(table[c], chosen), figures(table[c], base))} for c in corpora},
        },
        "retrieval": {
            "mean_mrr": round(float(np.mean([figures(table[c], base)["mrr"] for c in corpora])), 4),
            "per_corpus": {c: point_row(base, c) for c in corpora},
        },
        "leave_one_corpus_out": {
            held: point_row(p, held) | {"bar": bar(figures(table[held], p), figures(table[held], (p[0], 0.0)))}
            for held in corpora
            for p in [choose(table, [c for c in corpora if c != held])]
        },
        "refusal": refusals(table, corpora, chosen) if set(args.kinds) == set(KINDS) else None,
        "forms": forms(table, corpora, chosen[0]),
        "grid": [
            {"point": {"depth": p[0], "weight": p[1]}, "mean_mrr": round(float(np.mean([figures(table[c], p)["mrr"] for c in corpora])), 4)}
            for p in GRID
        ],
    }
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({"chosen": result["chosen"]["point"], "mean": (result["chosen"]["mean_mrr"], result["retrieval"]["mean_mrr"])}))
    if result["chosen"]["point"] != shipped and result["refusal"] is not None:
        print(
            f"fit_rerank: set rag-rerank's defaults for {args.model} (ragline/options.py, ragline.rerank.FITTED_WEIGHTS) "
            f"to {result['chosen']['point']}",
            file=sys.stderr,
        )


def fitted() -> list[tuple[Path, dict[str, Any]]]:
    """(file, fit) of the committed fits of every kind of question (results/rerank-fit*.json whose `kinds` are all of
    KINDS): each model's, whose chosen point rag-rerank ships for that model."""
    fits = [(path, json.loads(path.read_text())) for path in sorted((ROOT / "results").glob("rerank-fit*.json"))]
    return [(path, fit) for path, fit in fits if set(fit.get("kinds", KINDS)) == set(KINDS)]


if __name__ == "__main__":
    main()
