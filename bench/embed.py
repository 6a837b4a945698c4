"""embed: rag-embed's OnnxEmbedder against sentence-transformers (fp32, torch CPU) on the same chunks.

tokens/s, their ratio and the cosine agreement; the CPU's sgemm rate and the model's
FLOPs per token give the physical limit; onnxruntime's per-operator profile shows
what runs; ablations change one thing at a time (length-sorted batching, threads,
batch size, graph optimisation).

sentence-transformers and torch are not bench dependencies: the comparison runs
bench/st_embed.py under $RAG_BENCH_ST_PYTHON (default: this interpreter if it can
import sentence_transformers; otherwise the comparison is skipped and bench.json
says so), with the fp32 model folder $MINILM_ST_DIR (default /tmp/st-minilm; see
tests/fixtures/make_reference_vectors.py for where it comes from).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

import rag_embed  # light: onnxruntime is imported only when a model loads
from bench.harness import QUIET, child_env, fmt, median, quiet, target, timed
from bench.workload import MODEL, embed_texts_of, workload
from ragline import models

HERE = Path(__file__).resolve().parent
THREADS = 2  # onnxruntime and torch threads in the embedding comparison, for fairness
DEFAULT_LABEL = (
    f"default (sorted, 2 threads, batch {rag_embed.BATCH_SIZE}, derived fp32 file, attention fused, {rag_embed.OPTIMIZATION} level)"
)
BATCHES_LABEL = "2 batches at once, 1 thread each (spread=batches)"
UNFUSED_LABEL = "attention unfused (the derived file before fuse_attention)"
INT8_LABEL = "the int8 file as shipped (model.onnx)"


def sizes(quick: bool) -> dict[str, Any]:
    """Texts and runs of the comparison, of the ablations, and the sgemm matrix size."""
    if quick:
        return {"embed_texts": 32, "embed_runs": 1, "st_runs": 1, "ablate_texts": 16, "ablate_runs": 1, "gemm_n": 1024, "gemm_runs": 3}
    return {"embed_texts": 1000, "embed_runs": 3, "st_runs": 2, "ablate_texts": 128, "ablate_runs": 3, "gemm_n": 2048, "gemm_runs": 5}


# --------------------------------------------------------------------------- the physical limit


def minilm_flops_per_token(seq: float = 128, layers: int = 6, hidden: int = 384, intermediate: int = 1536) -> float:
    """FLOPs per token of a BERT encoder forward pass (all-MiniLM-L6-v2 by default).

    One multiply-accumulate (MAC) = 2 FLOP. Per token and per layer:

        Q, K, V projections   3 * h * h   = 3 * 384 * 384  =   442,368 MAC
        attention output          h * h   =     384 * 384  =   147,456 MAC
        FFN up and down       2 * h * i   = 2 * 384 * 1536 = 1,179,648 MAC
        weights in matmuls                                   1,769,472 MAC = 3,538,944 FLOP
        scores Q.K^T              L * h   = 128 * 384      =    49,152 MAC
        context A.V               L * h   = 128 * 384      =    49,152 MAC
        attention at L = 128                                    98,304 MAC =   196,608 FLOP

    Six layers: 6 * (3,538,944 + 196,608) = 21,233,664 + 1,179,648 = 22,413,312 FLOP,
    about 22.4 MFLOP per token at L = 128 (2 x the 10.6 M weights in matmuls, plus
    attention, which grows with L: 23.6 MFLOP at L = 256). Not counted: the
    embedding lookup (a gather), biases, LayerNorm, softmax and GELU, all O(h) per
    token, under 1%. A text of n tokens costs n * flops_per_token(n).
    """
    weights = 3 * hidden * hidden + hidden * hidden + 2 * hidden * intermediate
    attention = 2 * seq * hidden
    return 2.0 * layers * (weights + attention)


def sgemm_rate(n: int, runs: int, threads: int | None = None) -> dict[str, Any]:
    """numpy float32 matmul (n x n) @ (n x n): GFLOP/s, median of runs (2 n^3 FLOP each)."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n), dtype=np.float32)
    b = rng.standard_normal((n, n), dtype=np.float32)

    def run() -> list[float]:
        a @ b  # warm-up
        return quiet(lambda: [timed(lambda: a @ b)[0] for _ in range(runs)])[1]

    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        threadpool_limits = None  # type: ignore[assignment]
    if threads is not None and threadpool_limits is not None:
        with threadpool_limits(limits=threads, user_api="blas"):
            seconds = run()
    else:
        seconds = run()
    return {"n": n, "threads": threads, "gflops": round(2 * n**3 / median(seconds) / 1e9, 1), "seconds": [round(s, 4) for s in seconds]}


def physical_limit(fig: dict[str, Any], sizes: dict[str, Any], lengths: list[int]) -> float:
    """tokens/s the CPU's sgemm rate allows for texts of these token lengths; its figures go into fig."""
    gemm = sgemm_rate(sizes["gemm_n"], sizes["gemm_runs"])
    gemm1 = sgemm_rate(sizes["gemm_n"], sizes["gemm_runs"], threads=1)
    flops_128 = minilm_flops_per_token(128)
    flops_workload = sum(n * minilm_flops_per_token(n) for n in lengths) / sum(lengths)
    limit = gemm["gflops"] * 1e9 / flops_workload
    fig["sgemm"] = {"all_threads": gemm, "one_thread": gemm1}
    fig["flops_per_token"] = {"at_128": flops_128, "workload_weighted": round(flops_workload)}
    fig["limit_tokens_per_s"] = round(limit)
    fig["limit_tokens_per_s_at_128"] = round(gemm["gflops"] * 1e9 / flops_128)
    return limit


def kernel_profile(embedder: Any, lengths: list[int]) -> dict[str, Any]:
    """onnxruntime's own per-operator time for one 32-text batch of the workload's median length.

    Shows what really runs: an int8 model whose weights are only stored in int8 runs
    float32 MatMul after onnxruntime constant-folds the dequantisation; a model that
    computes in int8 shows MatMulInteger / DynamicQuantizeLinear / QAttention.
    """
    width = int(np.median(lengths))
    ids = np.full((32, width), 2000, dtype=np.int64)
    ids[:, 0], ids[:, -1] = 101, 102
    default_session = embedder.session
    with tempfile.TemporaryDirectory(prefix="ragline-bench-prof-") as tmp:
        embedder.session = rag_embed.onnx_session(embedder.model_file, THREADS, profile=str(Path(tmp) / "prof"))
        try:
            for _ in range(3):
                embedder.run_batch(ids, np.ones_like(ids))
            events = json.loads(Path(embedder.session.end_profiling()).read_text())
        finally:
            embedder.session = default_session
    per_op: dict[str, float] = {}
    for event in events:
        if event.get("cat") == "Node" and event.get("name", "").endswith("_kernel_time"):
            op = event["args"]["op_name"]
            per_op[op] = per_op.get(op, 0.0) + event["dur"] / 3 / 1000
    total = sum(per_op.values())
    top = sorted(per_op.items(), key=lambda kv: -kv[1])
    return {
        "batch": 32,
        "width": width,
        "ms_per_batch": round(total, 1),
        "share": {op: round(ms / total, 3) for op, ms in top[:10]},
        "int8_kernels": sorted(op for op in per_op if "Integer" in op or op.startswith(("QLinear", "DynamicQuantize", "QAttention"))),
    }


# --------------------------------------------------------------------------- the sentence-transformers peer


def st_python() -> tuple[str | None, str]:
    """The interpreter for sentence-transformers, and why (or why not)."""
    explicit = os.environ.get("RAG_BENCH_ST_PYTHON")
    if explicit:
        return explicit, "RAG_BENCH_ST_PYTHON"
    if importlib.util.find_spec("sentence_transformers") is not None:
        return sys.executable, "this interpreter imports sentence_transformers"
    return None, "skipped: set RAG_BENCH_ST_PYTHON to an interpreter with torch and sentence-transformers (they are not bench dependencies)"


def st_command(python: str, st_dir: Path, texts_file: Path, out: Path) -> list[str]:
    """One run of bench/st_embed.py over the texts, with THREADS torch threads."""
    return [python, str(HERE / "st_embed.py"), str(st_dir), str(texts_file), str(out), "--runs", "1", "--threads", str(THREADS)]


def headline(embedder: Any, texts: list[str], sizes: dict[str, Any], notes: list[str]) -> dict[str, Any]:
    """rag-embed and sentence-transformers on the same texts, their runs interleaved.

    Returns rag's seconds, CPU seconds and last vectors, and (where the peer ran)
    its seconds, CPU seconds, st_embed.py's info and its vectors.
    """
    python, why = st_python()
    st_dir = Path(os.environ.get("MINILM_ST_DIR", "/tmp/st-minilm"))
    if python and not (st_dir / "modules.json").is_file():
        python, why = None, f"skipped: {st_dir} is not a sentence-transformers model folder (set MINILM_ST_DIR)"
    runs: dict[str, Any] = {"rag_seconds": [], "rag_cpu": [], "st_seconds": [], "st_cpu": [], "st_info": {}, "st_vectors": None}
    runs["why"] = why
    embedder.embed(texts[:32])  # warm-up
    with tempfile.TemporaryDirectory(prefix="ragline-bench-st-") as tmp:
        texts_file = Path(tmp) / "texts.json"
        texts_file.write_text(json.dumps(texts), encoding="utf-8")
        for run in range(sizes["embed_runs"]):
            seconds, runs["rag_vectors"] = quiet(lambda: embedder.embed(texts))
            runs["rag_seconds"].append(seconds)
            runs["rag_cpu"].append(QUIET.last_cpu)
            if python and run < sizes["st_runs"]:
                cmd = st_command(python, st_dir, texts_file, Path(tmp) / "st")
                _, done = quiet(
                    lambda cmd=cmd: subprocess.run(cmd, capture_output=True, text=True, env=child_env(OMP_NUM_THREADS=str(THREADS)))
                )
                if done.returncode != 0:
                    tail = (done.stderr.strip().splitlines() or ["failed"])[-1]
                    notes.append(f"sentence-transformers run failed: {tail}")
                    python = None
                    continue
                runs["st_info"] = json.loads((Path(tmp) / "st.json").read_text())
                runs["st_seconds"].extend(runs["st_info"]["seconds"])
                runs["st_cpu"].extend(runs["st_info"]["cpu_seconds"])
                runs["st_vectors"] = np.load(Path(tmp) / "st.npy")
    return runs


# --------------------------------------------------------------------------- the section


def run(sizes: dict[str, Any]) -> dict[str, Any]:
    """rag-embed (OnnxEmbedder) against sentence-transformers on the same chunks; the physical limit; ablations."""
    fig: dict[str, Any] = {}
    notes: list[str] = []
    targets: list[dict[str, Any]] = []
    texts = embed_texts_of(workload(sizes["embed_texts"]))
    embedder = rag_embed.load_embedder(MODEL, threads=THREADS, batch_size=rag_embed.BATCH_SIZE)
    lengths = [len(e.ids) for e in embedder.tokenizer.encode_batch(texts)]  # truncated at 256, [CLS]/[SEP] included
    tokens = sum(lengths)
    fig["workload"] = {
        "texts": len(texts),
        "tokens": tokens,
        "tokens_mean": round(tokens / len(texts), 1),
        "tokens_p10_p50_p90": [int(x) for x in np.percentile(lengths, [10, 50, 90])],
        "truncated_at_256": sum(1 for n in lengths if n >= embedder.max_tokens),
        "source": "rag-chunk chunks of corpus/ and eng-practices/docs, heading path joined, cycled with sentences rotated",
    }

    limit = physical_limit(fig, sizes, lengths)
    runs = headline(embedder, texts, sizes, notes)
    rag_seconds, st_seconds, st_info = runs["rag_seconds"], runs["st_seconds"], runs["st_info"]
    rag_tps = tokens / median(rag_seconds)
    fig["rag_embed"] = {
        "tokens_per_s": round(rag_tps),
        "texts_per_s": round(len(texts) / median(rag_seconds), 1),
        "seconds": [round(s, 2) for s in rag_seconds],
        "cpu_seconds": [round(s, 2) for s in runs["rag_cpu"]],
        "best_tokens_per_s": round(tokens / min(rag_seconds)),
        "threads": THREADS,
        "batch_size": rag_embed.BATCH_SIZE,
        "model": f"{MODEL} ONNX {embedder.model_file.name} ({embedder.sha256[:12]}...)",
        "weights": embedder.weights,
        "share_of_limit": round(rag_tps / limit, 3),
    }
    targets.append(
        target(
            "embed", "rag-embed share of the sgemm limit", rag_tps / limit, ">=", 0.65, "x", "tokens/s / (sgemm GFLOP/s / FLOPs per token)"
        )
    )
    if runs["st_vectors"] is not None:
        st_tps = st_info["tokens"] / median(st_seconds)
        cosines = np.sum(runs["rag_vectors"] * runs["st_vectors"], axis=1)
        fig["sentence_transformers"] = {
            "tokens_per_s": round(st_tps),
            "tokens_counted": st_info["tokens"],
            "seconds": [round(s, 2) for s in st_seconds],
            "cpu_seconds": [round(s, 2) for s in runs["st_cpu"]],
            "best_tokens_per_s": round(st_info["tokens"] / min(st_seconds)),
            "threads": st_info["threads"],
            "batch_size": st_info["batch_size"],
            "versions": st_info["versions"],
            "share_of_limit": round(st_tps / limit, 3),
        }
        fig["ratio_rag_over_st"] = round(rag_tps / st_tps, 3)
        fig["cosine_rag_vs_st"] = {
            "mean": round(float(cosines.mean()), 5),
            "min": round(float(cosines.min()), 5),
            "p01": round(float(np.percentile(cosines, 1)), 5),
        }
        if st_info["tokens"] != tokens:
            notes.append(f"token counts differ: ragline's tokenizer {tokens}, sentence-transformers' {st_info['tokens']}")
        targets.append(target("embed", "rag-embed tokens/s over sentence-transformers", rag_tps / st_tps, ">=", 1.5, "x"))
    else:
        fig["sentence_transformers"] = None
        notes.append(f"sentence-transformers comparison {runs['why']}")
        targets.append(target("embed", "rag-embed tokens/s over sentence-transformers", None, ">=", 1.5, "x", runs["why"]))
    fig["kernel_profile"] = kernel_profile(embedder, lengths)
    if not fig["kernel_profile"]["int8_kernels"]:
        notes.append(
            "no int8 kernel runs: the shipped file stores its weights as int8 and onnxruntime folds the dequantisation "
            "into float32 constants when it opens a session, so every MatMul runs in fp32. rag-embed loads the float32 "
            "file derived from it at fetch time (models.derive_fp32), which skips that folding at every start and "
            "runs each layer's attention as one fused operator; the cosine gap to sentence-transformers is the int8 "
            "rounding of the weights, which the derived file keeps."
        )
    fig["ablations"] = ablate(embedder, texts[: sizes["ablate_texts"]], sizes["ablate_runs"])
    derived = fig["ablations"]["configs"].get(INT8_LABEL)
    if derived is not None:
        targets.append(
            target(
                "embed",
                "derived fp32 file's vectors vs the int8 file's, min cosine",
                derived["min_cosine_vs_default"],
                ">=",
                0.9999,
                "",
                f"{fig['ablations']['texts']} workload texts",
            )
        )
    fig["session_start"] = session_starts(embedder)
    return {"figures": fig, "targets": targets, "notes": notes}


def session_starts(embedder: Any, runs: int = 3) -> dict[str, Any]:
    """Seconds to open an onnxruntime session (THREADS threads, rag_embed.OPTIMIZATION) on the derived
    float32 file and on the int8 file as shipped, median of `runs`, interleaved."""
    files = {"fp32": embedder.model_file, "int8": embedder.folder / "model.onnx"}
    seconds: dict[str, list[float]] = {name: [] for name in files}
    for _ in range(runs):
        for name, file in files.items():
            seconds[name].append(quiet(lambda file=file: rag_embed.onnx_session(file, THREADS))[0])
    return {name: {"file": files[name].name, "seconds": round(median(s), 3)} for name, s in seconds.items()}


# --------------------------------------------------------------------------- ablations


def embed_unsorted(embedder: Any, texts: list[str]) -> np.ndarray:
    """OnnxEmbedder.embed without the length sort: batches in input order (the ablation)."""
    encodings = embedder.tokenizer.encode_batch(texts)
    out = np.empty((len(texts), embedder.dim), dtype=np.float32)
    batches = []
    for start in range(0, len(texts), embedder.batch_size):
        rows = list(range(start, min(start + embedder.batch_size, len(texts))))
        batches.append((rows, *rag_embed.padded([encodings[i].ids for i in rows])))
    for (rows, _, _), vectors in zip(batches, embedder.run_batches(batches), strict=True):
        out[rows] = vectors
    return rag_embed.normalise(out)


def padded_tokens(lengths: list[int], batch: int, sort: bool) -> int:
    """Token slots the model computes (padding included) for this batching."""
    order = sorted(lengths) if sort else lengths
    return sum(max(order[i : i + batch]) * len(order[i : i + batch]) for i in range(0, len(order), batch))


def with_attribute(embedder: Any, texts: list[str], name: str, value: Any) -> Callable[[], Any]:
    """A run of embedder.embed(texts) with one attribute (batch_size, session) changed for its duration."""

    def run() -> Any:
        default = getattr(embedder, name)
        setattr(embedder, name, value)
        try:
            return embedder.embed(texts)
        finally:
            setattr(embedder, name, default)

    return run


def ablate(embedder: Any, texts: list[str], runs: int) -> dict[str, Any]:
    """tokens/s of one change at a time against the default (length-sorted, 2 threads, rag_embed.BATCH_SIZE).

    Configurations run round-robin, `runs` rounds, median per configuration. Also
    measured: the onnxruntime graph-optimisation level (rag_embed uses rag_embed.OPTIMIZATION), and the
    int8 file as shipped against the float32 file derived from it (rag_embed's default).
    `tokens_per_cpu_s` is the figure other processes disturb least, for the
    one-thread configuration.
    """
    one = rag_embed.load_embedder(MODEL, threads=1, batch_size=rag_embed.BATCH_SIZE)
    int8 = rag_embed.load_embedder(MODEL, threads=THREADS, batch_size=rag_embed.BATCH_SIZE, weights="int8")
    lengths = [len(e.ids) for e in embedder.tokenizer.encode_batch(texts)]
    tokens = sum(lengths)
    sessions = {
        level: rag_embed.onnx_session(embedder.model_file, embedder.intra_threads, optimization=level) for level in ("extended", "all")
    }
    batches = variant(embedder, spread="batches")
    unfused_dir = tempfile.TemporaryDirectory(prefix="ragline-bench-unfused-")
    models.dequantise(embedder.folder / models.SOURCE_FILE, Path(unfused_dir.name) / "unfused.onnx")
    unfused = variant(embedder, model_file=Path(unfused_dir.name) / "unfused.onnx")
    configs: dict[str, Callable[[], Any]] = {
        DEFAULT_LABEL: lambda: embedder.embed(texts),
        "unsorted (input order)": lambda: embed_unsorted(embedder, texts),
        "1 thread": lambda: one.embed(texts),
        BATCHES_LABEL: lambda: batches.embed(texts),
        UNFUSED_LABEL: lambda: unfused.embed(texts),
        "batch 32 (the earlier default)": with_attribute(embedder, texts, "batch_size", 32),
        "batch 128": with_attribute(embedder, texts, "batch_size", 128),
        "ORT_ENABLE_EXTENDED graph optimisation": with_attribute(embedder, texts, "session", sessions["extended"]),
        "ORT_ENABLE_ALL graph optimisation (the earlier default)": with_attribute(embedder, texts, "session", sessions["all"]),
    }
    if int8.model_file != embedder.model_file:
        configs[INT8_LABEL] = lambda: int8.embed(texts)
    padded = {
        DEFAULT_LABEL: padded_tokens(lengths, rag_embed.BATCH_SIZE, True),
        "unsorted (input order)": padded_tokens(lengths, rag_embed.BATCH_SIZE, False),
        "batch 32 (the earlier default)": padded_tokens(lengths, 32, True),
        "batch 128": padded_tokens(lengths, 128, True),
    }
    for fn in configs.values():
        fn()  # warm-up
    seconds: dict[str, list[float]] = {name: [] for name in configs}
    cpu: dict[str, list[float]] = {name: [] for name in configs}
    reference = embedder.embed(texts)
    agreement: dict[str, float] = {}
    identical: dict[str, bool] = {}
    for _ in range(runs):
        for name, fn in configs.items():
            s, vectors = quiet(fn)
            seconds[name].append(s)
            cpu[name].append(QUIET.last_cpu)
            agreement[name] = float(np.sum(vectors * reference, axis=1).min())
            identical[name] = bool(np.array_equal(vectors, reference))
    base = tokens / median(seconds[DEFAULT_LABEL])
    out: dict[str, Any] = {"texts": len(texts), "tokens": tokens, "runs": runs, "configs": {}}
    for name in configs:
        tps = tokens / median(seconds[name])
        out["configs"][name] = {
            "tokens_per_s": round(tps),
            "vs_default": round(tps / base, 3),
            "best_tokens_per_s": round(tokens / min(seconds[name])),
            "tokens_per_cpu_s": round(tokens / median(cpu[name])),
            "padding_share": round(1 - tokens / padded[name], 3) if name in padded else None,
            "min_cosine_vs_default": round(agreement[name], 6),
            "identical_to_default": identical[name],
        }
    unfused_dir.cleanup()
    return out


def variant(embedder: Any, spread: str | None = None, model_file: Path | None = None) -> Any:
    """A copy of an OnnxEmbedder with its threads spread another way or another model file, and
    its own session (opened on first use)."""
    return rag_embed.OnnxEmbedder(
        embedder.folder,
        rag_embed.describe(embedder.folder),
        threads=embedder.threads,
        batch_size=embedder.batch_size,
        long=embedder.long,
        model_file=model_file or embedder.model_file,
        spread=spread or embedder.spread,
    )


# --------------------------------------------------------------------------- the report


def render(f: dict[str, Any]) -> list[str]:
    """The section's lines of results/bench.md: the headline table and the ablations."""
    st = f.get("sentence_transformers") or {}
    w = f["workload"]
    lines = [
        "",
        f"**Embedding** {w['texts']:,} chunks, {w['tokens']:,} tokens (mean {w['tokens_mean']}, truncated at 256), "
        f"{THREADS} threads, batch {rag_embed.BATCH_SIZE}, median of {len(f['rag_embed']['seconds'])} runs.",
        "",
        "| | tokens/s | share of limit | cosine vs sentence-transformers (mean / min) |",
        "|---|---|---|---|",
        f"| rag-embed (onnxruntime, {f['rag_embed'].get('weights', 'int8')} file) | {fmt(f['rag_embed']['tokens_per_s'])} | "
        f"{fmt(f['rag_embed']['share_of_limit'], 2)} | "
        + (f"{f['cosine_rag_vs_st']['mean']:.4f} / {f['cosine_rag_vs_st']['min']:.4f} |" if st else "- |"),
        f"| sentence-transformers (torch fp32) | {fmt(st.get('tokens_per_s'))} | {fmt(st.get('share_of_limit'), 2)} | |",
        f"| limit: sgemm {f['sgemm']['all_threads']['gflops']} GFLOP/s / "
        f"{f['flops_per_token']['workload_weighted'] / 1e6:.1f} MFLOP per token | {fmt(f['limit_tokens_per_s'])} | 1.00 | |",
        "",
        f"| Ablation, {f['ablations']['texts']} texts (one change from the default) | tokens/s | vs default | best run | "
        "tokens per CPU-second | padding | same vectors |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, c in f["ablations"]["configs"].items():
        pad = "-" if c["padding_share"] is None else f"{c['padding_share']:.0%}"
        same = "identical" if c.get("identical_to_default") else f"min cos {c['min_cosine_vs_default']:.6f}"
        lines.append(
            f"| {name} | {fmt(c['tokens_per_s'])} | {c['vs_default']:.2f}x | {fmt(c.get('best_tokens_per_s'))} | "
            f"{fmt(c.get('tokens_per_cpu_s'))} | {pad} | {same} |"
        )
    if f.get("session_start"):
        s = f["session_start"]
        lines += [
            "",
            f"| Session start (onnxruntime, graph optimisation {rag_embed.OPTIMIZATION}) | seconds |",
            "|---|---|",
            *(f"| {v['file']} ({k}) | {v['seconds']:.3f} |" for k, v in s.items()),
        ]
    return lines
