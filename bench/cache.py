"""cache: `rag-chunk corpus | rag-embed --cache F` cold against warm, and identical output.

Three inputs: the handbook's chunks; `just eval`'s embedding steps (eval_like); the
golden questions, a small input where start-up dominates. warm_floor shows where a
warm run's time goes: the model is loaded even when every vector is cached.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench.harness import ROOT, bin_path, child_env, fmt, median, quiet, shell, target, timed
from bench.workload import eval_embeds, golden_questions

CASES = ("corpus", "eval_like", "golden_questions")


def sizes(quick: bool) -> dict[str, Any]:
    """Cold/warm pairs per input, and how many of `just eval`'s embedding steps eval_like runs."""
    if quick:
        return {"cache_runs": 1, "eval_like_steps": 3, "eval_like_runs": 1, "short_runs": 1}
    # golden_questions takes well under a second cold: more pairs, so its median is not one disturbed run
    return {"cache_runs": 3, "eval_like_steps": len(eval_embeds()), "eval_like_runs": 2, "short_runs": 9}


def commands(tmp: Path, sizes: dict[str, Any]) -> tuple[dict[str, str], dict[str, str]]:
    """(with a `{cache}` to fill in, without the cache) shell commands per input; eval_like has no plain one.

    eval_like runs eval_embeds() in order against one cache: cold starts from an empty
    cache (so the repeats inside one evaluation already hit), warm is the next evaluation.
    """
    embed = bin_path("rag-embed")
    chunk = bin_path("rag-chunk")
    questions = tmp / "questions.jsonl"
    questions.write_text("".join(json.dumps(q) + "\n" for q in golden_questions()), encoding="utf-8")
    eval_steps = " && ".join(
        f"{chunk} --words {words} {ROOT / 'corpus'} | {embed} --quiet {flags} --cache {{cache}}"
        for words, flags in eval_embeds()[: sizes["eval_like_steps"]]
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
    return cases, plain


def run(sizes: dict[str, Any]) -> dict[str, Any]:
    """Cold against warm `rag-embed --cache F` for each input, and the start-up floor of a warm run."""
    fig: dict[str, Any] = {}
    targets: list[dict[str, Any]] = []
    notes: list[str] = []
    env = child_env(RAG_MODEL_HOME=os.environ.get("RAG_MODEL_HOME", ""))
    if not env["RAG_MODEL_HOME"]:
        env.pop("RAG_MODEL_HOME")
    with tempfile.TemporaryDirectory(prefix="ragline-bench-cache-") as tmp:
        cases, plain = commands(Path(tmp), sizes)
        for name, template in cases.items():
            cache = Path(tmp) / f"{name}.sqlite"
            cmd = template.format(cache=cache)
            cold: list[float] = []
            warm: list[float] = []
            outputs: list[bytes] = []
            pairs = {"eval_like": sizes["eval_like_runs"], "golden_questions": sizes["short_runs"]}
            for _ in range(pairs.get(name, sizes["cache_runs"])):
                cache.unlink(missing_ok=True)
                s, out = quiet(lambda cmd=cmd: shell(cmd, env))
                cold.append(s)
                outputs.append(out)
                s, out = quiet(lambda cmd=cmd: shell(cmd, env))
                warm.append(s)
                outputs.append(out)
            reference = shell(plain[name], env) if name in plain else None  # eval_like: the corpus case checks this
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
            targets.append(target("cache", f"warm over cold ({name})", median(cold) / median(warm), ">=", 4.0, "x"))
        fig["warm_floor"] = warm_floor(env)
    return {"figures": fig, "targets": targets, "notes": notes}


def warm_floor(env: dict[str, str]) -> dict[str, Any]:
    """Start-up costs a fully cached run still pays: interpreter + imports, loading the embedder (hashing its model
    file); the tokenizer and the ONNX session open only on a cache miss, so a warm run skips them (`opened`)."""
    code = (
        "import time, sys; t0 = time.perf_counter(); import rag_embed; t1 = time.perf_counter(); "
        "e = rag_embed.load_embedder('all-MiniLM-L6-v2'); t2 = time.perf_counter(); "
        "import json; print(json.dumps({'imports_s': t1 - t0, 'load_embedder_s': t2 - t1, "
        "'onnxruntime_imported': 'onnxruntime' in sys.modules, 'opened': sorted({'session', 'tokenizer'} & set(vars(e)))}))"
    )
    runs = []
    for _ in range(3):
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
        if done.returncode == 0:
            runs.append(json.loads(done.stdout))
    if not runs:
        return {}
    bare = [timed(lambda: subprocess.run([sys.executable, "-c", "pass"], env=env))[0] for _ in range(3)]
    floor = {k: round(median([r[k] for r in runs]), 3) for k in ("imports_s", "load_embedder_s")}
    floor |= {k: runs[-1][k] for k in ("onnxruntime_imported", "opened")}
    floor["interpreter_s"] = round(median(bare), 3)
    return floor


def render(f: dict[str, Any]) -> list[str]:
    """The section's lines of results/bench.md: cold, warm and speed-up per input."""
    lines = [
        "",
        f"**Embedding cache** (wall time of the whole pipeline; eval_like = the {f['eval_like']['invocations']} embedding steps of `just eval`, "
        "in order)",
        "",
        "| Input | records | cold s | warm s | speed-up | identical |",
        "|---|---|---|---|---|---|",
    ]
    for name in CASES:
        if name in f:
            c = f[name]
            ident = c["identical_output"] and c["identical_to_no_cache"] is not False
            lines.append(f"| {name} | {c['records']} | {c['cold_s']:.2f} | {c['warm_s']:.2f} | {c['speedup']:.1f}x | {fmt(ident)} |")
    return lines
