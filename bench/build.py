"""build: the whole index build, `rag-chunk DIR | rag-embed | rag-index`, on the three corpora, and what
the int8-arithmetic file (model.qint8.onnx) buys and costs.

    builds    per corpus (corpus/, and eng-practices and gds-way from ../shared/corpora), one process
              pipeline each, no vector cache: the default (float32 file, passage vectors), the old
              default without passages (--no-passages), and the default on the int8-arithmetic file
              (RAG_MODEL_WEIGHTS=qint8); the three interleaved, median of `build_runs`; words/s
              is the corpus's words (rag-chunk's `words` summed) over the wall time
    cosine    the qint8 build's vectors (chunks and passages, as rag-index stored them) against the
              float32 build's, row by row: min and mean per corpus
    quantise  the ablation that chose what derive_qint8 quantises: each variant is derived from the
              float32 file with onnxruntime's quantize_dynamic, then embeds the Northwind handbook's
              chunks in-process (OnnxEmbedder, 2 threads), interleaved with the float32
              file: speed ratio (median of `quantise_runs`) and cosine to the float32 vectors;
              and on each corpus, the golden questions' MRR@10 over its chunk vectors alone

Targets: the default build within 1.3x of the old default's time (all three corpora's wall time
summed); the qint8 build >= 1.4x the float32 one, whole process; its vectors >= models.QINT8_COSINE
(min over every chunk and passage of the three corpora).
"""

from __future__ import annotations

import functools
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench.harness import ROOT, bin_path, child_env, fmt, median, shell, target

CORPORA = {
    "northwind": ROOT / "corpus",
    "eng-practices": ROOT.parent / "shared" / "corpora" / "eng-practices" / "docs",
    "gds-way": ROOT.parent / "shared" / "corpora" / "gds-way" / "docs",
}
BUILDS = {
    "default": ("", {}),
    "no passages (old default)": ("--no-passages", {}),
    "default, qint8 file": ("", {"RAG_MODEL_WEIGHTS": "qint8"}),
}


def sizes(quick: bool) -> dict[str, Any]:
    """Interleaved rounds of the three builds, the corpora built, rounds of the quantisation ablation."""
    return {
        "build_runs": 1,  # one round of three builds of three corpora is a quarter of an hour on 2 busy cores
        "build_corpora": ["northwind"] if quick else list(CORPORA),
        "quantise_runs": 1 if quick else 2,
    }


@functools.cache
def _chunks(corpus: str) -> tuple[dict[str, Any], ...]:
    """rag-chunk's records of a corpus, chunked once for the whole section."""
    import orjson

    return tuple(orjson.loads(line) for line in shell(f"{bin_path('rag-chunk')} {CORPORA[corpus]}", child_env()).splitlines() if line)


def _words(chunks: tuple[dict[str, Any], ...]) -> int:
    return sum(int(c.get("words") or len(c["text"].split())) for c in chunks)


def builds(sizes: dict[str, Any], tmp: Path) -> dict[str, Any]:
    env = child_env()
    env.pop("RAG_EMBED_CACHE", None)
    env.pop("RAG_MODEL_WEIGHTS", None)
    out: dict[str, Any] = {}
    for corpus in sizes["build_corpora"]:
        docs = CORPORA[corpus]
        if not docs.is_dir():
            continue
        words = _words(_chunks(corpus))
        times: dict[str, list[float]] = {name: [] for name in BUILDS}
        for _ in range(sizes["build_runs"]):
            for name, (flags, extra) in BUILDS.items():
                idx = tmp / corpus / name.replace(" ", "-").replace(",", "").replace("(", "").replace(")", "")
                shutil.rmtree(idx, ignore_errors=True)
                cmd = f"{bin_path('rag-chunk')} {docs} | {bin_path('rag-embed')} --quiet --no-cache {flags} | {bin_path('rag-index')} --quiet --out {idx}"
                start = time.perf_counter()
                shell(cmd, env | extra)
                times[name].append(time.perf_counter() - start)
        row: dict[str, Any] = {"words": words, "builds": {}}
        for name, t in times.items():
            row["builds"][name] = {"seconds": round(median(t), 2), "words_per_s": round(words / median(t), 1)}
        row["cosine"] = _cosine(tmp / corpus / "default", tmp / corpus / "default-qint8-file")
        out[corpus] = row
    return out


def _cosine(a: Path, b: Path) -> dict[str, Any]:
    """Row-by-row cosine of two indexes' stored vectors (chunks, then passages), built from the same chunks."""
    import rag_index

    x, y = rag_index.load(a), rag_index.load(b)
    assert x.ids == y.ids, "the two builds chunked differently"
    left = [np.asarray(x.vectors)] + ([np.asarray(x.passages)] if x.passages is not None else [])
    right = [np.asarray(y.vectors)] + ([np.asarray(y.passages)] if y.passages is not None else [])
    c = np.sum(np.vstack(left) * np.vstack(right), axis=1)
    return {"rows": len(c), "min": round(float(c.min()), 4), "mean": round(float(c.mean()), 4)}


VARIANTS = {
    "every MatMul and the attention (QAttention), per channel": {
        "ops": ["MatMul", "Attention"],
        "per_channel": True,
        "keep_narrowing": False,
    },
    "every MatMul, one scale per tensor": {"ops": ["MatMul"], "per_channel": False, "keep_narrowing": False},
    "every MatMul, per channel": {"ops": ["MatMul"], "per_channel": True, "keep_narrowing": False},
    "MatMuls per channel but those after GELU (shipped: derive_qint8)": {"ops": ["MatMul"], "per_channel": True, "keep_narrowing": True},
}


def quantise(sizes: dict[str, Any], tmp: Path) -> dict[str, Any]:
    """Each variant against the float32 file on the Northwind chunks, in-process, interleaved."""
    import logging

    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    import rag_embed
    import ragline.text
    from ragline import models

    fp32 = rag_embed.load_embedder(rag_embed.DEFAULT_MODEL, threads=2, weights="fp32")
    chunks = _chunks("northwind")
    texts = [ragline.text.retrieval_text(c, True, "text") for c in chunks]
    _, narrowing = models.qint8_plan(onnx.load(str(fp32.model_file)).graph)
    logging.getLogger().setLevel(logging.ERROR)
    embedders = {"float32": fp32}
    for k, (name, v) in enumerate(VARIANTS.items()):
        file = tmp / f"variant-{k}.onnx"
        quantize_dynamic(
            str(fp32.model_file),
            str(file),
            op_types_to_quantize=v["ops"],
            per_channel=v["per_channel"],
            weight_type=QuantType.QInt8,
            nodes_to_exclude=narrowing if v["keep_narrowing"] else [],
        )
        embedders[name] = rag_embed.OnnxEmbedder(fp32.folder, models.describe(fp32.folder), threads=2, model_file=file)
    times: dict[str, list[float]] = {name: [] for name in embedders}
    vectors: dict[str, np.ndarray] = {}
    for _ in range(sizes["quantise_runs"]):
        for name, e in embedders.items():
            start = time.perf_counter()
            vectors[name] = e.embed(texts)
            times[name].append(time.perf_counter() - start)
    base = median(times["float32"])
    sets = _golden_sets(sizes["build_corpora"])
    mrr = {name: {corpus: _dense_mrr(e, *data) for corpus, data in sets.items()} for name, e in embedders.items()}
    out = {"texts": len(texts), "float32_seconds": round(base, 2), "float32_mrr": mrr["float32"], "variants": {}}
    for name in VARIANTS:
        c = np.sum(vectors["float32"] * vectors[name], axis=1)
        out["variants"][name] = {
            "seconds": round(median(times[name]), 2),
            "speedup": round(base / median(times[name]), 3),
            "cosine_min": round(float(c.min()), 4),
            "cosine_mean": round(float(c.mean()), 4),
            "mrr": mrr[name],
        }
    return out


def _golden_sets(corpora: list[str]) -> dict[str, tuple[list[str], list[str], list[str], list[set[str]]]]:
    """Per corpus (of `corpora` whose docs are here): chunk ids, the texts embedded for them, and the
    answerable golden questions with their gold ids (as rag-eval reads them under this chunking)."""

    import rag_eval
    import ragline.text
    from ragline.eval import golden, runs

    out = {}
    for corpus in runs.CORPORA:
        if corpus.name not in corpora or not CORPORA[corpus.name].is_dir():
            continue
        chunks = _chunks(corpus.name)
        ids = [c["id"] for c in chunks]
        chunking = golden.read_chunking(((f"chunk {i}", c) for i, c in enumerate(chunks)), corpus.name)
        labelled = rag_eval.cut_labels(golden.load_golden(str(ROOT / corpus.golden)), set(ids))
        asked = [q for q in labelled.questions if q.answerable]
        gold = [set(golden.resolve_gold(q, chunking, corpus.name)[0]) for q in asked]
        out[corpus.name] = (ids, [ragline.text.retrieval_text(c, True, "text") for c in chunks], [q.question for q in asked], gold)
    return out


def _dense_mrr(embedder: Any, ids: list[str], texts: list[str], questions: list[str], gold: list[set[str]]) -> float:
    """MRR@10 of the golden questions over the chunk vectors alone (no BM25, no passages, no rerank):
    what the vectors decide, so a change of the model file shows undiluted."""
    from ragline.eval import metrics

    scores = embedder.embed(questions, query=True) @ embedder.embed(texts).T
    ranked = [[ids[j] for j in np.argsort(-row, kind="stable")[:10]] for row in scores]
    return round(float(np.mean([metrics.reciprocal_rank(r, g, 10) for r, g in zip(ranked, gold, strict=True)])), 4)


def run(sizes: dict[str, Any]) -> dict[str, Any]:
    from ragline import models

    fig: dict[str, Any] = {"cpu_vnni": _vnni()}
    targets: list[dict[str, Any]] = []
    notes: list[str] = []
    tmp = Path(tempfile.mkdtemp(prefix="ragline-bench-build-"))
    try:
        fig["corpora"] = builds(sizes, tmp)
        fig["quantise"] = quantise(sizes, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    rows = fig["corpora"].values()
    total = {name: sum(r["builds"][name]["seconds"] for r in rows) for name in BUILDS}
    fig["total_seconds"] = total
    passages = total["default"] / total["no passages (old default)"]
    qint8 = total["default"] / total["default, qint8 file"]
    cos = min(r["cosine"]["min"] for r in rows)
    what = f"on {', '.join(fig['corpora'])}"
    targets.append(target("build", f"default build time over the old default's (no passages), {what}", passages, "<=", 1.3, "x"))
    targets.append(
        target("build", f"qint8 file: default build speed over the float32 file's, whole process, {what}", qint8, ">=", 1.4, "x")
    )
    targets.append(
        target("build", f"qint8 file: min cosine to the float32 vectors, every chunk and passage {what}", cos, ">=", models.QINT8_COSINE)
    )
    if not fig["cpu_vnni"]:
        notes.append(
            "this CPU has no VNNI (avx512_vnni or avx_vnni): onnxruntime's integer MatMuls run on AVX2's 16-bit multiply-add, "
            "(whose pairwise sums can saturate), so the int8 file gains less than on a VNNI CPU and its vectors may differ slightly from a VNNI CPU's"
        )
    notes.append(
        "passage vectors are real work the ranking uses (a chunk's dense score is its best passage's): they hold about as many "
        "tokens as the chunks themselves, no passage repeats another text of the build, and a chunk one passage long already gets none; "
        "the one way to near the target, passage vectors pooled from the chunk's own token states (late chunking, no second model run), "
        "was tried on the three corpora and ranked worse on both real handbooks (`rag-eval compare` against default), so passages are embedded on their own"
    )
    return {"figures": fig, "targets": targets, "notes": notes}


def _vnni() -> bool:
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return "avx512_vnni" in flags or "avx_vnni" in flags


def render(f: dict[str, Any]) -> list[str]:
    """The section's lines of results/bench.md: the builds per corpus, then the quantisation ablation."""
    if not f.get("corpora"):
        return []
    lines = [
        "",
        "**Index builds** (`rag-chunk DIR | rag-embed | rag-index`, no vector cache; words/s of the corpus; "
        "cosine: the qint8 build's stored vectors against the float32 build's)",
        "",
        "| corpus | words | " + " | ".join(f"{name} words/s" for name in BUILDS) + " | qint8 cosine min / mean |",
        "|---|---|" + "---|" * len(BUILDS) + "---|",
    ]
    for corpus, r in f["corpora"].items():
        speeds = " | ".join(fmt(r["builds"][name]["words_per_s"], 0) for name in BUILDS)
        lines.append(f"| {corpus} | {r['words']:,} | {speeds} | {r['cosine']['min']:.4f} / {r['cosine']['mean']:.4f} |")
    q = f["quantise"]
    lines += [
        "",
        f"**What to quantise** (the Northwind handbook's {q['texts']} chunks, in-process, 2 threads; "
        f"float32 file {fmt(q['float32_seconds'], 1)} s; VNNI: {'yes' if f.get('cpu_vnni') else 'no'})",
        "",
    ]
    corpora = list(q.get("float32_mrr", {}))

    def mrr(values: dict[str, float]) -> str:
        return " | ".join(f"{values[c]:.3f}" for c in corpora)

    head = "| quantised | seconds | speed over float32 | cosine min | cosine mean |" + "".join(f" MRR {c} |" for c in corpora)
    lines += [head, "|---" * (5 + len(corpora)) + "|"]
    if corpora:
        lines.append(f"| nothing (the float32 file) | {fmt(q['float32_seconds'], 1)} | 1.00x | 1 | 1 | {mrr(q['float32_mrr'])} |")
    for name, v in q["variants"].items():
        row = f"| {name} | {fmt(v['seconds'], 1)} | {v['speedup']:.2f}x | {v['cosine_min']:.4f} | {v['cosine_mean']:.4f} |"
        lines.append(row + (f" {mrr(v['mrr'])} |" if corpora else ""))
    if corpora:
        lines += [
            "",
            "MRR: the answerable golden questions of each corpus ranked by the chunk vectors alone (MRR@10; "
            "no BM25, no passages, no rerank), so the model file's part shows undiluted.",
        ]
    return lines
