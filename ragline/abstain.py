"""abstain: the abstain signal, each question's `confidence` in [0, 1], that rag-search writes
and rag-answer refuses under (its --threshold).

Its parts come from BM25 statistics (`confidence_parts`: best, coverage) and the dense
score (the best cosine of any chunk); `blend` combines them. rag-search computes them on
every question, whichever retrievers run. How well each part and each blend tells
answerable from unanswerable questions is measured by `ragline.eval.sweep` (`rag-eval
sweep`, results/abstain-sweep.json), which also chose the threshold.
"""

from __future__ import annotations

import numpy as np

from ragline.bm25 import Bm25
from ragline.ranking import topk


def confidence_parts(
    bm25: Bm25, ids: np.ndarray, weights: np.ndarray, bm25_scores: np.ndarray, tiebreak: np.ndarray, depth: int = 3
) -> dict[str, float]:
    """The lexical parts of the abstain signal, from BM25 statistics alone (`bm25_scores`: every
    chunk's BM25 score for the question, whose terms are `ids` with their idf `weights`):

      best     = max_d BM25(q, d) / sum_t idf(t): the best chunk's share of the score
                 a chunk holding every query term at saturation would get
      coverage = sum of idf(t) over query terms found in the top `depth` BM25 chunks
                 / sum_t idf(t). Terms absent from the corpus have df = 0 and so the
                 largest idf: a question about something the handbook never names
                 loses most of its mass.
    A question with no terms (only stopwords) gets 0.0 for both.
    """
    total = float(weights.sum())
    if total <= 0 or not len(bm25_scores):
        return {"best": 0.0, "coverage": 0.0}
    best = float(bm25_scores.max()) / total
    top = topk(bm25_scores, depth, tiebreak)
    top = top[bm25_scores[top] > 0]
    found = 0.0
    for tid, w in zip(ids, weights, strict=True):
        if tid >= 0 and len(top) and bm25.contains(int(tid), top).any():
            found += float(w)
    return {"best": round(min(1.0, best), 6), "coverage": round(found / total, 6)}


def blend(parts: dict[str, float]) -> float:
    """The abstain signal in [0, 1]: half lexical, half dense.

        confidence = (best + coverage) / 4 + dense / 2

    `best` and `coverage` come from `confidence_parts`; `dense` is the best dense
    score of any chunk under the index's own model (`ragline.ranking.dense_scores`: with passage vectors,
    a chunk's best passage counts, so the signal moves with --passages), computed
    whichever retrievers run (so the signal is the same with and without --sparse
    or --no-dense). results/abstain-sweep.json gives each part's and each blend's
    power to tell answerable from unanswerable questions (ROC AUC); the blend is
    the one that earned its place there.
    """
    value = (parts["best"] + parts["coverage"]) / 4 + max(0.0, parts.get("dense", 0.0)) / 2
    return round(min(1.0, max(0.0, value)), 6)
