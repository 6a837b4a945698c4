"""dense: ranking.dense_top (blocked scoring) against faiss IndexFlatIP over synthetic unit vectors.

Latency of one query, throughput of batches of 64, top-10 equality with the rag
path, and the peak RSS of a fresh process that memory-maps the vectors (each
engine runs in its own `bench/run.py --worker dense` process); also the full
score matrix (`vectors @ q` + ranking.topk, the path before blocked scoring),
float16 storage with its recall@10, and the rag path alone on a larger matrix
(`dense_big`, 4M rows by default): how far one machine goes.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from bench.harness import ROOT, child_env, maxrss_bytes, median, quiet, target, timed
from bench.workload import DIM, make_queries, make_vectors

K = 10
BATCH = 64
ENGINES = ("rag", "full", "float16", "faiss", "faiss-fp16")


def sizes(quick: bool) -> dict[str, Any]:
    """Rows of the matrices, and single queries and batches of 64 per size."""
    if quick:
        return {
            "dense_sizes": [20_000],
            "dense_single": {20_000: 10, 40_000: 5},
            "dense_batches": {20_000: 2, 40_000: 1},
            "dense_big": 40_000,
        }
    return {
        "dense_sizes": [100_000, 1_000_000],
        "dense_single": {100_000: 50, 1_000_000: 15, 4_000_000: 5},
        "dense_batches": {100_000: 5, 1_000_000: 3, 4_000_000: 1},
        "dense_big": 4_000_000,
    }


# --------------------------------------------------------------------------- one engine, in its own process


def searchers(engine: str, vectors_path: str) -> tuple[int, str | None, Any, Any]:
    """(rows, dtype, one query -> top ids, matrix of queries -> top ids per query) of one engine."""
    import rag_index
    from ragline import ranking

    vectors = np.load(vectors_path, mmap_mode="r")
    if engine.startswith("faiss"):
        import faiss

        faiss.omp_set_num_threads(os.cpu_count() or 1)
        if engine == "faiss-fp16":  # float16 storage with faiss's own kernel
            index = faiss.IndexScalarQuantizer(vectors.shape[1], faiss.ScalarQuantizer.QT_fp16, faiss.METRIC_INNER_PRODUCT)
        else:
            index = faiss.IndexFlatIP(vectors.shape[1])
        index.add(np.ascontiguousarray(vectors))
        return index.ntotal, str(vectors.dtype), lambda v: index.search(v[None, :], K)[1][0], lambda m: list(index.search(m, K)[1])
    n = vectors.shape[0]
    tiebreak = np.arange(n, dtype=np.int64)  # ids in sorted order, as Searcher builds it
    if engine == "full":  # the path before blocked scoring: the whole (queries x rows) score matrix

        def many(m: np.ndarray) -> list[np.ndarray]:
            scores = m @ np.asarray(vectors).T  # one matmul per batch
            return [ranking.topk(scores[i], K, tiebreak) for i in range(len(m))]

        return n, str(vectors.dtype), lambda v: ranking.topk(np.asarray(vectors) @ v, K, tiebreak), many
    # "rag" (float32) or "float16": ranking.dense_top as Searcher.search calls it, a block of rows at a time
    index = rag_index.Index(Path(vectors_path), {}, vectors, [], None)  # type: ignore[arg-type]
    block = ranking.BLOCK if vectors.dtype == np.float32 else 1 << 13  # float16 is widened a block at a time
    return (
        n,
        str(vectors.dtype),
        lambda v: ranking.dense_top(index, v[None, :], K, tiebreak, block=block)[0].top(K),
        lambda m: [d.top(K) for d in ranking.dense_top(index, m, K, tiebreak, block=block)],
    )


def worker(engine: str, vectors_path: str, queries_path: str, singles: int, batches: int) -> dict[str, Any]:
    """One engine in a fresh process: latency, batch throughput, top-10 ids, peak RSS."""
    import rag_search  # noqa: F401 - loaded before rss_after_import, as in a searcher

    q = np.load(queries_path)
    rss_start = maxrss_bytes()
    n, dtype, one, many = searchers(engine, vectors_path)
    one(q[0])  # warm-up: maps the file in, as a long-running searcher has it
    rss_loaded = maxrss_bytes()
    single_s = []
    ids = []
    for i in range(singles):
        s, top = timed(lambda i=i: one(q[i]))
        single_s.append(s)
        ids.append([int(x) for x in top])
    rss_single = maxrss_bytes()
    many(q[:BATCH])  # warm-up of the batch path
    batch_s = []
    batch_ids: list[list[int]] = []
    for b in range(batches):
        chunk = q[b * BATCH : (b + 1) * BATCH]
        s, tops = timed(lambda chunk=chunk: many(chunk))
        batch_s.append(s)
        batch_ids.extend([int(x) for x in t] for t in tops)
    return {
        "engine": engine,
        "rows": int(n),
        "matrix_bytes": int(np.load(vectors_path, mmap_mode="r").nbytes),
        "single_ms": round(median(single_s) * 1000, 2),
        "single_ms_p90": round(float(np.percentile(single_s, 90)) * 1000, 2),
        "batch64_ms": round(median(batch_s) * 1000, 1),
        "batch64_qps": round(BATCH / median(batch_s), 1),
        "rss_after_import": rss_start,
        "dtype": dtype,
        "rss_after_warmup": rss_loaded,
        "rss_after_single": rss_single,
        "rss_peak": maxrss_bytes(),
        "single_ids": ids,
        "batch_ids": batch_ids,
    }


# --------------------------------------------------------------------------- the section


def run_worker(engine: str, vectors: Path, queries: Path, singles: int, batches: int) -> dict[str, Any]:
    cmd = [sys.executable, str(ROOT / "bench" / "run.py"), "--worker", "dense", "--engine", engine, "--vectors", str(vectors)]
    cmd += ["--queries", str(queries), "--singles", str(singles), "--batches", str(batches)]
    done = subprocess.run(cmd, capture_output=True, text=True, env=child_env())
    if done.returncode != 0:
        raise RuntimeError(f"dense worker {engine} failed: {done.stderr.strip()[-500:]}")
    return json.loads(done.stdout)


def agreement(a: list[list[int]], b: list[list[int]]) -> dict[str, float]:
    """Share of queries whose top-10 lists are identical (in order), and mean recall@10 of b against a."""
    a = a[: len(b)]  # an engine may have run fewer single queries
    same = sum(1 for x, y in zip(a, b, strict=True) if x == y)
    recall = [len(set(x) & set(y)) / len(x) for x, y in zip(a, b, strict=True)]
    return {"identical_lists": round(same / len(a), 4), "recall_at_10": round(float(np.mean(recall)), 4), "queries": len(b)}


def write_inputs(tmp: Path, n: int, queries: int) -> tuple[Path, Path, Path, float]:
    """(float32 vectors, their float16 copy, queries, seconds to generate the vectors) as .npy files in tmp."""
    vpath, hpath, qpath = tmp / f"v{n}.npy", tmp / f"h{n}.npy", tmp / f"q{n}.npy"
    gen_s, _ = timed(lambda: make_vectors(vpath, n))
    v = np.load(vpath, mmap_mode="r")
    h = np.lib.format.open_memmap(hpath, mode="w+", dtype=np.float16, shape=v.shape)
    for start in range(0, n, 100_000):
        h[start : start + 100_000] = v[start : start + 100_000]
    h.flush()
    del h, v
    np.save(qpath, make_queries(vpath, queries))
    return vpath, hpath, qpath, gen_s


def engine_row(r: dict[str, Any], rag: dict[str, Any]) -> dict[str, Any]:
    """One engine's figures from its worker's report; memory is also relative to the float32 matrix (rag's)."""
    row = {
        "single_ms": r["single_ms"],
        "single_ms_p90": r["single_ms_p90"],
        "batch64_ms": r["batch64_ms"],
        "batch64_qps": r["batch64_qps"],
        "rss_peak_mb": round(r["rss_peak"] / 2**20, 1),
        "rss_after_single_mb": round(r["rss_after_single"] / 2**20, 1),
        "rss_after_import_mb": round(r["rss_after_import"] / 2**20, 1),
        "rss_over_float32_matrix": round(r["rss_peak"] / rag["matrix_bytes"], 3),
        "rss_over_own_matrix": round(r["rss_peak"] / r["matrix_bytes"], 3),
        "rss_growth_over_float32_matrix": round((r["rss_peak"] - r["rss_after_import"]) / rag["matrix_bytes"], 3),
    }
    if r is not rag:
        row["vs_rag_single"] = agreement(rag["single_ids"], r["single_ids"])
        row["vs_rag_batch"] = agreement(rag["batch_ids"], r["batch_ids"])
    return row


def run(sizes: dict[str, Any]) -> dict[str, Any]:
    """Dense search over synthetic unit vectors: rag path vs faiss IndexFlatIP, memory, float16."""
    import rag_index

    fig: dict[str, Any] = {}
    targets: list[dict[str, Any]] = []
    notes: list[str] = []
    have_faiss = importlib.util.find_spec("faiss") is not None
    if not have_faiss:
        notes.append("faiss is not installed (pip install -e '.[bench]'): no faiss comparison")
    with tempfile.TemporaryDirectory(prefix="ragline-bench-dense-") as tmp:
        for n in sizes["dense_sizes"]:
            singles, batches = sizes["dense_single"][n], sizes["dense_batches"][n]
            vpath, hpath, qpath, gen_s = write_inputs(Path(tmp), n, max(singles, BATCH * batches))
            runs: dict[str, dict[str, Any]] = {}
            for engine in ENGINES if have_faiss else ENGINES[:3]:
                path = hpath if engine == "float16" else vpath
                few = max(3, singles // 5) if engine == "float16" else singles  # numpy widens float16 slowly
                runs[engine] = quiet(lambda e=engine, p=path, q=qpath, s=few, b=batches: run_worker(e, p, q, s, b))[1]
            rag = runs["rag"]
            row: dict[str, Any] = {"rows": n, "dim": DIM, "matrix_mb": round(rag["matrix_bytes"] / 2**20, 1), "generate_s": round(gen_s, 1)}
            for engine, r in runs.items():
                row[engine] = engine_row(r, rag)
            for engine in ("faiss", "faiss-fp16"):
                if engine in runs:
                    row[f"single_speed_rag_over_{engine}"] = round(runs[engine]["single_ms"] / rag["single_ms"], 3)
                    row[f"batch_speed_rag_over_{engine}"] = round(rag["batch64_qps"] / runs[engine]["batch64_qps"], 3)
            row["load_digest_s"] = round(timed(lambda vpath=vpath: rag_index.file_digest(vpath))[0], 3)
            fig[str(n)] = row
            why = "ranking.dense_top, blocked"
            # The issue sets this target at a million rows, where the matrix dominates; at fewer rows the
            # interpreter and numpy (rss_after_import) are a share of the matrix before any scoring, so the
            # smaller sizes are figures of the table (with the growth the scoring owns), not targets.
            if n == max(sizes["dense_sizes"]):
                targets.append(
                    target(
                        "dense",
                        f"peak RSS / matrix size, {n:,} rows (rag path)",
                        rag["rss_peak"] / rag["matrix_bytes"],
                        "<=",
                        1.1,
                        "x",
                        why,
                    )
                )
            for p in (vpath, hpath, qpath):
                p.unlink()
        fig["big"] = big_matrix(Path(tmp), sizes)
    notes.append(
        "rag = ranking.dense_top as Searcher.search runs it: scores 32,768 rows at a time and keeps each block's top 10 "
        "(the same result as ranking.topk over all rows); full = the whole score matrix then ranking.topk (the path "
        "before); float16 = dense_top over a float16 copy of the matrix (half the bytes), widened "
        "8,192 rows at a time; faiss = IndexFlatIP with its defaults (OpenMP over all cores); "
        "faiss-fp16 = IndexScalarQuantizer QT_fp16 (float16 storage, faiss's kernel). RSS is VmHWM, the whole process's "
        "peak (interpreter and imports included: see rss_after_import_mb)."
    )
    return {"figures": fig, "targets": targets, "notes": notes}


def big_matrix(tmp: Path, sizes: dict[str, Any]) -> dict[str, Any]:
    """The rag path alone on the largest matrix (float32, memory-mapped): queries/s, peak RSS, rows per GB."""
    n = sizes["dense_big"]
    singles, batches = sizes["dense_single"][n], sizes["dense_batches"][n]
    vpath, qpath = tmp / f"v{n}.npy", tmp / f"q{n}.npy"
    gen_s, _ = timed(lambda: make_vectors(vpath, n))
    np.save(qpath, make_queries(vpath, max(singles, BATCH * batches)))
    r = quiet(lambda: run_worker("rag", vpath, qpath, singles, batches))[1]
    vpath.unlink()
    qpath.unlink()
    return {
        "rows": n,
        "matrix_mb": round(r["matrix_bytes"] / 2**20, 1),
        "generate_s": round(gen_s, 1),
        "single_ms": r["single_ms"],
        "batch64_qps": r["batch64_qps"],
        "rss_peak_mb": round(r["rss_peak"] / 2**20, 1),
        "rss_over_float32_matrix": round(r["rss_peak"] / r["matrix_bytes"], 3),
        "rows_per_gb_of_vectors": round(n / (r["matrix_bytes"] / 1e9)),
    }


def render(f: dict[str, Any]) -> list[str]:
    """The section's lines of results/bench.md: one row per size and engine."""
    lines = [
        "",
        "**Dense search** (dim 384, top-10; RSS is the whole process's peak)",
        "",
        "| Rows | Engine | 1 query ms | batch of 64, q/s | peak RSS MB | RSS / float32 matrix | growth / matrix | top-10 vs rag |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for n, row in f.items():
        if n == "big":
            continue
        for engine in ENGINES:
            if engine in row:
                e = row[engine]
                agree = e.get("vs_rag_batch")
                agree_s = f"identical {agree['identical_lists']:.0%}, recall {agree['recall_at_10']:.3f}" if agree else "-"
                lines.append(
                    f"| {int(n):,} | {engine} | {e['single_ms']:.1f} | {e['batch64_qps']:,.0f} | {e['rss_peak_mb']:,.0f} | "
                    f"{e['rss_over_float32_matrix']:.2f} | {e['rss_growth_over_float32_matrix']:.2f} | {agree_s} |"
                )
    big = f.get("big")
    if big:
        lines.append(
            f"| {big['rows']:,} | rag | {big['single_ms']:.1f} | {big['batch64_qps']:,.0f} | {big['rss_peak_mb']:,.0f} | "
            f"{big['rss_over_float32_matrix']:.2f} | | |"
        )
        lines += [
            "",
            f"One machine: {big['rows_per_gb_of_vectors']:,} chunks per GB of float32 vectors (dim 384, memory-mapped); "
            f"at {big['rows']:,} rows ({big['matrix_mb'] / 1024:.1f} GiB) one query takes {big['single_ms']:,.0f} ms "
            f"({1000 / big['single_ms']:.1f} queries/s one at a time, {big['batch64_qps']:,.0f} in batches of 64).",
        ]
    return lines
