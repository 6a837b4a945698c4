"""chunk: `rag-chunk` on one large markdown file: peak RSS against the file's size.

The file is tests/support/measure_large.py's generated markdown (headed sections of prose,
code fences and lists), one document of `chunk_mb` MB; the peak is the process's own
VmHWM (bench.question.measured).
"""

from __future__ import annotations

import importlib.util
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench.harness import ROOT, bin_path, child_env, median, quiet, target
from bench.question import measured


def sizes(quick: bool) -> dict[str, Any]:
    """Megabytes of markdown, and runs."""
    return {"chunk_mb": 5 if quick else 50, "chunk_runs": 1 if quick else 2}


def markdown(path: Path, megabytes: float) -> int:
    """tests/support/measure_large.py's markdown generator (one copy of it, loaded from there)."""
    spec = importlib.util.spec_from_file_location("measure_large", ROOT / "tests" / "support" / "measure_large.py")
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    sys.path.insert(0, str(ROOT / "tests" / "support"))
    try:
        spec.loader.exec_module(module)  # type: ignore[union-attr]
    finally:
        sys.path.remove(str(ROOT / "tests" / "support"))
    return module.markdown(path, megabytes)


def run(sizes: dict[str, Any]) -> dict[str, Any]:
    """Peak RSS and seconds of `rag-chunk FILE > /dev/null` on one large file."""
    targets: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="ragline-bench-chunk-") as tmp:
        md = Path(tmp) / "large.md"
        size = markdown(md, sizes["chunk_mb"])
        runs = [quiet(lambda: measured([bin_path("rag-chunk"), str(md)], child_env()))[1] for _ in range(sizes["chunk_runs"])]
    peak = max(r[1] for r in runs) / 2**20
    fig = {
        "input_mb": round(size / 1e6, 1),
        "peak_rss_mib": round(peak, 1),
        "seconds": round(median([r[0] for r in runs]), 2),
        "records": runs[0][2].count(b"\n"),
    }
    why = "rag-chunk streams a document: a window of its lines, section by section, records spooled to a file"
    targets.append(target("chunk", f"rag-chunk peak RSS on one {fig['input_mb']:.0f} MB file", peak, "<=", 100, " MiB", why))
    return {"figures": fig, "targets": targets, "notes": []}


def render(f: dict[str, Any]) -> list[str]:
    """The section's line of results/bench.md."""
    return [
        "",
        f"**Chunking one large file** {f['input_mb']:.0f} MB of markdown, {f['records']:,} chunks: peak RSS "
        f"{f['peak_rss_mib']:.0f} MiB, {f['seconds']:.1f} s.",
    ]
