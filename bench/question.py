"""question: one question, start to answer: `rag-search` and `rag-answer` against a bare embedding script.

The bare script is the floor the issue names: a Python process that imports only
onnxruntime and tokenizers, opens the shipped model file (model.onnx, int8 weights),
embeds one query and exits. Against it, in the same run and interleaved run by run:

    rag-search --index IDX --json QUESTION
    rag-answer --index IDX --json QUESTION

on an index of the Northwind handbook built here, with no vector cache (the
question's vector is computed, as for a question never asked before). Wall time
(median of runs) and peak RSS of each process (its VmHWM); where the time
goes: `python -X importtime` of each stage module. Also: the bare script on the
float32 file rag-embed derives, and rag-search with the question in the vector cache
(no tokenizer and no onnxruntime session at all).
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from bench.harness import ROOT, bin_path, child_env, median, quiet, shell, target
from bench.workload import MODEL

QUESTION = "When does the settlement sweep run?"

BARE = """
import sys
import numpy as np
import onnxruntime as ort
from tokenizers import Tokenizer

folder, name, question = sys.argv[1], sys.argv[2], sys.argv[3]
tokenizer = Tokenizer.from_file(folder + "/tokenizer.json")
session = ort.InferenceSession(folder + "/" + name, providers=["CPUExecutionProvider"])
enc = tokenizer.encode(question)
ids = np.array([enc.ids], dtype=np.int64)
mask = np.ones_like(ids)
feed = {"input_ids": ids, "attention_mask": mask}
if any(i.name == "token_type_ids" for i in session.get_inputs()):
    feed["token_type_ids"] = np.zeros_like(ids)
hidden = session.run(None, feed)[0]
vector = hidden.mean(axis=1)[0]
print(float(np.linalg.norm(vector)))
"""


def sizes(quick: bool) -> dict[str, Any]:
    """Runs of each command."""
    return {"question_runs": 3 if quick else 9}


def measured(cmd: list[str], env: dict[str, str]) -> tuple[float, int, bytes]:
    """(wall seconds, peak RSS in bytes, stdout) of one process; a failure is a RuntimeError.

    The peak is the child's own VmHWM, read from /proc/PID/status every 5 ms until it exits
    (and once more as a zombie is gone: the last reading stands). Not wait4's ru_maxrss: on
    Linux a child's count starts from the RSS of the parent it was forked from, and this
    parent is the whole bench.
    """
    peak = [0]
    done = threading.Event()

    def poll(pid: int) -> None:
        while not done.is_set():
            try:
                with open(f"/proc/{pid}/status") as status:
                    for line in status:
                        if line.startswith("VmHWM:"):
                            peak[0] = max(peak[0], int(line.split()[1]) * 1024)
            except (FileNotFoundError, ProcessLookupError, ValueError):
                return
            time.sleep(0.005)

    start = time.perf_counter()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, env=env)
        watcher = threading.Thread(target=poll, args=(proc.pid,), daemon=True)
        watcher.start()
        proc.wait()
        seconds = time.perf_counter() - start
        done.set()
        watcher.join()
        out.seek(0)
        err.seek(0)
        if proc.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd[:3])}: exit {proc.returncode}: {err.read().decode(errors='replace').strip()[-300:]}")
        return seconds, peak[0], out.read()


def import_ms(module: str, env: dict[str, str]) -> dict[str, Any]:
    """`python -X importtime -c 'import MODULE'`: the total, and the slowest modules it pulls in (cumulative ms)."""
    done = subprocess.run([sys.executable, "-X", "importtime", "-c", f"import {module}"], capture_output=True, text=True, env=env)
    rows = [re.match(r"import time:\s+(\d+)\s+\|\s+(\d+)\s+\|( *)(\S+)", line) for line in done.stderr.splitlines()]
    rows = [m for m in rows if m]
    total = next((int(m.group(2)) / 1000 for m in rows if m.group(4) == module), None)
    direct = {m.group(4): int(m.group(2)) / 1000 for m in rows if len(m.group(3)) == 3}
    slowest = dict(sorted(direct.items(), key=lambda kv: -kv[1])[:5])
    return {"total_ms": total, "slowest_direct_ms": {k: round(v, 1) for k, v in slowest.items()}, "onnxruntime": "onnxruntime" in direct}


def without_bytecode(modules: tuple[str, ...]) -> list[str]:
    """The modules with no current bytecode file (__pycache__, its source's mtime and size): where
    PYTHONDONTWRITEBYTECODE is set, every start compiles them from source (`just bytecode` makes them)."""
    import importlib.util

    missing = []
    for name in modules:
        source = Path(importlib.util.find_spec(name).origin)
        try:
            header = Path(importlib.util.cache_from_source(str(source))).read_bytes()[:16]
        except OSError:
            header = b""
        st = source.stat()
        stamp = (int(st.st_mtime) & 0xFFFFFFFF).to_bytes(4, "little") + (st.st_size & 0xFFFFFFFF).to_bytes(4, "little")
        if len(header) < 16 or header[4:8] != b"\0\0\0\0" or header[8:16] != stamp:
            missing.append(name)
    return missing


def run(sizes: dict[str, Any]) -> dict[str, Any]:
    """Wall time and peak RSS of one question through rag-search and rag-answer, against the bare script."""
    import rag_embed

    fig: dict[str, Any] = {}
    targets: list[dict[str, Any]] = []
    notes: list[str] = []
    env = child_env()
    env.pop("RAG_EMBED_CACHE", None)
    folder = rag_embed.load_embedder(MODEL).folder
    with tempfile.TemporaryDirectory(prefix="ragline-bench-question-") as tmp:
        idx = Path(tmp) / "idx"
        shell(f"{bin_path('rag-chunk')} {ROOT / 'corpus'} | {bin_path('rag-embed')} --quiet | {bin_path('rag-index')} --out {idx}", env)
        bare = Path(tmp) / "bare.py"
        bare.write_text(BARE, encoding="utf-8")
        cached = dict(env, RAG_EMBED_CACHE=str(Path(tmp) / "cache.sqlite"))
        commands = {
            "bare script (model.onnx, as shipped)": ([sys.executable, str(bare), str(folder), "model.onnx", QUESTION], env),
            "bare script (model.fp32.onnx, derived)": ([sys.executable, str(bare), str(folder), "model.fp32.onnx", QUESTION], env),
            "rag-search": ([bin_path("rag-search"), "--index", str(idx), "--json", QUESTION], env),
            "rag-answer": ([bin_path("rag-answer"), "--index", str(idx), "--json", QUESTION], env),
            "rag-search, question in the vector cache": ([bin_path("rag-search"), "--index", str(idx), "--json", QUESTION], cached),
        }
        if not (folder / "model.fp32.onnx").is_file():
            del commands["bare script (model.fp32.onnx, derived)"]
            notes.append("the model folder has no derived float32 file (run 'just model'): its bare-script row is left out")
        for cmd, e in commands.values():
            measured(cmd, e)  # warm-up: page cache, bytecode, and the vector cache of the cached row
        seconds: dict[str, list[float]] = {name: [] for name in commands}
        rss: dict[str, list[int]] = {name: [] for name in commands}
        for _ in range(sizes["question_runs"]):
            for name, (cmd, e) in commands.items():
                s, (_, peak, _) = quiet(lambda cmd=cmd, e=e: measured(cmd, e))
                seconds[name].append(s)
                rss[name].append(peak)
    base_name = "bare script (model.onnx, as shipped)"
    base = median(seconds[base_name])
    for name in commands:
        fig[name] = {
            "seconds": round(median(seconds[name]), 3),
            "runs": [round(s, 3) for s in seconds[name]],
            "over_bare_script": round(median(seconds[name]) / base, 3),
            "rss_peak_mb": round(max(rss[name]) / 2**20, 1),
        }
    fig["imports"] = {m: import_ms(m, env) for m in ("rag_search", "rag_answer")}
    stages = (
        "ragline",
        "ragline.records",
        "ragline.text",
        "ragline.models",
        "ragline.vectorcache",
        "ragline.progress",
        "ragline.ranking",
        "rag_embed",
        "rag_index",
        "rag_search",
        "rag_chunk",
        "ragline.answer.citations",
        "ragline.answer.cues",
        "rag_answer",
    )
    fig["without_bytecode"] = without_bytecode(stages)
    if fig["without_bytecode"] and env.get("PYTHONDONTWRITEBYTECODE"):
        notes.append(
            f"PYTHONDONTWRITEBYTECODE is set and {len(fig['without_bytecode'])} of the stages' {len(stages)} modules have no bytecode: "
            "each command compiled them from source at every start, which a wheel install never does (run 'just bytecode')"
        )
    targets.append(
        target("question", "rag-search one question, wall time over the bare script", fig["rag-search"]["over_bare_script"], "<=", 1.0, "x")
    )
    targets.append(
        target("question", "rag-answer one question, wall time over the bare script", fig["rag-answer"]["over_bare_script"], "<=", 1.3, "x")
    )
    for name in ("rag-search", "rag-answer"):
        targets.append(target("question", f"{name} one question, peak RSS (Northwind)", fig[name]["rss_peak_mb"], "<", 250, " MB"))
    return {"figures": fig, "targets": targets, "notes": notes}


def render(f: dict[str, Any]) -> list[str]:
    """The section's lines of results/bench.md: seconds, ratio to the bare script, peak RSS."""
    lines = [
        "",
        f'**One question, start to answer** (`--json "{QUESTION}"` on the Northwind index, no vector cache unless said; '
        f"median of {len(next(iter(v for v in f.values() if 'runs' in v))['runs'])} runs)",
        "",
        "| Command | seconds | over the bare script | peak RSS MB |",
        "|---|---|---|---|",
    ]
    for name, c in f.items():
        if "seconds" in c:
            lines.append(f"| {name} | {c['seconds']:.3f} | {c['over_bare_script']:.2f}x | {c['rss_peak_mb']:.0f} |")
    imports = f.get("imports", {})
    if imports:
        lines += ["", "| Import (`python -X importtime`) | ms | slowest direct imports, ms |", "|---|---|---|"]
        for module, i in imports.items():
            slow = ", ".join(f"{k} {v:.0f}" for k, v in i["slowest_direct_ms"].items())
            lines.append(f"| {module} | {i['total_ms'] or 0:.0f} | {slow} |")
    return lines
