"""reader: what each reader costs a question, against llama.cpp's own throughput on the same model.

The golden questions of golden.yaml (all of them, or the first of each kind with --quick) go
through `rag-answer --index IDX --json Q...` once per reader, on an index of the Northwind
handbook built here, with the shipped settings: the extractive default, and the local model
(every reader of `ragline.answer.reader.REGISTRY` that needs no server); the 1.5B model as judge and as the PMI reader's
scorer where it is in the model cache.
Per reader: the seconds a question inside rag-answer (each record's `answer_ms`, median and
90th percentile; the model's load is once a process and not counted), the prompt and generated
tokens a question (`llm_tokens`), and the tokens a second the model read while answering.

The limit is llama.cpp's own throughput for the same file on the same machine, measured in
this process through the same library the reader calls (what `llama-bench` measures): prompt
processing as one batch of 512 tokens (pp512), generation as 128 single tokens one after
another (tg128), each the median of a few runs. The reader's prompt tokens a second over pp512
says how close its batches come to what the machine can do; the rest of a question's time is
the extractive scoring, the embedding and Python.

Target (the reader issue): the local reader's median seconds a question <= 8 on 2 cores.
"""

from __future__ import annotations

import json
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from bench.harness import ROOT, bin_path, child_env, median, shell, target

SMALL, LARGE = "qwen2.5-coder-0.5b-instruct", "qwen2.5-coder-1.5b-instruct"


def readers() -> dict[str, tuple[list[str], str | None]]:
    """Row name -> rag-answer's flags and the local model it needs (None: none): every reader of the
    registry that runs here without a server (`Kind.server`), a local one on the 0.5B model, and
    the judge and the PMI reader on the 1.5B model too, where that is in the model cache."""
    from ragline.answer.reader import REGISTRY

    rows: dict[str, tuple[list[str], str | None]] = {}
    for kind in REGISTRY.values():
        if kind.server:
            continue
        rows[f"{kind.name} (0.5B)" if kind.local else kind.name] = (["--reader", kind.name], SMALL if kind.local else None)
    for name in ("judge", "pmi"):  # the larger model as judge, and as the PMI reader's scorer (fitted: results/pmi-fit-1.5b.json)
        rows[f"{name} (1.5B)"] = (["--reader", name, "--local-model", LARGE], LARGE)
    return rows


TARGET_SECONDS = 8.0


def sizes(quick: bool) -> dict[str, Any]:
    return {"reader_all_questions": not quick, "llama_runs": 2 if quick else 5}


def questions(everything: bool) -> list[str]:
    data = yaml.safe_load((ROOT / "golden.yaml").read_text(encoding="utf-8"))["questions"]
    if everything:
        return [q["question"] for q in data]
    seen: set[str] = set()
    return [q["question"] for q in data if not (q["kind"] in seen or seen.add(q["kind"]))]


def llama_limit(model: str, runs: int) -> dict[str, float]:
    """pp512 and tg128 tokens a second of the model file through llama.cpp (the reader's own library), medians."""
    from ragline import local_models
    from ragline.answer.local import LocalModel

    path, sha = local_models.model_file(model)
    lm = LocalModel(path, 0, 4096, sha, model)
    tokens = (lm.tokenize("The quick brown fox jumps over the lazy dog. " * 60, special=False) * 2)[:512]
    pp, tg = [], []
    for _ in range(runs):
        lm.L.llama_memory_clear(lm.memory, True)
        start = time.perf_counter()
        lm._decode([(tokens, 0, 0, range(511, 512))], lambda row, k, i: None)
        pp.append(512 / (time.perf_counter() - start))
        lm.L.llama_memory_clear(lm.memory, True)
        lm._decode([(tokens[:16], 0, 0, range(15, 16))], lambda row, k, i: None)
        start = time.perf_counter()
        for i in range(128):
            lm._decode([([tokens[16 + i]], 0, 16 + i, range(1))], lambda row, k, i: None)
        tg.append(128 / (time.perf_counter() - start))
    lm.close()
    return {"pp512_tokens_s": round(median(pp), 1), "tg128_tokens_s": round(median(tg), 1)}


def run(sizes: dict[str, Any]) -> dict[str, Any]:
    from ragline import local_models

    fig: dict[str, Any] = {"readers": {}, "limits": {}}
    targets: list[dict[str, Any]] = []
    notes: list[str] = []
    env = child_env()
    asked = questions(sizes["reader_all_questions"])
    with tempfile.TemporaryDirectory(prefix="ragline-bench-reader-") as tmp:
        idx = Path(tmp) / "idx"
        shell(
            f"{bin_path('rag-chunk')} {ROOT / 'corpus'} | {bin_path('rag-embed')} --quiet --no-cache | {bin_path('rag-index')} --out {idx}",
            env,
        )
        for name, (flags, model) in readers().items():
            if model is not None and not local_models.usable(model):
                notes.append(f"{name}: {model} is not in the model cache ('just llm-model {model}'): its row is left out")
                continue
            done = subprocess.run([bin_path("rag-answer"), "--index", str(idx), *flags, "--json", *asked], capture_output=True, env=env)
            if done.returncode != 0:
                raise RuntimeError(f"rag-answer {' '.join(flags)}: exit {done.returncode}: {done.stderr.decode(errors='replace')[-300:]}")
            records = [json.loads(line) for line in done.stdout.splitlines()]
            seconds = [r["answer_ms"] / 1000 for r in records]
            read = [r.get("llm_tokens", {}).get("prompt", 0) for r in records]
            wrote = [r.get("llm_tokens", {}).get("generated", 0) for r in records]
            row: dict[str, Any] = {
                "questions": len(records),
                "seconds_p50": round(float(np.median(seconds)), 3),
                "seconds_p90": round(float(np.percentile(seconds, 90)), 3),
                "prompt_tokens_p50": int(np.median(read)),
                "generated_tokens_p50": int(np.median(wrote)),
                "refused": sum(r["refused"] for r in records),
                "words_p50": int(np.median([len(r["answer"].split()) for r in records if not r["refused"]] or [0])),
            }
            if model is not None:
                if model not in fig["limits"]:
                    fig["limits"][model] = llama_limit(model, sizes["llama_runs"])
                busy = sum(seconds)
                row["prompt_tokens_s"] = round(sum(read) / busy, 1) if busy else None
                limit = fig["limits"][model]["pp512_tokens_s"]
                row["prompt_tokens_s_over_pp512"] = round(row["prompt_tokens_s"] / limit, 3) if row["prompt_tokens_s"] else None
                targets.append(
                    target(
                        "reader", f"{name}: median seconds a question", row["seconds_p50"], "<=", TARGET_SECONDS, " s", "the reader issue"
                    )
                )
            fig["readers"][name] = row
    return {"figures": fig, "targets": targets, "notes": notes}


def render(f: dict[str, Any]) -> list[str]:
    """The section's lines of results/bench.md: a row a reader, then llama.cpp's limits."""
    lines = [
        "",
        "**What a question costs each reader** (rag-answer on the Northwind index, golden.yaml's questions, shipped settings; "
        "seconds inside rag-answer, the model loaded once)",
        "",
        "| Reader | questions | s a question, median | p90 | prompt tokens | generated tokens | prompt tokens/s | over llama.cpp's pp512 | refused | answer words |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, r in f.get("readers", {}).items():
        over = f"{r['prompt_tokens_s_over_pp512']:.2f}x" if r.get("prompt_tokens_s_over_pp512") else ""
        lines.append(
            f"| {name} | {r['questions']} | {r['seconds_p50']:.2f} | {r['seconds_p90']:.2f} | {r['prompt_tokens_p50']} | "
            f"{r['generated_tokens_p50']} | {r.get('prompt_tokens_s') or ''} | {over} | {r['refused']} | {r['words_p50']} |"
        )
    if f.get("limits"):
        lines += ["", "| llama.cpp, same file, same machine | pp512 tokens/s | tg128 tokens/s |", "|---|---|---|"]
        lines += [f"| {m} | {v['pp512_tokens_s']} | {v['tg128_tokens_s']} |" for m, v in f["limits"].items()]
    return lines
