"""ragline benchmarks: speed, memory and agreement against reference tools, with targets.

    python3 bench/run.py                  # everything (about 15 minutes on 2 quiet cores)
    python3 bench/run.py --quick          # a smoke run (about 2 minutes)
    python3 bench/run.py --only dense,bm25
    python3 bench/run.py --wait-idle 60   # on a shared machine: time only quiet moments
    python3 bench/run.py --render         # bench.md again from bench.json

Writes results/bench.json (the machine, every figure, every target with pass or
miss) and results/bench.md (the tables, generated from the JSON). With --only,
the other sections' figures are kept from the existing bench.json.

Sections (each a function `bench_<name>`):

    embed    rag-embed's OnnxEmbedder against sentence-transformers (fp32, torch CPU)
             on the same 1,000 chunks: tokens/s, ratio, cosine agreement; the CPU's
             sgemm rate and the model's FLOPs per token give the physical limit;
             ablations of length-sorted batching, threads and batch size
    cache    `rag-chunk corpus | rag-embed --cache F` cold against warm, identical output
    dense    `vectors @ q` + rag_search.topk against faiss IndexFlatIP at 100k and 1M
             rows: latency, batch throughput, top-10 equality, peak RSS of a process
             that memory-maps the vectors; float16 storage and its recall@10
    bm25     rag_index.build_bm25 / Bm25.scores + topk against bm25s (lucene, k1 1.2,
             b 0.75, the same tokens) on 100,000 Zipfian documents
    startup  `rag-chunk --help`, `rag-eval --help` wall time; no onnxruntime at --help
    shard    `parallel --pipe -k -N 200 rag-embed --threads 1` against one process
             with 2 threads: identical output, speed-up

Every figure is the median of several runs; every ratio divides two medians taken
in the same invocation, with the two sides' runs interleaved so that load from
other processes hits both. Each section records how much CPU other processes
used while it ran (`load.others_cores`): on a shared 2-core machine that is the
first thing to check when a figure looks wrong.

sentence-transformers and torch are not bench dependencies: the comparison runs
bench/st_embed.py under $RAG_BENCH_ST_PYTHON (default: this interpreter if it can
import sentence_transformers; otherwise the comparison is skipped and bench.json
says so), with the fp32 model folder $MINILM_ST_DIR (default /tmp/st-minilm; see
tests/fixtures/make_reference_vectors.py for where it comes from).
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import os
import platform
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
import rag_embed  # noqa: E402 - light: onnxruntime is imported only when a model loads

HERE = Path(__file__).resolve().parent
SCHEMA = "ragline-bench/1"
THREADS = 2  # onnxruntime and torch threads in the embedding comparison, for fairness
MODEL = "all-MiniLM-L6-v2"
DEFAULT_LABEL = f"default (sorted, 2 threads, batch {rag_embed.BATCH_SIZE})"
CORPORA = [ROOT / "corpus", ROOT.parent / "shared" / "corpora" / "eng-practices" / "docs"]
DIM = 384
K = 10
# The MiniLM embedding steps of `just eval` (justfile `eval` -> `_run`): (rag-chunk --words, rag-embed flags).
# Nine configurations re-embed the default chunking unchanged (no-rerank, hybrid, bm25, answer-no-* x 5).
EVAL_EMBEDS: list[tuple[int, str]] = [
    (180, ""),
    (180, ""),
    (180, "--no-headings"),
    (180, "--long truncate"),
    (180, ""),
    (180, ""),
    (120, ""),
    (300, ""),
    *[(180, "")] * 5,
]


# --------------------------------------------------------------------------- sizes


FULL: dict[str, Any] = {
    "embed_texts": 1000,
    "embed_runs": 3,
    "st_runs": 2,
    "ablate_texts": 128,
    "ablate_runs": 3,
    "gemm_n": 2048,
    "gemm_runs": 5,
    "cache_runs": 3,
    "eval_like_steps": len(EVAL_EMBEDS),
    "eval_like_runs": 2,
    "dense_sizes": [100_000, 1_000_000],
    "dense_single": {100_000: 50, 1_000_000: 15},
    "dense_batches": {100_000: 5, 1_000_000: 3},
    "bm25_docs": 100_000,
    "bm25_queries": 1000,
    "bm25_runs": 3,
    "bm25_build_runs": 2,
    "startup_runs": 10,
    "shard_records": 400,
    "shard_block": 200,
    "shard_runs": 2,
}
QUICK: dict[str, Any] = {
    "embed_texts": 32,
    "embed_runs": 1,
    "st_runs": 1,
    "ablate_texts": 16,
    "ablate_runs": 1,
    "gemm_n": 1024,
    "gemm_runs": 3,
    "cache_runs": 1,
    "eval_like_steps": 3,
    "eval_like_runs": 1,
    "dense_sizes": [20_000],
    "dense_single": {20_000: 10},
    "dense_batches": {20_000: 2},
    "bm25_docs": 5_000,
    "bm25_queries": 100,
    "bm25_runs": 2,
    "bm25_build_runs": 1,
    "startup_runs": 3,
    "shard_records": 100,
    "shard_block": 50,
    "shard_runs": 1,
}


# --------------------------------------------------------------------------- helpers


def median(values: list[float]) -> float:
    return float(statistics.median(values))


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    start = time.perf_counter()
    result = fn()
    return time.perf_counter() - start, result


def target(section: str, name: str, value: float | None, op: str, threshold: float, unit: str = "", why: str = "") -> dict[str, Any]:
    """One target: value `op` threshold. `margin` is value / threshold (>= 1 passes for >=, <= 1 for <=)."""
    if value is None:
        return {"section": section, "name": name, "value": None, "op": op, "threshold": threshold, "unit": unit, "pass": None, "why": why}
    ok = value >= threshold if op == ">=" else value <= threshold
    return {
        "section": section,
        "name": name,
        "value": round(float(value), 4),
        "op": op,
        "threshold": threshold,
        "unit": unit,
        "pass": bool(ok),
        "margin": round(float(value) / threshold, 3) if threshold else None,
        "why": why,
    }


def _cpu_jiffies() -> tuple[int, int, int]:
    """(busy, idle, steal) jiffies of the whole machine from /proc/stat."""
    try:
        with open("/proc/stat") as handle:
            parts = [int(x) for x in handle.readline().split()[1:]]
    except OSError:
        return 0, 0, 0
    user, nice, system, idle, iowait, irq, softirq, steal = (parts + [0] * 8)[:8]
    return user + nice + system + irq + softirq, idle + iowait, steal


def _own_cpu() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


@contextmanager
def load_meter(out: dict[str, Any]) -> Iterator[None]:
    """Record how many cores' worth of CPU other processes used while the block ran."""
    hz = os.sysconf("SC_CLK_TCK")
    busy0, _, steal0 = _cpu_jiffies()
    own0, wall0 = _own_cpu(), time.perf_counter()
    try:
        yield
    finally:
        busy1, _, steal1 = _cpu_jiffies()
        wall = time.perf_counter() - wall0
        others = (busy1 - busy0) / hz - (_own_cpu() - own0)
        out["load"] = {
            "seconds": round(wall, 2),
            "others_cores": round(max(0.0, others) / wall, 2) if wall > 0 else None,
            "steal_cores": round((steal1 - steal0) / hz / wall, 2) if wall > 0 else None,
            "loadavg_after": [round(x, 2) for x in os.getloadavg()],
        }


def wait_idle(max_wait: float, threshold: float = 0.2) -> float:
    """Wait (at most max_wait s) until other processes use < threshold cores; returns the last reading."""
    hz = os.sysconf("SC_CLK_TCK")
    deadline = time.monotonic() + max_wait
    while True:
        busy0, _, _ = _cpu_jiffies()
        own0 = _own_cpu()
        time.sleep(0.5)
        busy1, _, _ = _cpu_jiffies()
        others = (busy1 - busy0) / hz - (_own_cpu() - own0)
        if others / 0.5 < threshold or time.monotonic() >= deadline:
            return round(max(0.0, others / 0.5), 2)


class Quiet:
    """How `quiet` runs timed work: wait for other processes to go quiet, redo a disturbed run.

    With max_wait 0 (the default) runs are taken as they come; each is still logged
    with the CPU other processes used meanwhile, so a disturbed figure shows.
    """

    def __init__(self) -> None:
        self.max_wait = 0.0
        self.threshold = 0.2  # cores used by other processes that count as a disturbance
        self.retries = 2
        self.log: list[float] = []
        self.redone = 0
        self.last_cpu = 0.0  # this process's (and its reaped children's) CPU seconds in the last run

    def reset(self) -> dict[str, Any]:
        summary = {
            "timed_runs": len(self.log),
            "redone": self.redone,
            "others_cores_max": round(max(self.log), 2) if self.log else None,
            "others_cores_median": round(median(self.log), 2) if self.log else None,
        }
        self.log, self.redone = [], 0
        return summary


QUIET = Quiet()


def quiet(fn: Callable[[], Any]) -> tuple[float, Any]:
    """timed(fn), started when other processes are quiet (--wait-idle) and redone if they were not."""
    for attempt in range(QUIET.retries + 1):
        if QUIET.max_wait > 0:
            wait_idle(QUIET.max_wait, QUIET.threshold)
        meter: dict[str, Any] = {}
        cpu0 = _own_cpu()
        with load_meter(meter):
            seconds, result = timed(fn)
        QUIET.last_cpu = _own_cpu() - cpu0
        others = meter["load"]["others_cores"] or 0.0
        if QUIET.max_wait <= 0 or others < QUIET.threshold or attempt == QUIET.retries:
            QUIET.log.append(others)
            return seconds, result
        QUIET.redone += 1
    raise AssertionError("unreachable")


def bin_path(name: str) -> str:
    """A console script of this interpreter's environment (falls back to PATH)."""
    candidate = Path(sys.executable).parent / name
    return str(candidate) if candidate.exists() else (shutil.which(name) or name)


def maxrss_bytes() -> int:
    """Peak resident set size of this process, in bytes.

    VmHWM from /proc/self/status where there is one: Linux's ru_maxrss survives
    exec, so a worker started by a big parent reports the parent's peak (a 20,000
    x 384 matrix "used" 4 GB); VmHWM belongs to the process's own address space.
    Elsewhere ru_maxrss (KiB on Linux, bytes on macOS).
    """
    try:
        status = Path("/proc/self/status").read_text()
        found = re.search(r"^VmHWM:\s+(\d+) kB", status, re.M)
        if found:
            return int(found.group(1)) * 1024
    except OSError:
        pass
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(rss if sys.platform == "darwin" else rss * 1024)


def child_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(extra)
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    return env


# --------------------------------------------------------------------------- the machine


def machine() -> dict[str, Any]:
    """Cores, CPU model, memory, numpy's BLAS (numpy.show_config and threadpoolctl), versions."""
    info: dict[str, Any] = {
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "cores": os.cpu_count(),
        "cores_usable": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
    }
    try:
        cpuinfo = Path("/proc/cpuinfo").read_text()
        model = re.search(r"^model name\s*:\s*(.+)$", cpuinfo, re.M)
        info["cpu"] = model.group(1).strip() if model else platform.processor()
        flags = set((re.search(r"^flags\s*:\s*(.+)$", cpuinfo, re.M) or re.search("(.*)", "")).group(1).split())
        info["cpu_flags"] = sorted(flags & {"avx", "avx2", "fma", "f16c", "avx512f", "avx512_vnni", "avx_vnni", "avx512_bf16", "amx_int8"})
        info["hypervisor"] = "hypervisor" in flags
        mhz = re.search(r"^cpu MHz\s*:\s*(.+)$", cpuinfo, re.M)
        info["cpu_mhz"] = float(mhz.group(1)) if mhz else None
    except OSError:
        info["cpu"] = platform.processor()
    try:
        meminfo = Path("/proc/meminfo").read_text()
        info["memory_gib"] = round(int(re.search(r"MemTotal:\s+(\d+)", meminfo).group(1)) / 2**20, 1)  # type: ignore[union-attr]
    except (OSError, AttributeError):
        pass
    info["numpy"] = np.__version__
    try:
        config = np.show_config(mode="dicts")
        blas = config["Build Dependencies"]["blas"]
        info["numpy_blas"] = {k: blas.get(k) for k in ("name", "version", "openblas configuration")}
    except Exception as err:  # older numpy has no mode="dicts"
        info["numpy_blas"] = {"error": str(err)}
    try:
        from threadpoolctl import threadpool_info

        info["threadpools"] = [
            {k: p.get(k) for k in ("user_api", "internal_api", "version", "architecture", "num_threads", "threading_layer")}
            for p in threadpool_info()
        ]
    except ImportError:
        info["threadpools"] = "threadpoolctl is not installed (pip install -e '.[bench]')"
    versions: dict[str, str | None] = {}
    for name in ("onnxruntime", "tokenizers", "faiss", "bm25s", "scipy", "orjson"):
        try:
            module = __import__(name)
            versions[name] = getattr(module, "__version__", "?")
        except ImportError:
            versions[name] = None
    info["versions"] = versions
    info["parallel"] = _first_line([shutil.which("parallel") or "parallel", "--version"])
    return info


def _first_line(cmd: list[str]) -> str | None:
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return (done.stdout.strip().splitlines() or [None])[0]


# --------------------------------------------------------------------------- the workload


def chunk_records() -> list[dict[str, Any]]:
    """The chunk records of the handbook corpus and the eng-practices docs (where present)."""
    import rag_chunk

    paths = [str(p) for p in CORPORA if p.exists()]
    return list(rag_chunk.chunk_paths(paths))


_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[A-Z`*\[(\"'])")


def workload(n: int) -> list[dict[str, Any]]:
    """n realistic chunk records: the real chunks, then copies with their sentences rotated.

    Copy c of a chunk rotates its sentences by c (so texts differ but keep their
    length and vocabulary) and ends with " (rev c)". Ids are `<id>~c`.
    """
    base = chunk_records()
    out: list[dict[str, Any]] = []
    copy = 0
    while len(out) < n:
        for record in base:
            if len(out) >= n:
                break
            text = record["text"]
            if copy:
                parts = _SENTENCE.split(text)
                shift = copy % len(parts)
                text = " ".join(parts[shift:] + parts[:shift]) + f" (rev {copy})"
            out.append({"id": f"{record['id']}~{copy}", "headings": record.get("headings") or [], "text": text})
        copy += 1
    return out


def embed_texts_of(records: list[dict[str, Any]]) -> list[str]:
    """The texts rag-embed embeds for these records (heading path joined, as by default)."""
    import rag_embed

    return [rag_embed.record_text(r, "bench", "text", False, True) for r in records]


# --------------------------------------------------------------------------- embed


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


def _embed_unsorted(embedder: Any, texts: list[str]) -> np.ndarray:
    """OnnxEmbedder.embed without the length sort: batches in input order (the ablation)."""
    import rag_embed

    encodings = embedder.tokenizer.encode_batch(texts)
    out = np.empty((len(texts), embedder.dim), dtype=np.float32)
    for start in range(0, len(texts), embedder.batch_size):
        rows = list(range(start, min(start + embedder.batch_size, len(texts))))
        width = max(len(encodings[i].ids) for i in rows)
        ids = [encodings[i].ids + [0] * (width - len(encodings[i].ids)) for i in rows]
        masks = [[1] * len(encodings[i].ids) + [0] * (width - len(encodings[i].ids)) for i in rows]
        out[rows] = embedder._run(ids, masks)
    return rag_embed.normalise(out)


def _padded_tokens(lengths: list[int], batch: int, sort: bool) -> int:
    """Token slots the model computes (padding included) for this batching."""
    order = sorted(lengths) if sort else lengths
    return sum(max(order[i : i + batch]) * len(order[i : i + batch]) for i in range(0, len(order), batch))


def kernel_profile(folder: Path, threads: int, lengths: list[int]) -> dict[str, Any]:
    """onnxruntime's own per-operator time for one 32-text batch of the workload's median length.

    Shows what really runs: an int8 model whose weights are only stored in int8 runs
    float32 MatMul after onnxruntime constant-folds the dequantisation; a model that
    computes in int8 shows MatMulInteger / DynamicQuantizeLinear / QAttention.
    """
    import onnxruntime as ort

    with tempfile.TemporaryDirectory(prefix="ragline-bench-prof-") as tmp:
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.log_severity_level = 3
        options.enable_profiling = True
        options.profile_file_prefix = str(Path(tmp) / "prof")
        session = ort.InferenceSession(str(folder / "model.onnx"), options, providers=["CPUExecutionProvider"])
        width = int(np.median(lengths))
        ids = np.full((32, width), 2000, dtype=np.int64)
        ids[:, 0], ids[:, -1] = 101, 102
        feed = {"input_ids": ids, "attention_mask": np.ones_like(ids)}
        if "token_type_ids" in {i.name for i in session.get_inputs()}:
            feed["token_type_ids"] = np.zeros_like(ids)
        for _ in range(3):
            session.run(None, feed)
        events = json.loads(Path(session.end_profiling()).read_text())
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


def st_python() -> tuple[str | None, str]:
    """The interpreter for sentence-transformers, and why (or why not)."""
    explicit = os.environ.get("RAG_BENCH_ST_PYTHON")
    if explicit:
        return explicit, "RAG_BENCH_ST_PYTHON"
    if importlib.util.find_spec("sentence_transformers") is not None:
        return sys.executable, "this interpreter imports sentence_transformers"
    return None, "skipped: set RAG_BENCH_ST_PYTHON to an interpreter with torch and sentence-transformers (they are not bench dependencies)"


def bench_embed(sizes: dict[str, Any]) -> dict[str, Any]:
    """rag-embed (OnnxEmbedder) against sentence-transformers on the same chunks; the physical limit; ablations."""
    import rag_embed

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

    # the physical limit
    gemm = sgemm_rate(sizes["gemm_n"], sizes["gemm_runs"])
    gemm1 = sgemm_rate(sizes["gemm_n"], sizes["gemm_runs"], threads=1)
    flops_128 = minilm_flops_per_token(128)
    flops_workload = sum(n * minilm_flops_per_token(n) for n in lengths) / tokens
    limit = gemm["gflops"] * 1e9 / flops_workload
    fig["sgemm"] = {"all_threads": gemm, "one_thread": gemm1}
    fig["flops_per_token"] = {"at_128": flops_128, "workload_weighted": round(flops_workload)}
    fig["limit_tokens_per_s"] = round(limit)
    fig["limit_tokens_per_s_at_128"] = round(gemm["gflops"] * 1e9 / flops_128)

    # headline: rag-embed and sentence-transformers, runs interleaved
    python, why = st_python()
    st_dir = Path(os.environ.get("MINILM_ST_DIR", "/tmp/st-minilm"))
    if python and not (st_dir / "modules.json").is_file():
        python, why = None, f"skipped: {st_dir} is not a sentence-transformers model folder (set MINILM_ST_DIR)"
    rag_seconds: list[float] = []
    rag_cpu: list[float] = []
    st_seconds: list[float] = []
    st_cpu: list[float] = []
    st_info: dict[str, Any] = {}
    embedder.embed(texts[:32])  # warm-up
    with tempfile.TemporaryDirectory(prefix="ragline-bench-st-") as tmp:
        texts_file = Path(tmp) / "texts.json"
        texts_file.write_text(json.dumps(texts), encoding="utf-8")
        st_vectors = None
        for run in range(sizes["embed_runs"]):
            seconds, rag_vectors = quiet(lambda: embedder.embed(texts))
            rag_seconds.append(seconds)
            rag_cpu.append(QUIET.last_cpu)
            if python and run < sizes["st_runs"]:
                cmd = [
                    python,
                    str(HERE / "st_embed.py"),
                    str(st_dir),
                    str(texts_file),
                    str(Path(tmp) / "st"),
                    "--runs",
                    "1",
                    "--threads",
                    str(THREADS),
                ]
                _, done = quiet(
                    lambda cmd=cmd: subprocess.run(cmd, capture_output=True, text=True, env=child_env(OMP_NUM_THREADS=str(THREADS)))
                )
                if done.returncode != 0:
                    tail = (done.stderr.strip().splitlines() or ["failed"])[-1]
                    notes.append(f"sentence-transformers run failed: {tail}")
                    python = None
                    continue
                st_info = json.loads((Path(tmp) / "st.json").read_text())
                st_seconds.extend(st_info["seconds"])
                st_cpu.extend(st_info["cpu_seconds"])
                st_vectors = np.load(Path(tmp) / "st.npy")
    rag_tps = tokens / median(rag_seconds)
    fig["rag_embed"] = {
        "tokens_per_s": round(rag_tps),
        "texts_per_s": round(len(texts) / median(rag_seconds), 1),
        "seconds": [round(s, 2) for s in rag_seconds],
        "cpu_seconds": [round(s, 2) for s in rag_cpu],
        "best_tokens_per_s": round(tokens / min(rag_seconds)),
        "threads": THREADS,
        "batch_size": rag_embed.BATCH_SIZE,
        "model": f"{MODEL} ONNX ({embedder.sha256[:12]}..., int8 weights)",
        "share_of_limit": round(rag_tps / limit, 3),
    }
    targets.append(
        target(
            "embed", "rag-embed share of the sgemm limit", rag_tps / limit, ">=", 0.5, "x", "tokens/s / (sgemm GFLOP/s / FLOPs per token)"
        )
    )
    if st_vectors is not None:
        st_tps = st_info["tokens"] / median(st_seconds)
        cosines = np.sum(rag_vectors * st_vectors, axis=1)
        fig["sentence_transformers"] = {
            "tokens_per_s": round(st_tps),
            "tokens_counted": st_info["tokens"],
            "seconds": [round(s, 2) for s in st_seconds],
            "cpu_seconds": [round(s, 2) for s in st_cpu],
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
        notes.append(f"sentence-transformers comparison {why}")
        targets.append(target("embed", "rag-embed tokens/s over sentence-transformers", None, ">=", 1.5, "x", why))
    fig["kernel_profile"] = kernel_profile(embedder.folder, THREADS, lengths)
    if not fig["kernel_profile"]["int8_kernels"]:
        notes.append(
            "the int8 model computes in float32: its weights are stored as int8 and onnxruntime constant-folds the "
            "dequantisation, so every MatMul runs in fp32 (no MatMulInteger kernel runs). The speed gap to torch is "
            "runtime overhead, not int8 arithmetic; the cosine gap is the int8 rounding of the weights."
        )
    fig["ablations"] = ablate(embedder, texts[: sizes["ablate_texts"]], sizes["ablate_runs"])
    return {"figures": fig, "targets": targets, "notes": notes}


def ablate(embedder: Any, texts: list[str], runs: int) -> dict[str, Any]:
    """tokens/s of one change at a time against the default (length-sorted, 2 threads, rag_embed.BATCH_SIZE).

    Configurations run round-robin, `runs` rounds, median per configuration. Also
    measured: the onnxruntime graph-optimisation level (rag_embed uses ORT_ENABLE_ALL).
    `tokens_per_cpu_s` is the figure other processes disturb least, for the
    one-thread configuration.
    """
    import onnxruntime as ort

    import rag_embed

    one = rag_embed.load_embedder(MODEL, threads=1, batch_size=rag_embed.BATCH_SIZE)
    lengths = [len(e.ids) for e in embedder.tokenizer.encode_batch(texts)]
    tokens = sum(lengths)

    def session(level: Any) -> Any:
        options = ort.SessionOptions()
        options.graph_optimization_level = level
        options.intra_op_num_threads = THREADS
        options.inter_op_num_threads = 1
        options.log_severity_level = 3
        return ort.InferenceSession(str(embedder.folder / "model.onnx"), options, providers=["CPUExecutionProvider"])

    default_session = embedder.session
    basic_session = session(ort.GraphOptimizationLevel.ORT_ENABLE_BASIC)

    default_batch = embedder.batch_size

    def with_batch(size: int) -> Callable[[], Any]:
        def run() -> Any:
            embedder.batch_size = size
            try:
                return embedder.embed(texts)
            finally:
                embedder.batch_size = default_batch

        return run

    def with_session(s: Any) -> Callable[[], Any]:
        def run() -> Any:
            embedder.session = s
            try:
                return embedder.embed(texts)
            finally:
                embedder.session = default_session

        return run

    configs: dict[str, Callable[[], Any]] = {
        DEFAULT_LABEL: lambda: embedder.embed(texts),
        "unsorted (input order)": lambda: _embed_unsorted(embedder, texts),
        "1 thread": lambda: one.embed(texts),
        "batch 32 (the earlier default)": with_batch(32),
        "batch 128": with_batch(128),
        "ORT_ENABLE_BASIC graph optimisation": with_session(basic_session),
    }
    padded = {
        DEFAULT_LABEL: _padded_tokens(lengths, rag_embed.BATCH_SIZE, True),
        "unsorted (input order)": _padded_tokens(lengths, rag_embed.BATCH_SIZE, False),
        "batch 32 (the earlier default)": _padded_tokens(lengths, 32, True),
        "batch 128": _padded_tokens(lengths, 128, True),
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
    return out


# --------------------------------------------------------------------------- cache


def golden_questions() -> list[dict[str, str]]:
    """Query records from golden.yaml (id, question): what an evaluation embeds on every run."""
    import yaml

    data = yaml.safe_load((ROOT / "golden.yaml").read_text(encoding="utf-8"))
    items = data.get("questions", []) if isinstance(data, dict) else []
    return [{"id": str(q["id"]), "question": str(q["question"])} for q in items if isinstance(q, dict) and "question" in q]


def bench_cache(sizes: dict[str, Any]) -> dict[str, Any]:
    """Cold against warm `rag-embed --cache F`: the handbook's chunks; `just eval`'s 13 embedding steps; the golden questions.

    eval_like runs EVAL_EMBEDS in order against one cache: cold starts from an empty
    cache (so the repeats inside one evaluation already hit), warm is the next
    evaluation. golden_questions is a small input, where start-up dominates.
    """
    fig: dict[str, Any] = {}
    targets: list[dict[str, Any]] = []
    notes: list[str] = []
    env = child_env(RAG_MODEL_HOME=os.environ.get("RAG_MODEL_HOME", ""))
    if not env["RAG_MODEL_HOME"]:
        env.pop("RAG_MODEL_HOME")
    embed = bin_path("rag-embed")
    chunk = bin_path("rag-chunk")
    with tempfile.TemporaryDirectory(prefix="ragline-bench-cache-") as tmp:
        questions = Path(tmp) / "questions.jsonl"
        questions.write_text("".join(json.dumps(q) + "\n" for q in golden_questions()), encoding="utf-8")
        eval_steps = " && ".join(
            f"{chunk} --words {words} {ROOT / 'corpus'} | {embed} --quiet {flags} --cache {{cache}}"
            for words, flags in EVAL_EMBEDS[: sizes["eval_like_steps"]]
        )
        cases = {
            "corpus": f"{chunk} {ROOT / 'corpus'} | {embed} --quiet --cache {{cache}}",
            "eval_like": eval_steps,
            "golden_questions": f"{embed} --quiet --query --cache {{cache}} < {questions}",
        }
        plain = {
            "corpus": f"{chunk} {ROOT / 'corpus'} | {embed} --quiet",
            "golden_questions": f"{embed} --quiet --query < {questions}",
        }
        for name, template in cases.items():
            cache = Path(tmp) / f"{name}.sqlite"
            cmd = template.format(cache=cache)
            cold: list[float] = []
            warm: list[float] = []
            outputs: list[bytes] = []
            for _ in range(sizes["eval_like_runs"] if name == "eval_like" else sizes["cache_runs"]):
                cache.unlink(missing_ok=True)
                s, out = quiet(lambda cmd=cmd: _shell(cmd, env))
                cold.append(s)
                outputs.append(out)
                s, out = quiet(lambda cmd=cmd: _shell(cmd, env))
                warm.append(s)
                outputs.append(out)
            reference = _shell(plain[name], env) if name in plain else None  # eval_like: the corpus case checks this
            fig[name] = {
                "records": outputs[0].count(b"\n"),
                "invocations": sizes["eval_like_steps"] if name == "eval_like" else 1,
                "cold_s": round(median(cold), 3),
                "warm_s": round(median(warm), 3),
                "speedup": round(median(cold) / median(warm), 2),
                "cold_runs": [round(s, 3) for s in cold],
                "warm_runs": [round(s, 3) for s in warm],
                "identical_output": all(o == outputs[0] for o in outputs),
                "identical_to_no_cache": None if reference is None else outputs[0] == reference,
            }
            targets.append(target("cache", f"warm over cold ({name})", median(cold) / median(warm), ">=", 3.0, "x"))
        # where a warm run's time goes: the model is loaded even when every vector is cached
        fig["warm_floor"] = _warm_floor(env)
    return {"figures": fig, "targets": targets, "notes": notes}


def _shell(cmd: str, env: dict[str, str]) -> bytes:
    done = subprocess.run(["bash", "-o", "pipefail", "-c", cmd], capture_output=True, env=env)
    if done.returncode != 0:
        raise RuntimeError(f"{cmd}: exit {done.returncode}: {done.stderr.decode(errors='replace').strip()[-300:]}")
    return done.stdout


def _warm_floor(env: dict[str, str]) -> dict[str, Any]:
    """Start-up costs a fully cached run still pays: interpreter + imports, hashing the model file, the ONNX session."""
    code = (
        "import time; t0 = time.perf_counter(); import rag_embed, onnxruntime, tokenizers; t1 = time.perf_counter(); "
        "f = rag_embed.model_home() / 'all-MiniLM-L6-v2'; rag_embed.sha256_file(f / 'model.onnx'); t2 = time.perf_counter(); "
        "rag_embed.load_embedder('all-MiniLM-L6-v2'); t3 = time.perf_counter(); "
        "import json; print(json.dumps({'imports_s': t1 - t0, 'sha256_s': t2 - t1, 'load_embedder_s': t3 - t2}))"
    )
    runs = []
    for _ in range(3):
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
        if done.returncode == 0:
            runs.append(json.loads(done.stdout))
    if not runs:
        return {}
    bare = [timed(lambda: subprocess.run([sys.executable, "-c", "pass"], env=env))[0] for _ in range(3)]
    floor = {k: round(median([r[k] for r in runs]), 3) for k in runs[0]}
    floor["interpreter_s"] = round(median(bare), 3)
    return floor


# --------------------------------------------------------------------------- dense


def make_vectors(path: Path, n: int, seed: int = 1, clusters: int = 1000, block: int = 100_000) -> None:
    """n unit vectors (float32, dim 384) written to a .npy in blocks; clustered like real embeddings.

    Each vector is a random cluster centre plus isotropic noise of the same norm, then
    normalised: neighbours in a cluster have cosine ~0.5, strangers ~0.
    """
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((clusters, DIM), dtype=np.float32)
    out = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=(n, DIM))
    for start in range(0, n, block):
        m = min(block, n - start)
        v = centres[rng.integers(0, clusters, m)] + rng.standard_normal((m, DIM), dtype=np.float32)
        out[start : start + m] = v / np.linalg.norm(v, axis=1, keepdims=True)
    out.flush()
    del out


def make_queries(vectors_path: Path, count: int, seed: int = 2) -> np.ndarray:
    """Queries near stored vectors (a row plus noise, normalised), as questions near their answer."""
    rng = np.random.default_rng(seed)
    vectors = np.load(vectors_path, mmap_mode="r")
    rows = np.sort(rng.choice(vectors.shape[0], count, replace=False))
    q = np.asarray(vectors[rows]) + 0.08 * rng.standard_normal((count, DIM), dtype=np.float32)
    return (q / np.linalg.norm(q, axis=1, keepdims=True)).astype(np.float32)


def dense_worker(args: argparse.Namespace) -> None:
    """One engine in a fresh process: latency, batch throughput, top-10 ids, peak RSS. Prints JSON."""
    import rag_search

    q = np.load(args.queries)
    singles, batches, batch = args.singles, args.batches, 64
    rss_start = maxrss_bytes()
    if args.engine.startswith("faiss"):
        import faiss

        faiss.omp_set_num_threads(os.cpu_count() or 1)
        vectors = np.load(args.vectors, mmap_mode="r")
        if args.engine == "faiss-fp16":  # float16 storage with faiss's own kernel
            index = faiss.IndexScalarQuantizer(vectors.shape[1], faiss.ScalarQuantizer.QT_fp16, faiss.METRIC_INNER_PRODUCT)
        else:
            index = faiss.IndexFlatIP(vectors.shape[1])
        index.add(np.ascontiguousarray(vectors))
        n = index.ntotal

        def one(v: np.ndarray) -> np.ndarray:
            return index.search(v[None, :], K)[1][0]

        def many(m: np.ndarray) -> list[np.ndarray]:
            return list(index.search(m, K)[1])
    else:
        vectors = np.load(args.vectors, mmap_mode="r")
        n = vectors.shape[0]
        tiebreak = np.arange(n, dtype=np.int64)  # ids in sorted order, as Searcher builds it
        if args.engine == "rag":

            def one(v: np.ndarray) -> np.ndarray:
                return rag_search.topk(np.asarray(vectors) @ v, K, tiebreak)

            def many(m: np.ndarray) -> list[np.ndarray]:
                scores = m @ np.asarray(vectors).T  # as Searcher.search: one matmul per batch
                return [rag_search.topk(scores[i], K, tiebreak) for i in range(len(m))]
        else:  # "blocked" (float32) or "float16": score a block of rows at a time, keep each block's top k
            block = 1 << 15 if vectors.dtype == np.float32 else 1 << 13  # float16 is widened a block at a time

            def one(v: np.ndarray) -> np.ndarray:
                return blocked_topk(vectors, v[None, :], K, tiebreak, block)[0]

            def many(m: np.ndarray) -> list[np.ndarray]:
                return blocked_topk(vectors, m, K, tiebreak, block)

    one(q[0])  # warm-up: maps the file in, as a long-running searcher has it
    rss_loaded = maxrss_bytes()
    single_s = []
    ids = []
    for i in range(singles):
        s, top = timed(lambda i=i: one(q[i]))
        single_s.append(s)
        ids.append([int(x) for x in top])
    rss_single = maxrss_bytes()
    many(q[:batch])  # warm-up of the batch path
    batch_s = []
    batch_ids: list[list[int]] = []
    for b in range(batches):
        chunk = q[b * batch : (b + 1) * batch]
        s, tops = timed(lambda chunk=chunk: many(chunk))
        batch_s.append(s)
        batch_ids.extend([int(x) for x in t] for t in tops)
    result = {
        "engine": args.engine,
        "rows": int(n),
        "matrix_bytes": int(np.load(args.vectors, mmap_mode="r").nbytes),
        "single_ms": round(median(single_s) * 1000, 2),
        "single_ms_p90": round(float(np.percentile(single_s, 90)) * 1000, 2),
        "batch64_ms": round(median(batch_s) * 1000, 1),
        "batch64_qps": round(batch / median(batch_s), 1),
        "rss_after_import": rss_start,
        "dtype": str(vectors.dtype) if hasattr(vectors, "dtype") else None,
        "rss_after_warmup": rss_loaded,
        "rss_after_single": rss_single,
        "rss_peak": maxrss_bytes(),
        "single_ids": ids,
        "batch_ids": batch_ids,
    }
    print(json.dumps(result))


def blocked_topk(vectors: np.ndarray, queries: np.ndarray, k: int, tiebreak: np.ndarray, block: int = 1 << 15) -> list[np.ndarray]:
    """Top-k rows per query, scoring `block` rows at a time (float16 rows are widened per block).

    Each block keeps its own top k by (-score, tiebreak); the global top k is among
    them, so the result equals rag_search.topk over the full score vector, without
    the (queries x rows) score matrix. Peak extra memory: queries x block floats.
    """
    import rag_search

    n = vectors.shape[0]
    rows_kept: list[list[np.ndarray]] = [[] for _ in range(len(queries))]
    scores_kept: list[list[np.ndarray]] = [[] for _ in range(len(queries))]
    for start in range(0, n, block):
        part = np.asarray(vectors[start : start + block], dtype=np.float32)
        # one query: a gemv over the block; several: queries x block (`part @ queries.T` makes OpenBLAS
        # allocate ~3x the result and runs slower)
        scores = (part @ queries[0])[None, :] if len(queries) == 1 else queries @ part.T
        for i in range(len(queries)):
            top = rag_search.topk(scores[i], k, tiebreak[start : start + block])
            rows_kept[i].append(top + start)
            scores_kept[i].append(scores[i][top])
    out = []
    for i in range(len(queries)):
        rows = np.concatenate(rows_kept[i])
        scores = np.concatenate(scores_kept[i])
        out.append(rows[rag_search.topk(scores, k, tiebreak[rows])])
    return out


def _index_digest(path: Path) -> str:
    """The digest rag_index.load checks for this vectors.npy at every start (its `_sha256`)."""
    import rag_index

    return rag_index._sha256(path)


def _run_worker(engine: str, vectors: Path, queries: Path, singles: int, batches: int) -> dict[str, Any]:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", "dense", "--engine", engine, "--vectors", str(vectors)]
    cmd += ["--queries", str(queries), "--singles", str(singles), "--batches", str(batches)]
    done = subprocess.run(cmd, capture_output=True, text=True, env=child_env())
    if done.returncode != 0:
        raise RuntimeError(f"dense worker {engine} failed: {done.stderr.strip()[-500:]}")
    return json.loads(done.stdout)


def _agreement(a: list[list[int]], b: list[list[int]]) -> dict[str, float]:
    """Share of queries whose top-10 lists are identical (in order), and mean recall@10 of b against a."""
    a = a[: len(b)]  # an engine may have run fewer single queries
    same = sum(1 for x, y in zip(a, b, strict=True) if x == y)
    recall = [len(set(x) & set(y)) / len(x) for x, y in zip(a, b, strict=True)]
    return {"identical_lists": round(same / len(a), 4), "recall_at_10": round(float(np.mean(recall)), 4), "queries": len(b)}


def bench_dense(sizes: dict[str, Any]) -> dict[str, Any]:
    """Dense search over synthetic unit vectors: rag path vs faiss IndexFlatIP, memory, float16."""
    fig: dict[str, Any] = {}
    targets: list[dict[str, Any]] = []
    notes: list[str] = []
    have_faiss = importlib.util.find_spec("faiss") is not None
    if not have_faiss:
        notes.append("faiss is not installed (pip install -e '.[bench]'): no faiss comparison")
    with tempfile.TemporaryDirectory(prefix="ragline-bench-dense-") as tmp:
        for n in sizes["dense_sizes"]:
            singles, batches = sizes["dense_single"][n], sizes["dense_batches"][n]
            vpath, hpath, qpath = Path(tmp) / f"v{n}.npy", Path(tmp) / f"h{n}.npy", Path(tmp) / f"q{n}.npy"
            gen_s, _ = timed(lambda n=n, vpath=vpath: make_vectors(vpath, n))
            v = np.load(vpath, mmap_mode="r")
            h = np.lib.format.open_memmap(hpath, mode="w+", dtype=np.float16, shape=v.shape)
            for start in range(0, n, 100_000):
                h[start : start + 100_000] = v[start : start + 100_000]
            h.flush()
            del h, v
            np.save(qpath, make_queries(vpath, max(singles, 64 * batches)))
            runs: dict[str, dict[str, Any]] = {}
            engines = ["rag", "blocked", "float16"]
            if have_faiss:
                engines += ["faiss", "faiss-fp16"]
            for engine in engines:
                path = hpath if engine == "float16" else vpath
                few = max(3, singles // 5) if engine == "float16" else singles  # numpy widens float16 slowly
                runs[engine] = quiet(lambda e=engine, p=path, q=qpath, s=few, b=batches: _run_worker(e, p, q, s, b))[1]
            rag = runs["rag"]
            row: dict[str, Any] = {"rows": n, "dim": DIM, "matrix_mb": round(rag["matrix_bytes"] / 2**20, 1), "generate_s": round(gen_s, 1)}
            for engine, r in runs.items():
                row[engine] = {
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
                if engine != "rag":
                    row[engine]["vs_rag_single"] = _agreement(rag["single_ids"], r["single_ids"])
                    row[engine]["vs_rag_batch"] = _agreement(rag["batch_ids"], r["batch_ids"])
            for engine in ("faiss", "faiss-fp16"):
                if engine in runs:
                    row[f"single_speed_rag_over_{engine}"] = round(runs[engine]["single_ms"] / rag["single_ms"], 3)
                    row[f"batch_speed_rag_over_{engine}"] = round(rag["batch64_qps"] / runs[engine]["batch64_qps"], 3)
            row["load_digest_s"] = round(timed(lambda vpath=vpath: _index_digest(vpath))[0], 3)
            fig[str(n)] = row
            targets.append(
                target("dense", f"peak RSS / matrix size, {n:,} rows (rag path)", rag["rss_peak"] / rag["matrix_bytes"], "<=", 1.2, "x")
            )
            targets.append(
                target(
                    "dense",
                    f"peak RSS / matrix size, {n:,} rows (blocked scoring)",
                    runs["blocked"]["rss_peak"] / runs["blocked"]["matrix_bytes"],
                    "<=",
                    1.2,
                    "x",
                    "bench.blocked_topk: the proposed Searcher change",
                )
            )
            for p in (vpath, hpath, qpath):
                p.unlink()
    notes.append(
        "blocked = bench.run.blocked_topk: scores 32,768 rows at a time and keeps each block's top 10 (same result as "
        "rag_search.topk over all rows); float16 = the same over a float16 copy of the matrix (half the bytes), widened "
        "8,192 rows at a time; faiss = IndexFlatIP with its defaults (OpenMP over all cores); "
        "faiss-fp16 = IndexScalarQuantizer QT_fp16 (float16 storage, faiss's kernel). RSS is VmHWM, the whole process's "
        "peak (interpreter and imports included: see rss_after_import_mb)."
    )
    return {"figures": fig, "targets": targets, "notes": notes}


# --------------------------------------------------------------------------- bm25


def zipf_corpus(n_docs: int, seed: int = 3, vocab: int = 50_000, mean_len: int = 100) -> tuple[list[str], list[str]]:
    """(documents, vocabulary by rank): words drawn from a Zipf-Mandelbrot law, p(r) ~ 1 / (r + 2.7).

    Words are pronounceable letter strings (never stopwords, never plural-looking, so
    ragline.tokenize keeps each as one term); document lengths are log-normal around
    `mean_len`; a full stop ends a sentence every ~12 words and sentences start with
    a capital, so the tokeniser does its normal work.
    """
    import ragline

    rng = np.random.default_rng(seed)
    consonants, vowels = "bcdfghjklmnprtvz", "aeiou"
    words: list[str] = []
    seen: set[str] = set()
    while len(words) < vocab:
        syllables = int(rng.integers(2, 5))
        w = "".join(consonants[rng.integers(len(consonants))] + vowels[rng.integers(len(vowels))] for _ in range(syllables))
        if w not in seen and w not in ragline.STOPWORDS:
            seen.add(w)
            words.append(w)
    ranks = np.arange(1, vocab + 1)
    p = 1.0 / (ranks + 2.7)
    p /= p.sum()
    lengths = np.clip(rng.lognormal(np.log(mean_len), 0.35, n_docs).astype(int), 5, 1000)
    draws = rng.choice(vocab, int(lengths.sum()), p=p)
    docs = []
    pos = 0
    for length in lengths:
        terms = [words[i] for i in draws[pos : pos + length]]
        pos += length
        for j in range(0, len(terms), 12):
            terms[j] = terms[j].capitalize()
            end = min(j + 11, len(terms) - 1)
            terms[end] = terms[end] + "."
        docs.append(" ".join(terms))
    return docs, words


def zipf_queries(words: list[str], count: int, seed: int = 4) -> list[str]:
    """Questions of 2-5 terms drawn from the same law but skipping the 20 commonest words."""
    rng = np.random.default_rng(seed)
    ranks = np.arange(21, len(words) + 1)
    p = 1.0 / ranks
    p /= p.sum()
    return [" ".join(words[r - 1] for r in rng.choice(ranks, int(rng.integers(2, 6)), p=p)) for _ in range(count)]


def bench_bm25(sizes: dict[str, Any]) -> dict[str, Any]:
    """rag_index.build_bm25 + Bm25.scores + rag_search.topk against bm25s (lucene, k1 1.2, b 0.75)."""
    import rag_index
    import rag_search
    import ragline

    fig: dict[str, Any] = {}
    targets: list[dict[str, Any]] = []
    notes: list[str] = []
    docs, words = zipf_corpus(sizes["bm25_docs"])
    queries = zipf_queries(words, sizes["bm25_queries"])
    query_tokens = [list(dict.fromkeys(ragline.tokenize(q))) for q in queries]  # distinct, as Bm25.term_ids
    tok_s: list[float] = []
    build_s: list[float] = []
    bm25s_s: list[float] = []
    have_bm25s = importlib.util.find_spec("bm25s") is not None
    retriever = None
    s, doc_tokens = quiet(lambda: [ragline.tokenize(d) for d in docs])  # once: it is the same work in every build
    tok_s.append(s)
    for _ in range(sizes["bm25_build_runs"]):
        s, index = quiet(lambda: rag_index.build_bm25(docs))
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
    tiebreak = np.arange(len(docs), dtype=np.int64)

    def rag_query(tokens: list[str]) -> tuple[np.ndarray, np.ndarray]:
        _, ids = index.term_ids(tokens)
        scores = index.scores(ids)
        top = rag_search.topk(scores, K, tiebreak)
        return top, scores[top]

    rag_q: list[float] = []
    st_q: list[float] = []
    rag_results = bm25s_results = None
    for _ in range(sizes["bm25_runs"]):
        s, rag_results = quiet(lambda: [rag_query(t) for t in query_tokens])
        rag_q.append(s)
        if retriever is not None:
            s, bm25s_results = quiet(
                lambda: retriever.retrieve(query_tokens, k=K, show_progress=False, n_threads=1, backend_selection="numpy")
            )
            st_q.append(s)
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
        fig["agreement"] = {
            "identical_top10": round(identical / len(queries), 4),
            "same_top10_scores": round(same_scores / len(queries), 4),
            "max_top10_score_diff": round(max_diff, 7),
            "max_full_score_diff_20_queries": round(full_diff, 7),
            "note": "ids can differ only among equal scores: bm25s breaks ties arbitrarily, ragline by id",
        }
        targets.append(target("bm25", "query throughput over bm25s", rag_qps / bm25s_qps, ">=", 1.0, "x"))
        targets.append(target("bm25", "index build speed over bm25s (+ tokenize)", build_ratio, ">=", 1.0, "x"))
    else:
        notes.append("bm25s is not installed (pip install -e '.[bench]'): no comparison")
    return {"figures": fig, "targets": targets, "notes": notes}


# --------------------------------------------------------------------------- startup


STARTUP_COMMANDS = ["rag-chunk", "rag-eval", "rag-embed", "rag-index", "rag-search", "rag-answer"]
STARTUP_TARGETED = ("rag-chunk", "rag-eval")
HEAVY = ("onnxruntime", "tokenizers")


def bench_startup(sizes: dict[str, Any]) -> dict[str, Any]:
    """`CMD --help` wall time (median of N) and whether onnxruntime/tokenizers get imported.

    Measured as an installed command runs for a user: with Python's bytecode cache
    (`help_ms`; PYTHONPYCACHEPREFIX points at a primed temporary directory), and in
    the caller's environment as it is (`help_ms_as_is`), which differs where
    PYTHONDONTWRITEBYTECODE is set and every start compiles the stages' source. The
    two are interleaved run by run.
    """
    fig: dict[str, Any] = {}
    targets: list[dict[str, Any]] = []
    notes: list[str] = []
    as_is = child_env()
    pycache = tempfile.mkdtemp(prefix="ragline-bench-pyc-")
    cached = child_env(PYTHONPYCACHEPREFIX=pycache)
    cached.pop("PYTHONDONTWRITEBYTECODE", None)
    fig["environment"] = {"PYTHONDONTWRITEBYTECODE": os.environ.get("PYTHONDONTWRITEBYTECODE"), "editable_install": False}
    bare = [timed(lambda: subprocess.run([sys.executable, "-c", "pass"], env=cached))[0] for _ in range(sizes["startup_runs"])]
    fig["python_bare_ms"] = round(median(bare) * 1000, 1)
    for name in STARTUP_COMMANDS:
        script = Path(sys.executable).parent / name
        if not script.exists():
            fig[name] = None
            if name in STARTUP_TARGETED:
                why = f"{name} is not installed (no console script {script})"
                notes.append(why)
                targets.append(target("startup", f"{name} --help", None, "<=", 150, "ms", why))
            continue
        subprocess.run([str(script), "--help"], capture_output=True, env=cached)  # primes the bytecode cache

        def help_runs(script: Path = script) -> tuple[list[float], list[float], subprocess.CompletedProcess[bytes]]:
            runs, runs_as_is = [], []
            for _ in range(sizes["startup_runs"]):
                s, done = timed(lambda: subprocess.run([str(script), "--help"], capture_output=True, env=cached))
                runs.append(s)
                runs_as_is.append(timed(lambda: subprocess.run([str(script), "--help"], capture_output=True, env=as_is))[0])
            return runs, runs_as_is, done

        runs, runs_as_is, done = quiet(help_runs)[1]
        imports = subprocess.run([sys.executable, "-X", "importtime", str(script), "--help"], capture_output=True, text=True, env=cached)
        heavy = sorted({m for line in imports.stderr.splitlines() for m in HEAVY if re.search(rf"\|\s*{m}(\.|$)", line)})
        if "__editable__" in imports.stderr:
            fig["environment"]["editable_install"] = True
        fig[name] = {
            "help_ms": round(median(runs) * 1000, 1),
            "help_ms_as_is": round(median(runs_as_is) * 1000, 1),
            "help_ms_runs": [round(s * 1000, 1) for s in runs],
            "exit": done.returncode,
            "heavy_imports": heavy,
            "slowest_top_level_imports_ms": _slowest_imports(imports.stderr),
        }
        if name in STARTUP_TARGETED:
            targets.append(target("startup", f"{name} --help", median(runs) * 1000, "<=", 150, "ms"))
            targets.append(target("startup", f"{name} --help imports no onnxruntime", 0 if "onnxruntime" not in heavy else 1, "<=", 0, ""))
    shutil.rmtree(pycache, ignore_errors=True)
    if fig["environment"]["PYTHONDONTWRITEBYTECODE"]:
        notes.append(
            "PYTHONDONTWRITEBYTECODE is set here, so a plain start compiles every stage from source (help_ms_as_is); "
            "the targets use help_ms, with the bytecode cache a normal install has"
        )
    if fig["environment"]["editable_install"]:
        notes.append("ragline is installed editable (pip install -e): its import hook costs ~20 ms per start that a wheel install does not")
    return {"figures": fig, "targets": targets, "notes": notes}


def _slowest_imports(log: str, top: int = 6) -> dict[str, float]:
    """Modules at the top two levels by cumulative import time (ms), from `python -X importtime`.

    The second level is what a stage module imports itself: numpy, click, yaml, other stages.
    """
    found: dict[str, float] = {}
    for line in log.splitlines():
        m = re.match(r"import time:\s+\d+\s+\|\s+(\d+)\s+\|( *)(\S+)", line)
        if m and len(m.group(2)) <= 3 and m.group(3) not in ("site", "encodings", "io", "_frozen_importlib_external"):
            found[m.group(3)] = int(m.group(1)) / 1000
    return {k: round(v, 1) for k, v in sorted(found.items(), key=lambda kv: -kv[1])[:top]}


# --------------------------------------------------------------------------- shard


def bench_shard(sizes: dict[str, Any]) -> dict[str, Any]:
    """`parallel --pipe -k -N B rag-embed --threads 1` against one `rag-embed --threads 2`."""
    fig: dict[str, Any] = {}
    targets: list[dict[str, Any]] = []
    notes: list[str] = []
    parallel = shutil.which("parallel")
    if parallel is None:
        notes.append("GNU parallel is not installed (apt-get install parallel): section skipped")
        return {"figures": fig, "targets": targets, "notes": notes}
    cores = os.cpu_count() or 1
    embed = bin_path("rag-embed")
    env = child_env()
    block = sizes["shard_block"]
    with tempfile.TemporaryDirectory(prefix="ragline-bench-shard-") as tmp:
        records = Path(tmp) / "records.jsonl"
        records.write_text("".join(json.dumps(r) + "\n" for r in workload(sizes["shard_records"])), encoding="utf-8")
        single_cmd = f"{embed} --quiet --threads {cores} < {records}"
        shard_cmd = f"{parallel} --pipe -k -N {block} -j {cores} {embed} --quiet --threads 1 < {records}"
        single_s: list[float] = []
        shard_s: list[float] = []
        for _ in range(sizes["shard_runs"]):
            s, one = quiet(lambda: _shell(single_cmd, env))
            single_s.append(s)
            s, many = quiet(lambda: _shell(shard_cmd, env))
            shard_s.append(s)
    a = [json.loads(line) for line in one.splitlines()]
    b = [json.loads(line) for line in many.splitlines()]
    same_order = [r["id"] for r in a] == [r["id"] for r in b]
    diff = (
        max(float(np.max(np.abs(np.array(x["vector"]) - np.array(y["vector"])))) for x, y in zip(a, b, strict=True)) if same_order else None
    )
    fig.update(
        {
            "records": len(a),
            "block": block,
            "jobs": cores,
            "single_process_s": round(median(single_s), 2),
            "single_threads": cores,
            "sharded_s": round(median(shard_s), 2),
            "sharded_threads_per_process": 1,
            "speedup": round(median(single_s) / median(shard_s), 3),
            "identical_bytes": one == many,
            "same_ids_in_order": same_order,
            "max_abs_vector_diff": diff,
            "single_runs": [round(s, 2) for s in single_s],
            "sharded_runs": [round(s, 2) for s in shard_s],
        }
    )
    targets.append(target("shard", "sharded output identical to one process", 1 if one == many else 0, ">=", 1, ""))
    if one != many and same_order:
        notes.append(
            f"outputs differ in the last bits only (max |diff| {diff:.2e}): each process sorts its own {block} records by "
            "length, so texts share a batch (and its padded width) with different neighbours"
        )
    return {"figures": fig, "targets": targets, "notes": notes}


# --------------------------------------------------------------------------- report


SECTIONS: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
    "embed": bench_embed,
    "cache": bench_cache,
    "dense": bench_dense,
    "bm25": bench_bm25,
    "startup": bench_startup,
    "shard": bench_shard,
}


def git_state() -> dict[str, Any]:
    head = _first_line(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"])
    status = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--", "*.py"], capture_output=True, text=True)
    return {"commit": head, "dirty_py": [line[3:] for line in status.stdout.splitlines()]}


def _fmt(x: Any, digits: int = 0) -> str:
    if x is None:
        return "-"
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, int | float):
        return f"{x:,.{digits}f}"
    return str(x)


def render_markdown(report: dict[str, Any]) -> str:
    """results/bench.md: the machine line, the targets table, then one table per section."""
    m = report["machine"]
    blas = m.get("numpy_blas", {})
    lines = [
        "<!-- generated by bench/run.py from results/bench.json; do not edit -->",
        "",
        f"Machine: {m.get('cpu')}, {m.get('cores')} cores{' (VM)' if m.get('hypervisor') else ''}, "
        f"{m.get('memory_gib')} GiB; numpy {m.get('numpy')} with {blas.get('name')} {blas.get('version')}; "
        f"onnxruntime {m['versions'].get('onnxruntime')}; Python {m.get('python')}. "
        f"Run {report['created']} ({report['mode']}), ragline {report['git'].get('commit')}.",
        "",
        "| Target | Measured | Target | Result |",
        "|---|---|---|---|",
    ]
    for t in report["targets"]:
        value = "-" if t["value"] is None else f"{t['value']:,.4g}{t['unit']}"
        result = "skipped" if t["pass"] is None else ("pass" if t["pass"] else "**miss**")
        lines.append(f"| {t['section']}: {t['name']} | {value} | {t['op']} {t['threshold']:g}{t['unit']} | {result} |")
    s = report["sections"]
    if "embed" in s:
        f = s["embed"]["figures"]
        st = f.get("sentence_transformers") or {}
        w = f["workload"]
        lines += [
            "",
            f"**Embedding** {w['texts']:,} chunks, {w['tokens']:,} tokens (mean {w['tokens_mean']}, truncated at 256), "
            f"{THREADS} threads, batch {rag_embed.BATCH_SIZE}, median of {len(f['rag_embed']['seconds'])} runs.",
            "",
            "| | tokens/s | share of limit | cosine vs sentence-transformers (mean / min) |",
            "|---|---|---|---|",
            f"| rag-embed (onnxruntime, int8-stored weights) | {_fmt(f['rag_embed']['tokens_per_s'])} | "
            f"{_fmt(f['rag_embed']['share_of_limit'], 2)} | "
            + (f"{f['cosine_rag_vs_st']['mean']:.4f} / {f['cosine_rag_vs_st']['min']:.4f} |" if st else "- |"),
            f"| sentence-transformers (torch fp32) | {_fmt(st.get('tokens_per_s'))} | {_fmt(st.get('share_of_limit'), 2)} | |",
            f"| limit: sgemm {f['sgemm']['all_threads']['gflops']} GFLOP/s / "
            f"{f['flops_per_token']['workload_weighted'] / 1e6:.1f} MFLOP per token | {_fmt(f['limit_tokens_per_s'])} | 1.00 | |",
            "",
            f"| Ablation, {f['ablations']['texts']} texts (one change from the default) | tokens/s | vs default | best run | "
            "tokens per CPU-second | padding | same vectors |",
            "|---|---|---|---|---|---|---|",
        ]
        for name, c in f["ablations"]["configs"].items():
            pad = "-" if c["padding_share"] is None else f"{c['padding_share']:.0%}"
            same = "identical" if c.get("identical_to_default") else f"min cos {c['min_cosine_vs_default']:.6f}"
            lines.append(
                f"| {name} | {_fmt(c['tokens_per_s'])} | {c['vs_default']:.2f}x | {_fmt(c.get('best_tokens_per_s'))} | "
                f"{_fmt(c.get('tokens_per_cpu_s'))} | {pad} | {same} |"
            )
    if "cache" in s:
        f = s["cache"]["figures"]
        lines += [
            "",
            "**Embedding cache** (wall time of the whole pipeline; eval_like = the 13 embedding steps of `just eval`, in order)",
            "",
            "| Input | records | cold s | warm s | speed-up | identical |",
        ]
        lines.append("|---|---|---|---|---|---|")
        for name in ("corpus", "eval_like", "golden_questions"):
            if name in f:
                c = f[name]
                ident = c["identical_output"] and c["identical_to_no_cache"] is not False
                lines.append(f"| {name} | {c['records']} | {c['cold_s']:.2f} | {c['warm_s']:.2f} | {c['speedup']:.1f}x | {_fmt(ident)} |")
    if "dense" in s:
        f = s["dense"]["figures"]
        lines += ["", "**Dense search** (dim 384, top-10; RSS is the whole process's peak)", ""]
        lines += [
            "| Rows | Engine | 1 query ms | batch of 64, q/s | peak RSS MB | RSS / float32 matrix | growth / matrix | top-10 vs rag |"
        ]
        lines.append("|---|---|---|---|---|---|---|---|")
        for n, row in f.items():
            for engine in ("rag", "blocked", "float16", "faiss", "faiss-fp16"):
                if engine in row:
                    e = row[engine]
                    agree = e.get("vs_rag_batch")
                    agree_s = f"identical {agree['identical_lists']:.0%}, recall {agree['recall_at_10']:.3f}" if agree else "-"
                    lines.append(
                        f"| {int(n):,} | {engine} | {e['single_ms']:.1f} | {e['batch64_qps']:,.0f} | {e['rss_peak_mb']:,.0f} | "
                        f"{e['rss_over_float32_matrix']:.2f} | {e['rss_growth_over_float32_matrix']:.2f} | {agree_s} |"
                    )
    if "bm25" in s:
        f = s["bm25"]["figures"]
        c, b = f["corpus"], f["build"]
        lines += [
            "",
            f"**BM25** {c['docs']:,} Zipfian documents ({c['tokens_per_doc']} terms each, {c['vocabulary']:,} distinct), "
            f"{c['queries']:,} queries",
            "",
            "| | build s | queries/s | top-10 |",
            "|---|---|---|---|",
            f"| ragline | {b['rag_build_bm25_s']:.1f} (tokenise {b['tokenize_s']:.1f}) | {_fmt(f['rag']['qps'])} | |",
        ]
        if "bm25s" in f:
            a = f["agreement"]
            lines.append(
                f"| bm25s {f['bm25s']['version']} (lucene) | {b['bm25s_index_s']:.1f} + tokenise | {_fmt(f['bm25s']['qps'])} | "
                f"same scores {a['same_top10_scores']:.0%}, same ids {a['identical_top10']:.0%} |"
            )
    if "startup" in s:
        f = s["startup"]["figures"]
        lines += [
            "",
            f"**Start-up** (`--help`, median; bare interpreter {f['python_bare_ms']} ms)",
            "",
            "| Command | ms | ms without bytecode cache | imports onnxruntime |",
            "|---|---|---|---|",
        ]
        for name in STARTUP_COMMANDS:
            c = f.get(name)
            if c is None:
                lines.append(f"| {name} | not installed | | |")
            else:
                lines.append(f"| {name} | {c['help_ms']} | {c.get('help_ms_as_is', '-')} | {_fmt('onnxruntime' in c['heavy_imports'])} |")
    if "shard" in s and s["shard"]["figures"]:
        f = s["shard"]["figures"]
        lines += [
            "",
            f"**Sharding** {f['records']} records: one rag-embed with {f['single_threads']} threads {f['single_process_s']:.1f} s; "
            f"`parallel --pipe -k -N {f['block']}` with {f['jobs']} jobs of 1 thread {f['sharded_s']:.1f} s "
            f"({f['speedup']:.2f}x); identical output: {_fmt(f['identical_bytes'])}"
            + ("" if f["identical_bytes"] else f" (max vector difference {f['max_abs_vector_diff']:.1e})")
            + ".",
        ]
    notes = [f"- {name}: {n}" for name, sec in s.items() for n in sec.get("notes", [])]
    runs = {(sec.get("created"), sec.get("git")) for sec in s.values()}
    if len(runs) > 1:
        when = ", ".join(
            f"{name} {sec.get('created') or 'an earlier run'}" + (f" ({sec['git']})" if sec.get("git") else "") for name, sec in s.items()
        )
        notes.append(f"- sections come from several runs (bench/run.py --only): {when}")
    busy = [
        f"{name} {sec['load']['quiet'].get('others_cores_median')} (max {sec['load']['quiet'].get('others_cores_max')})"
        for name, sec in s.items()
        if sec.get("load", {}).get("quiet", {}).get("others_cores_max")
    ]
    if busy:
        notes.append("- CPU used by other processes during the timed runs, median (max), in cores: " + ", ".join(busy))
    if notes:
        lines += ["", "Notes:", "", *notes]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, one or two runs: a smoke test")
    parser.add_argument("--only", action="append", default=[], help=f"sections to run (comma-separated or repeated): {', '.join(SECTIONS)}")
    parser.add_argument("--out", default=str(ROOT / "results"), help="where bench.json and bench.md go [default: results/]")
    parser.add_argument(
        "--wait-idle",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="start each timed run when other processes use < 0.2 cores (waiting at most SECONDS), and redo a run they disturbed (twice at most)",
    )
    parser.add_argument("--render", action="store_true", help="only regenerate bench.md from the existing bench.json")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--engine", help=argparse.SUPPRESS)
    parser.add_argument("--vectors", help=argparse.SUPPRESS)
    parser.add_argument("--queries", help=argparse.SUPPRESS)
    parser.add_argument("--singles", type=int, default=10, help=argparse.SUPPRESS)
    parser.add_argument("--batches", type=int, default=2, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker == "dense":
        dense_worker(args)
        return 0
    only = [name for item in args.only for name in item.split(",") if name] or list(SECTIONS)
    unknown = [name for name in only if name not in SECTIONS]
    if unknown:
        parser.error(f"unknown section(s) {', '.join(unknown)}; choose from {', '.join(SECTIONS)}")
    sizes = QUICK if args.quick else FULL
    out = Path(args.out)
    json_path = out / "bench.json"
    if args.render:
        (out / "bench.md").write_text(render_markdown(json.loads(json_path.read_text())), encoding="utf-8")
        return 0
    previous: dict[str, Any] = {}
    if set(only) != set(SECTIONS) and json_path.is_file():
        previous = json.loads(json_path.read_text())
    report: dict[str, Any] = {
        "schema": SCHEMA,
        "created": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "mode": "quick" if args.quick else "full",
        "command": " ".join(["bench/run.py", *(argv if argv is not None else sys.argv[1:])]),
        "git": git_state(),
        "machine": machine(),
        "sizes": {k: v for k, v in sizes.items() if not isinstance(v, dict)},
        "sections": dict(previous.get("sections", {})),
    }
    QUIET.max_wait = args.wait_idle
    report["wait_idle"] = args.wait_idle
    started = time.perf_counter()
    for name in only:
        print(f"bench: {name} ...", file=sys.stderr, flush=True)
        meter: dict[str, Any] = {}
        QUIET.reset()
        with load_meter(meter):
            result = SECTIONS[name](sizes)
        result.update(meter)
        result["load"]["quiet"] = QUIET.reset()
        result["mode"] = report["mode"]
        result["created"] = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")  # --only merges sections of several runs
        result["git"] = report["git"]["commit"]
        result["wait_idle"] = args.wait_idle
        report["sections"][name] = result
        print(
            f"bench: {name} done in {meter['load']['seconds']:.0f} s (others used {meter['load']['others_cores']} cores)", file=sys.stderr
        )
    report["seconds"] = round(time.perf_counter() - started, 1)
    report["targets"] = [t for name in SECTIONS if name in report["sections"] for t in report["sections"][name]["targets"]]
    out.mkdir(parents=True, exist_ok=True)
    for path, text in ((json_path, json.dumps(report, indent=1) + "\n"), (out / "bench.md", render_markdown(report))):
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    missed = [t for t in report["targets"] if t["pass"] is False]
    print(
        f"bench: wrote {json_path} and {out / 'bench.md'}; {len(report['targets']) - len(missed)} targets met, {len(missed)} missed",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    raise SystemExit(main())
