"""ranking: the numerical primitives of rag-search: top-k with a stable tie-break, reciprocal
rank fusion, dense scores with passage max-sim, the blocked dense top-k, and score fusion.

A library, not a stage (rag_search uses it, bench measures it); each formula is in its
function's docstring. numpy only, on arrays and an index's vectors.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ragline import options
from ragline.index import Index

DEFAULT_RRF_K = options.default("rrf_k")  # the k of reciprocal rank fusion
BLOCK = 1 << 15  # chunk rows dense retrieval scores at a time (`dense_top`): BATCH x BLOCK floats at most


def topk(scores: np.ndarray, k: int, tiebreak: np.ndarray) -> np.ndarray:
    """Row indices of the k best scores, best first; ties broken by `tiebreak` ascending.

    np.argpartition finds the k-th best score; every row scoring at least that
    much survives (so ties at the boundary are not cut arbitrarily), and only
    the survivors are sorted. Equal to a full sort by (-score, tiebreak).
    """
    n = scores.shape[0]
    if k <= 0 or n == 0:
        return np.zeros(0, dtype=np.int64)
    if k < n:
        kth = np.partition(scores, n - k)[n - k]
        rows = np.flatnonzero(scores >= kth)
    else:
        rows = np.arange(n)
    order = np.lexsort((tiebreak[rows], -scores[rows]))
    return rows[order][:k]


def rrf(rankings: dict[str, list[int]], k: int = DEFAULT_RRF_K) -> dict[int, float]:
    """Reciprocal rank fusion: score(d) = sum over rankings of 1 / (k + rank(d)), rank from 1.

    A document absent from a ranking gets nothing from it (Cormack et al., 2009).
    """
    fused: dict[int, float] = {}
    for ranking in rankings.values():
        for rank, row in enumerate(ranking, 1):
            fused[row] = fused.get(row, 0.0) + 1.0 / (k + rank)
    return fused


def dense_scores(index: Index, queries: np.ndarray, *, passages: bool = True) -> np.ndarray:
    """Cosine of each query (unit rows) with each chunk: (queries, chunks).

    With `passages` and an index that has passage vectors (rag-embed --passages), a
    chunk scores the best of its own vector and its passages' (max-sim over the
    chunk's views), so one on-topic paragraph of a long section counts in full.
    """
    vectors = np.asarray(index.vectors)
    scores = queries @ vectors.T if len(queries) > 1 else (vectors @ queries[0])[None, :]
    if passages and index.passages is not None and len(index.passages):
        rows = np.asarray(index.passage_rows)
        order = np.argsort(rows, kind="stable")  # rag-index writes them in chunk order already: a no-op then
        owners, starts = np.unique(rows[order], return_index=True)
        per_passage = queries @ np.asarray(index.passages)[order].T
        best = np.maximum.reduceat(per_passage, starts, axis=1)  # each owner's best passage, all queries at once
        scores[:, owners] = np.maximum(scores[:, owners], best)
    return scores


class DenseTop:
    """One query's dense scores as `dense_top` keeps them: the k best rows, the extremes over
    all rows, and any other row's score computed when asked for (`scores[rows]`), as
    `dense_scores` would give it. Stands in for that query's row of `dense_scores` in
    `Searcher` (`score_fusion` reads `min()`, `max()` and `[rows]`)."""

    def __init__(self, views: _DenseViews, query: np.ndarray, rows: np.ndarray, scores: np.ndarray, lo: float, hi: float):
        self.views, self.query = views, query
        self.rows, self.scores = rows, scores  # the best rows, best first, and their scores
        self.lo, self.hi = lo, hi
        self.known = dict(zip(rows.tolist(), scores.tolist(), strict=True))

    def __len__(self) -> int:
        return self.views.n

    def min(self) -> float:
        return self.lo

    def max(self) -> float:
        return self.hi

    def top(self, k: int) -> np.ndarray:
        """The k best rows, best first (k at most the k `dense_top` kept)."""
        if k > len(self.rows) and len(self.rows) < self.views.n:
            raise ValueError(f"dense_top kept {len(self.rows)} rows, {k} asked for")
        return self.rows[:k]

    def __getitem__(self, rows: Any) -> Any:
        if np.ndim(rows) == 0:
            row = int(rows)
            return np.float32(self.known[row]) if row in self.known else self.views.scores(self.query[None, :], row, row + 1)[0, 0]
        rows = np.asarray(rows, dtype=np.int64)
        out = np.array([self.known.get(r, np.nan) for r in rows.tolist()], dtype=np.float32)
        for i in np.flatnonzero(np.isnan(out)):
            out[i] = self.views.scores(self.query[None, :], int(rows[i]), int(rows[i]) + 1)[0, 0]
        return out


class _DenseViews:
    """An index's chunk vectors and (with `passages`) its passage vectors grouped by chunk row,
    scored a range of chunk rows at a time."""

    def __init__(self, index: Index, passages: bool):
        self.vectors = index.vectors
        self.n = int(index.vectors.shape[0])
        self.passages = None
        if passages and index.passages is not None and len(index.passages):
            rows = np.asarray(index.passage_rows)
            self.order = np.argsort(rows, kind="stable")  # rag-index writes them in chunk order already
            self.owners_sorted = rows[self.order]
            self.passages = index.passages

    def scores(self, queries: np.ndarray, start: int, stop: int) -> np.ndarray:
        """(queries, stop - start) cosines of chunk rows start..stop-1, each the best of the chunk's own vector
        and its passages' (as `dense_scores`, one matrix product per range)."""
        part = np.asarray(self.vectors[start:stop])
        out = queries @ part.T if len(queries) > 1 else (part @ queries[0])[None, :]
        if self.passages is not None:
            a, b = np.searchsorted(self.owners_sorted, [start, stop])
            if b > a:
                owners, starts = np.unique(self.owners_sorted[a:b], return_index=True)
                per_passage = queries @ np.asarray(self.passages)[self.order[a:b]].T
                best = np.maximum.reduceat(per_passage, starts, axis=1)
                out[:, owners - start] = np.maximum(out[:, owners - start], best)
        return out


def dense_top(
    index: Index, queries: np.ndarray, k: int, tiebreak: np.ndarray, *, passages: bool = True, block: int | None = None
) -> list[DenseTop]:
    """Per query, the k best chunks by `dense_scores` (ties by `tiebreak`), and the extremes of its scores,
    scoring `block` chunk rows at a time (BLOCK by default).

    Each block keeps its own top k by (-score, tiebreak); the global top k is among them,
    so the result is `topk` over the full score row, without the (queries x chunks) score
    matrix: peak memory is queries x block floats, whatever the index's size.
    """
    views = _DenseViews(index, passages)
    block = block or BLOCK
    n, q = views.n, len(queries)
    kept_rows: list[list[np.ndarray]] = [[] for _ in range(q)]
    kept_scores: list[list[np.ndarray]] = [[] for _ in range(q)]
    lo, hi = np.full(q, np.inf), np.full(q, -np.inf)
    for start in range(0, n, block):
        stop = min(n, start + block)
        scores = views.scores(queries, start, stop)
        lo, hi = np.minimum(lo, scores.min(axis=1)), np.maximum(hi, scores.max(axis=1))
        for i in range(q):
            top = topk(scores[i], k, tiebreak[start:stop])
            kept_rows[i].append(top + start)
            kept_scores[i].append(scores[i][top])
    out = []
    for i in range(q):
        rows = np.concatenate(kept_rows[i]) if n else np.zeros(0, dtype=np.int64)
        scores = np.concatenate(kept_scores[i]) if n else np.zeros(0, dtype=np.float32)
        best = topk(scores, k, tiebreak[rows])
        out.append(DenseTop(views, queries[i], rows[best], scores[best], float(lo[i]), float(hi[i])))
    return out


def score_fusion(dense: np.ndarray | DenseTop, sparse: np.ndarray, rows: np.ndarray, dense_weight: float) -> np.ndarray:
    """Convex combination of normalised scores for `rows` (Bruch et al., 2023):

        fused(d) = w * (cos(q, d) - min cos) / (max cos - min cos) + (1 - w) * BM25(q, d) / max BM25

    Each retriever's scores are scaled by its extremes over the whole index, so a
    retriever whose best chunk stands out keeps that margin (RRF keeps only ranks).
    BM25's lower bound is its theoretical 0. A retriever whose scores are all equal
    (no query term in the corpus) contributes 0.
    """
    lo, hi = float(dense.min()), float(dense.max())
    d = (dense[rows] - lo) / (hi - lo) if hi > lo else np.zeros(len(rows))
    top = float(sparse.max())
    b = sparse[rows] / top if top > 0 else np.zeros(len(rows))
    return dense_weight * d + (1.0 - dense_weight) * b
