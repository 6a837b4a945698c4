"""startup: `rag-chunk --help`, `rag-eval --help` (and every other stage's) wall time; no onnxruntime at --help."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench.harness import child_env, fmt, median, quiet, target, timed

COMMANDS = ["rag-chunk", "rag-eval", "rag-embed", "rag-index", "rag-search", "rag-answer"]
TARGETED = ("rag-chunk", "rag-eval")
HEAVY = ("onnxruntime", "tokenizers")


def sizes(quick: bool) -> dict[str, Any]:
    """Runs of each `--help`."""
    return {"startup_runs": 3 if quick else 10}


def help_runs(script: Path, runs: int, cached: dict[str, str], as_is: dict[str, str]) -> tuple[list[float], list[float], Any]:
    """`script --help` with the primed bytecode cache and as it is, interleaved run by run; the last run's process."""
    times, times_as_is = [], []
    for _ in range(runs):
        s, done = timed(lambda: subprocess.run([str(script), "--help"], capture_output=True, env=cached))
        times.append(s)
        times_as_is.append(timed(lambda: subprocess.run([str(script), "--help"], capture_output=True, env=as_is))[0])
    return times, times_as_is, done


def run(sizes: dict[str, Any]) -> dict[str, Any]:
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
    for name in COMMANDS:
        script = Path(sys.executable).parent / name
        if not script.exists():
            fig[name] = None
            if name in TARGETED:
                why = f"{name} is not installed (no console script {script})"
                notes.append(why)
                targets.append(target("startup", f"{name} --help", None, "<=", 150, "ms", why))
            continue
        subprocess.run([str(script), "--help"], capture_output=True, env=cached)  # primes the bytecode cache
        runs, runs_as_is, done = quiet(lambda script=script: help_runs(script, sizes["startup_runs"], cached, as_is))[1]
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
            "slowest_top_level_imports_ms": slowest_imports(imports.stderr),
        }
        if name in TARGETED:
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


def slowest_imports(log: str, top: int = 6) -> dict[str, float]:
    """Modules at the top two levels by cumulative import time (ms), from `python -X importtime`.

    The second level is what a stage module imports itself: numpy, click, yaml, other stages.
    """
    found: dict[str, float] = {}
    for line in log.splitlines():
        m = re.match(r"import time:\s+\d+\s+\|\s+(\d+)\s+\|( *)(\S+)", line)
        if m and len(m.group(2)) <= 3 and m.group(3) not in ("site", "encodings", "io", "_frozen_importlib_external"):
            found[m.group(3)] = int(m.group(1)) / 1000
    return {k: round(v, 1) for k, v in sorted(found.items(), key=lambda kv: -kv[1])[:top]}


def render(f: dict[str, Any]) -> list[str]:
    """The section's lines of results/bench.md: ms per `--help`, and whether it imports onnxruntime."""
    lines = [
        "",
        f"**Start-up** (`--help`, median; bare interpreter {f['python_bare_ms']} ms)",
        "",
        "| Command | ms | ms without bytecode cache | imports onnxruntime |",
        "|---|---|---|---|",
    ]
    for name in COMMANDS:
        c = f.get(name)
        if c is None:
            lines.append(f"| {name} | not installed | | |")
        else:
            lines.append(f"| {name} | {c['help_ms']} | {c.get('help_ms_as_is', '-')} | {fmt('onnxruntime' in c['heavy_imports'])} |")
    return lines
