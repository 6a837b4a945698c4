"""bm25: ragline.bm25.build_bm25 / Bm25.scores + ranking.topk against bm25s on Zipfian documents.

bm25s runs as lucene, k1 1.2, b 0.75, over the same tokens (ragline.text.tokenize), so
scores agree and ids differ only among equal scores.
"""

from __future__ import annotations

import importlib.util
from typing import Any

import numpy as np

from bench.harness import fmt, median, quiet, target
from bench.workload import zipf_corpus, zipf_queries

K = 10


def sizes(quick: bool) -> dict[str, Any]:
    """Documents, queries, query runs and index builds."""
    if quick:
        return {"bm25_docs": 5_000, "bm25_queries": 100, "bm25_runs": 2, "bm25_build_runs": 1}
    return {"bm25_docs": 100_000, "bm25_queries": 1000, "bm25_runs": 3, "bm25_build_runs": 2}


def agreement(index: Any, retriever: Any, query_tokens: list[list[str]], rag_results: list[Any], bm25s_results: Any) -> dict[str, Any]:
    """How far ragline's top 10 and scores agree with bm25s's, and the full score vectors of 20 queries."""
    docs_b, scores_b = bm25s_results
    identical = same_scores = 0
    max_diff = 0.0
    for (top, sc), db, sb in zip(rag_results, docs_b, scores_b, strict=True):
        identical += int(list(top) == [int(x) for x in db])
        close = np.allclose(sc, sb, rtol=1e-5, atol=1e-6)
        same_scores += int(close)
        max_diff = max(max_diff, float(np.max(np.abs(sc - sb))))
    sample = [index.scores(index.term_ids(t)[1]) for t in query_tokens[:20]]
    full_diff = max(float(np.max(np.abs(s - retriever.get_scores(t)))) for s, t in zip(sample, query_tokens[:20], strict=True))
    return {
        "identical_top10": round(identical / len(query_tokens), 4),
        "same_top10_scores": round(same_scores / len(query_tokens), 4),
        "max_top10_score_diff": round(max_diff, 7),
        "max_full_score_diff_20_queries": round(full_diff, 7),
        "note": "ids can differ only among equal scores: bm25s breaks ties arbitrarily, ragline by id",
    }


def query_runs(index: Any, retriever: Any, query_tokens: list[list[str]], runs: int) -> tuple[list[float], list[float], Any, Any]:
    """(ragline's seconds, bm25s's seconds, ragline's last (top, scores) per query, bm25s's last results): every query
    `runs` times, the two sides interleaved; bm25s only where there is a retriever."""
    from ragline import ranking

    tiebreak = np.arange(len(index.doc_len), dtype=np.int64)

    def rag_query(tokens: list[str]) -> tuple[np.ndarray, np.ndarray]:
        _, ids = index.term_ids(tokens)
        scores = index.scores(ids)
        top = ranking.topk(scores, K, tiebreak)
        return top, scores[top]

    rag_q: list[float] = []
    st_q: list[float] = []
    rag_results = bm25s_results = None
    for _ in range(runs):
        s, rag_results = quiet(lambda: [rag_query(t) for t in query_tokens])
        rag_q.append(s)
        if retriever is not None:
            s, bm25s_results = quiet(
                lambda: retriever.retrieve(query_tokens, k=K, show_progress=False, n_threads=1, backend_selection="numpy")
            )
            st_q.append(s)
    return rag_q, st_q, rag_results, bm25s_results


def run(sizes: dict[str, Any]) -> dict[str, Any]:
    """ragline.bm25.build_bm25 + Bm25.scores + ranking.topk against bm25s (lucene, k1 1.2, b 0.75)."""
    import ragline.bm25
    import ragline.text

    fig: dict[str, Any] = {}
    targets: list[dict[str, Any]] = []
    notes: list[str] = []
    docs, words = zipf_corpus(sizes["bm25_docs"])
    queries = zipf_queries(words, sizes["bm25_queries"])
    query_tokens = [list(dict.fromkeys(ragline.text.tokenize(q))) for q in queries]  # distinct, as Bm25.term_ids
    tok_s: list[float] = []
    build_s: list[float] = []
    bm25s_s: list[float] = []
    have_bm25s = importlib.util.find_spec("bm25s") is not None
    retriever = None
    s, doc_tokens = quiet(lambda: [ragline.text.tokenize(d) for d in docs])  # once: it is the same work in every build
    tok_s.append(s)
    for _ in range(sizes["bm25_build_runs"]):
        s, index = quiet(lambda: ragline.bm25.build_bm25(docs))
        build_s.append(s)
        if have_bm25s:
            import bm25s

            retriever = bm25s.BM25(method="lucene", k1=1.2, b=0.75)
            s, _ = quiet(lambda r=retriever, t=doc_tokens: r.index(t, show_progress=False))
            bm25s_s.append(s)
    tokens_total = int(index.doc_len.sum())
    fig["corpus"] = {
        "docs": len(docs),
        "tokens": tokens_total,
        "tokens_per_doc": round(tokens_total / len(docs), 1),
        "vocabulary": len(index.terms),
        "postings": len(index.docs),
        "queries": len(queries),
        "query_terms_mean": round(float(np.mean([len(t) for t in query_tokens])), 2),
    }
    fig["build"] = {
        "rag_build_bm25_s": round(median(build_s), 2),
        "tokenize_s": round(median(tok_s), 2),
        "rag_build_without_tokenize_s": round(median(build_s) - median(tok_s), 2),
    }
    rag_q, st_q, rag_results, bm25s_results = query_runs(index, retriever, query_tokens, sizes["bm25_runs"])
    rag_qps = len(queries) / median(rag_q)
    fig["rag"] = {"qps": round(rag_qps, 1), "ms_per_query": round(median(rag_q) / len(queries) * 1000, 3)}
    if retriever is not None and bm25s_results is not None:
        bm25s_qps = len(queries) / median(st_q)
        build_ratio = (median(bm25s_s) + median(tok_s)) / median(build_s)
        fig["build"]["bm25s_index_s"] = round(median(bm25s_s), 2)
        fig["build"]["bm25s_index_plus_tokenize_s"] = round(median(bm25s_s) + median(tok_s), 2)
        fig["build"]["speed_rag_over_bm25s"] = round(build_ratio, 3)
        fig["bm25s"] = {
            "qps": round(bm25s_qps, 1),
            "ms_per_query": round(median(st_q) / len(queries) * 1000, 3),
            "version": bm25s.__version__,
            "backend": "numpy, n_threads=1",
        }
        fig["qps_rag_over_bm25s"] = round(rag_qps / bm25s_qps, 3)
        fig["agreement"] = agreement(index, retriever, query_tokens, rag_results, bm25s_results)
        targets.append(target("bm25", "query throughput over bm25s", rag_qps / bm25s_qps, ">=", 1.0, "x"))
        targets.append(target("bm25", "index build speed over bm25s (+ tokenize)", build_ratio, ">=", 1.5, "x"))
    else:
        notes.append("bm25s is not installed (pip install -e '.[bench]'): no comparison")
    return {"figures": fig, "targets": targets, "notes": notes}


def render(f: dict[str, Any]) -> list[str]:
    """The section's lines of results/bench.md: build time, queries/s and agreement, ragline and bm25s."""
    c, b = f["corpus"], f["build"]
    lines = [
        "",
        f"**BM25** {c['docs']:,} Zipfian documents ({c['tokens_per_doc']} terms each, {c['vocabulary']:,} distinct), "
        f"{c['queries']:,} queries",
        "",
        "| | build s | queries/s | top-10 |",
        "|---|---|---|---|",
        f"| ragline | {b['rag_build_bm25_s']:.1f} (tokenise {b['tokenize_s']:.1f}) | {fmt(f['rag']['qps'])} | |",
    ]
    if "bm25s" in f:
        a = f["agreement"]
        lines.append(
            f"| bm25s {f['bm25s']['version']} (lucene) | {b['bm25s_index_s']:.1f} + tokenise | {fmt(f['bm25s']['qps'])} | "
            f"same scores {a['same_top10_scores']:.0%}, same ids {a['identical_top10']:.0%} |"
        )
    return lines
