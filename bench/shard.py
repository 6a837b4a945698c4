"""shard: `parallel --pipe -k -N 200 rag-embed --threads 1` against one process with 2 threads; the same under Spark.

Identical output and the speed-up; skipped where GNU parallel is not installed.
`spark`: scripts/spark_pipeline.py (rag-chunk | rag-embed through RDD.pipe, local
mode, one task per core, 1 thread each) against `rag-chunk FILES | rag-embed` in
one process with every core, on the handbook, JVM start included; skipped where
PySpark or Java is missing.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from bench.harness import ROOT, bin_path, child_env, fmt, median, quiet, shell, target
from bench.workload import workload


def sizes(quick: bool) -> dict[str, Any]:
    """Records, records per process, and runs of each side."""
    if quick:
        return {"shard_records": 100, "shard_block": 50, "shard_runs": 1, "spark_runs": 1}
    return {"shard_records": 400, "shard_block": 200, "shard_runs": 2, "spark_runs": 2}


def run(sizes: dict[str, Any]) -> dict[str, Any]:
    """`parallel --pipe -k -N B rag-embed --threads 1` against one `rag-embed --threads 2`."""
    fig: dict[str, Any] = {}
    targets: list[dict[str, Any]] = []
    notes: list[str] = []
    fig["spark"] = spark(sizes, targets, notes)
    parallel = shutil.which("parallel")
    if parallel is None:
        notes.append("GNU parallel is not installed (apt-get install parallel): no GNU parallel rows")
        return {"figures": fig, "targets": targets, "notes": notes}
    cores = os.cpu_count() or 1
    embed = bin_path("rag-embed")
    env = child_env()
    block = sizes["shard_block"]
    with tempfile.TemporaryDirectory(prefix="ragline-bench-shard-") as tmp:
        records = Path(tmp) / "records.jsonl"
        records.write_text("".join(json.dumps(r) + "\n" for r in workload(sizes["shard_records"])), encoding="utf-8")
        single_cmd = f"{embed} --quiet --no-cache --threads {cores} < {records}"
        shard_cmd = f"{parallel} --pipe -k -N {block} -j {cores} {embed} --quiet --no-cache --threads 1 < {records}"
        single_s: list[float] = []
        shard_s: list[float] = []
        for _ in range(sizes["shard_runs"]):
            s, one = quiet(lambda: shell(single_cmd, env))
            single_s.append(s)
            s, many = quiet(lambda: shell(shard_cmd, env))
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


def spark(sizes: dict[str, Any], targets: list[dict[str, Any]], notes: list[str]) -> dict[str, Any] | None:
    """scripts/spark_pipeline.py in local mode against one process: seconds, speed-up, identical bytes."""
    if importlib.util.find_spec("pyspark") is None or (shutil.which("java") is None and not os.environ.get("JAVA_HOME")):
        notes.append("PySpark (pip install -e '.[scale]') or Java is missing: no Spark row")
        return None
    cores = os.cpu_count() or 1
    files = [str(p) for p in sorted((ROOT / "corpus").glob("*.md"))]
    env = child_env(SPARK_LOCAL_IP="127.0.0.1")
    env.pop("RAG_EMBED_CACHE", None)
    one_cmd = f"{bin_path('rag-chunk')} {' '.join(files)} | {bin_path('rag-embed')} --quiet --no-cache --threads {cores}"
    single_s: list[float] = []
    spark_s: list[float] = []
    with tempfile.TemporaryDirectory(prefix="ragline-bench-spark-") as tmp:
        for run in range(sizes["spark_runs"]):
            s, one = quiet(lambda: shell(one_cmd, env))
            single_s.append(s)
            out = Path(tmp) / f"out{run}"
            cmd = [sys.executable, str(ROOT / "scripts" / "spark_pipeline.py"), *files, "--out", str(out)]
            cmd += ["--master", f"local[{cores}]", "--partitions", str(cores)]
            s, done = quiet(lambda cmd=cmd: subprocess.run(cmd, capture_output=True, env=env))
            if done.returncode != 0:
                notes.append(f"the Spark run failed: {done.stderr.decode(errors='replace').strip().splitlines()[-1:]}")
                return None
            spark_s.append(s)
            many = b"".join(p.read_bytes() for p in sorted(out.glob("part-*")))
    targets.append(target("shard", "Spark (RDD.pipe) output identical to one process", 1 if one == many else 0, ">=", 1, ""))
    return {
        "records": one.count(b"\n"),
        "documents": len(files),
        "master": f"local[{cores}]",
        "single_process_s": round(median(single_s), 2),
        "spark_s": round(median(spark_s), 2),
        "speedup": round(median(single_s) / median(spark_s), 3),
        "identical_bytes": one == many,
    }


def render(f: dict[str, Any]) -> list[str]:
    """The section's lines of results/bench.md (none when the section was skipped)."""
    lines = []
    sp = f.get("spark")
    if sp:
        lines += [
            "",
            f"**Spark** (scripts/spark_pipeline.py, `{sp['master']}`, JVM start included) the handbook's {sp['documents']} documents, "
            f"{sp['records']} records: one `rag-chunk | rag-embed` {sp['single_process_s']:.1f} s, Spark {sp['spark_s']:.1f} s "
            f"({sp['speedup']:.2f}x); identical output: {fmt(sp['identical_bytes'])}.",
        ]
    if "records" not in f:
        return lines
    return [
        *lines,
        "",
        f"**Sharding** {f['records']} records: one rag-embed with {f['single_threads']} threads {f['single_process_s']:.1f} s; "
        f"`parallel --pipe -k -N {f['block']}` with {f['jobs']} jobs of 1 thread {f['sharded_s']:.1f} s "
        f"({f['speedup']:.2f}x); identical output: {fmt(f['identical_bytes'])}"
        + ("" if f["identical_bytes"] else f" (max vector difference {f['max_abs_vector_diff']:.1e})")
        + ".",
    ]
