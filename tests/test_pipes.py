"""Pipes, signals, determinism and large inputs, through the real console scripts.

- Every stage piped into `head -1` ends quietly: exit 0 or 141 (SIGPIPE's), no traceback,
  nothing on stderr.
- Ctrl-C (SIGINT) or SIGTERM to a stage reading a slow pipe: exit 130, the one line
  `rag-x: interrupted`, no file created or changed.
- The pipeline run twice on the same input gives byte-identical chunks, vectors, index
  files, hits (timings aside) and answers (timings aside).
- Streams of any length embed in bounded memory; chunking is linear in the document.
"""

from __future__ import annotations

import bisect
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
import types
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import orjson
import pytest
from stagecli import ROOT, command, copy_workspace, lines, live_generation, measure, run, shared_workspace, snapshot, stage_env

import rag_chunk
from ragline import markdown

pytestmark = pytest.mark.battery


@pytest.fixture(scope="module")
def ws(tmp_path_factory) -> Path:
    return shared_workspace(tmp_path_factory)


def big_markdown(path: Path, sections: int) -> Path:
    parts = ["# Handbook\n"]
    for n in range(sections):
        parts.append(f"\n## Section {n}\n\nThe nightly sweep closes batch {n} at 23:40 IST. Payouts follow T+1.\n")
        if n % 5 == 0:
            parts.append("\n```bash\nmarlctl lock release\n```\n")
        if n % 7 == 0:
            parts.append("\n- first step\n- second step\n")
    path.write_text("".join(parts))
    return path


def golden_of(n: int) -> str:
    return "version: 1\nquestions:\n" + "".join(
        f"  - id: u-{i:05d}\n    kind: unanswerable\n    question: Is there a rule number {i}?\n" for i in range(n)
    )


# --------------------------------------------------------------------------- | head -1


@pytest.fixture(scope="module")
def streams(ws, tmp_path_factory) -> Path:
    """Inputs big enough that every stage's output overflows the pipe buffer (64 KiB) many times."""
    d = copy_workspace(ws, tmp_path_factory.mktemp("pipes") / "ws")
    (d / "big").mkdir()
    big_markdown(d / "big" / "handbook.md", 3000)
    record = orjson.loads((d / "chunks.jsonl").read_bytes().splitlines()[0])
    (d / "many-chunks.jsonl").write_bytes(b"".join(orjson.dumps(record | {"id": f"c{i}"}) + b"\n" for i in range(3000)))
    query = orjson.loads((d / "questions.jsonl").read_bytes().splitlines()[0])
    (d / "many-questions.jsonl").write_bytes(b"".join(orjson.dumps(query | {"id": f"q{i}"}) + b"\n" for i in range(400)))
    hits = orjson.loads((d / "hits.jsonl").read_bytes().splitlines()[0])
    (d / "many-hits.jsonl").write_bytes(b"".join(orjson.dumps(hits | {"id": f"h{i}"}) + b"\n" for i in range(200)))
    (d / "many.yaml").write_text(golden_of(3000))
    return d


HEAD = {
    "rag-chunk": ("big",),
    "rag-embed": ("--model", "hash", "many-chunks.jsonl"),
    "rag-index": ("--out", "idx", "embedded.jsonl"),  # writes no stdout: head sees nothing, the stage ends as usual
    "rag-search": ("--index", "idx", "--queries", "many-questions.jsonl"),
    "rag-answer": ("--index", "idx", "--hits", "many-hits.jsonl"),
    "rag-eval": ("questions", "many.yaml"),
}


@pytest.mark.parametrize("stage", list(HEAD))
def test_piped_into_head_ends_quietly(stage, streams):
    argv = " ".join(f"'{a}'" for a in [*command(stage), *HEAD[stage]])
    script = f"{argv} 2> stage.err | head -1 > first.out; echo ${{PIPESTATUS[0]}} > stage.code"
    subprocess.run(["bash", "-c", script], cwd=streams, env=stage_env(), timeout=120, check=True)
    code = int((streams / "stage.code").read_text())
    stderr = (streams / "stage.err").read_text()
    first = (streams / "first.out").read_bytes()
    assert "Traceback" not in stderr and stderr == "", stderr
    assert code in (0, 141), f"exit {code}"
    if stage == "rag-index":
        assert first == b""
    else:
        assert first.endswith(b"\n") and isinstance(orjson.loads(first), dict)
        assert code == 141, "the output was meant to overflow the pipe"


# --------------------------------------------------------------------------- Ctrl-C on a slow pipe


def waiting_on_pipe(pid: int, timeout: float = 30) -> None:
    """Wait until the process sleeps in a pipe read: start-up is over, the stage is reading stdin."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if "pipe" in Path(f"/proc/{pid}/wchan").read_text():
                return
        except FileNotFoundError:
            return
        time.sleep(0.01)
    raise AssertionError(f"process {pid} never waited on its stdin pipe")


def first_lines(d: Path, name: str, n: int) -> bytes:
    return b"".join(line + b"\n" for line in (d / name).read_bytes().splitlines()[:n])


SLOW = {  # stage: (args, the part of a stream sent before the pause)
    "rag-embed": (("--model", "hash", "--cache", "cache.sqlite"), lambda d: first_lines(d, "chunks.jsonl", 3)),
    "rag-index": (("--out", "idx"), lambda d: first_lines(d, "embedded.jsonl", 3)),
    "rag-search": (("--index", "idx"), lambda d: first_lines(d, "questions.jsonl", 2)),
    "rag-answer": (("--index", "idx"), lambda d: first_lines(d, "hits.jsonl", 2)),
    "rag-eval": (
        ("score", "--golden", "golden.yaml", "--label", "hash", "--corpus-chunks", "chunks.jsonl", "--out", "result.json"),
        lambda d: first_lines(d, "answers.jsonl", 2),
    ),
}


@pytest.mark.skipif(not Path("/proc/self/wchan").exists(), reason="needs /proc/PID/wchan to see the stage waiting on its pipe")
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
@pytest.mark.parametrize("stage", list(SLOW))
def test_interrupted_on_a_slow_pipe(stage, sig, ws, tmp_path):
    d = copy_workspace(ws, tmp_path / "ws")
    args, head = SLOW[stage]
    if stage == "rag-embed":  # the cache exists before: it must stay a sound sqlite file
        run("rag-embed", *args, stdin=first_lines(d, "chunks.jsonl", 1), cwd=d)
    before = snapshot(d)
    proc = subprocess.Popen(
        [*command(stage), *args], cwd=d, env=stage_env(), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        proc.stdin.write(head(d))
        proc.stdin.flush()
        waiting_on_pipe(proc.pid)
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=60)  # closes stdin too: the stage must not wait for the rest
    finally:
        proc.kill()
    assert proc.returncode == 130, f"exit {proc.returncode}: {err!r}"
    assert err.decode() == f"{stage}: interrupted\n"
    after = snapshot(d)
    if stage == "rag-embed":
        with sqlite3.connect(d / "cache.sqlite") as db:
            assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        before = {k: v for k, v in before.items() if not k.startswith("cache.sqlite")}
        after = {k: v for k, v in after.items() if not k.startswith("cache.sqlite")}
    assert after == before, "no file created or changed"
    for line in out.splitlines():  # what was written before the signal is whole records
        orjson.loads(line)


# --------------------------------------------------------------------------- determinism


def pipeline(d: Path, corpus: Path, golden: Path) -> dict[str, bytes]:
    """chunk | embed | index, then questions | search | answer, by the CLIs; the outputs by name."""
    shutil.copytree(corpus, d / "corpus")
    shutil.copy(golden, d / "golden.yaml")
    out = {"chunks": run("rag-chunk", "corpus", cwd=d).stdout}
    (d / "chunks.jsonl").write_bytes(out["chunks"])
    out["embedded"] = run("rag-embed", "--model", "hash", "chunks.jsonl", cwd=d).stdout
    (d / "embedded.jsonl").write_bytes(out["embedded"])
    assert run("rag-index", "--out", "idx", "embedded.jsonl", cwd=d).returncode == 0
    gen = live_generation(d / "idx")
    for path in sorted(gen.rglob("*")):
        if path.is_file():
            out[f"idx/{path.relative_to(gen).as_posix()}"] = path.read_bytes()
    questions = run("rag-eval", "questions", "golden.yaml", cwd=d).stdout
    hits = run("rag-search", "--index", "idx", "--sparse", stdin=questions, cwd=d).stdout
    answers = run("rag-answer", "--index", "idx", stdin=hits, cwd=d).stdout
    out["hits"] = untimed(hits)
    out["answers"] = untimed(answers)
    assert all(out.values()), [k for k, v in out.items() if not v]
    return out


def untimed(data: bytes) -> bytes:
    """Records without their timings (`ms`, `answer_ms`) and the index path they ran against."""
    recs = lines(data)
    for r in recs:
        r.pop("ms", None)
        r.pop("answer_ms", None)
        r.get("retrieval", {}).pop("index", None)
    return b"".join(orjson.dumps(r, option=orjson.OPT_SORT_KEYS) + b"\n" for r in recs)


@pytest.mark.parametrize(
    "corpus",
    ["tiny", pytest.param("handbook", marks=pytest.mark.slow)],
)
def test_pipeline_twice_is_byte_identical(corpus, ws, tmp_path):
    source, golden = (ws / "corpus", ws / "golden.yaml") if corpus == "tiny" else (ROOT / "corpus", ROOT / "golden.yaml")
    first = pipeline(tmp_path / "one", source, golden)
    second = pipeline(tmp_path / "two", source, golden)
    assert first.keys() == second.keys()
    assert {"idx/vectors.npy", "idx/chunks.jsonl", "idx/manifest.json", "idx/bm25/terms_utf8.npy"} <= first.keys()
    differ = [name for name in first if first[name] != second[name]]
    assert differ == []


# --------------------------------------------------------------------------- large inputs


def stream_of(path: Path, n: int) -> Path:
    with open(path, "wb") as out:
        for i in range(n):
            out.write(orjson.dumps({"id": f"r{i}", "text": f"record {i}: the nightly settlement sweep closes batch {i % 97}"}) + b"\n")
    return path


@pytest.mark.slow
def test_embed_memory_does_not_grow_with_the_stream(tmp_path):
    """rag-embed holds one window of records (2048) at a time: ten times the stream, the same peak."""
    small = measure([*command("rag-embed"), "--model", "hash"], stream_of(tmp_path / "20k.jsonl", 20_000))
    large = measure([*command("rag-embed"), "--model", "hash"], stream_of(tmp_path / "200k.jsonl", 200_000))
    assert small["exit"] == large["exit"] == 0, (small["stderr"], large["stderr"])
    assert large["peak_rss_mib"] < 500, large
    assert large["peak_rss_mib"] < small["peak_rss_mib"] * 1.25 + 20, (small, large)


@pytest.mark.slow
def test_chunking_is_linear_in_the_document(monkeypatch: pytest.MonkeyPatch) -> None:
    """Line numbers by binary search and section slugs counted once per depth: both were quadratic
    (about a minute for 5 MB, hours for 50 MB). Counted, not timed: the slug counts read each
    section's path once per heading depth, never once per section per section, and every line
    number is one binary search over the line offsets, never a count from the start."""
    fed = [0]

    class Counted(Counter):  # what _section_slugs' counts read
        def __init__(self, items: Iterable[Any] = (), /) -> None:
            items = list(items)
            fed[0] += len(items)
            super().__init__(items)

    searches = [0]

    def search(*args: Any, **kwargs: Any) -> int:
        searches[0] += 1
        return bisect.bisect_right(*args, **kwargs)

    monkeypatch.setattr(rag_chunk, "Counter", Counted)
    monkeypatch.setattr(markdown, "bisect", types.SimpleNamespace(bisect_right=search))
    lines_of = [0]
    real_line_of = markdown.Doc.line_of

    def line_of(self: markdown.Doc, offset: int) -> int:
        lines_of[0] += 1
        return real_line_of(self, offset)

    monkeypatch.setattr(markdown.Doc, "line_of", line_of)
    text = "".join(f"## Part {n}\n\nThe sweep closes batch {n}. Payouts follow.\n\n" for n in range(20_000))
    text = "# Handbook\n\n" + text + "".join(f"# Appendix {n}\n\n## Part {n}\n\nSame slug, other parent.\n\n" for n in range(2000))
    records = rag_chunk.chunk_document(rag_chunk.Doc("h", "h.md", text), 180)
    assert len(records) == 22_000 and len({r["id"] for r in records}) == 22_000
    assert [records[i]["id"] for i in (0, 1999, 2000, -1)] == [
        "h#handbook--part-0",
        "h#handbook--part-1999",
        "h#part-2000",
        "h#appendix-1999--part-1999",
    ]
    assert records[-1]["start_line"] == text.count("\n") - 5 and records[-1]["end_line"] == text.count("\n") - 1
    sections = 22_000 + 2000 + 1  # every heading's section, the empty appendix ones and the title's included
    assert fed[0] <= 3 * sections, f"the slug counts read {fed[0]} paths for {sections} sections"
    assert lines_of[0] >= 2 * len(records) and searches[0] == lines_of[0], (lines_of[0], searches[0])


def test_measure_large_script_runs(tmp_path):
    """tests/support/measure_large.py (run by hand: it writes results/reliability.json) works at a small size."""
    out = tmp_path / "reliability.json"
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "tests" / "support" / "measure_large.py"),
            "--markdown-mb",
            "1",
            "--records",
            "2000",
            "--out",
            str(out),
        ],
        capture_output=True,
        env=stage_env(),
        timeout=300,
    )
    assert done.returncode == 0, done.stderr.decode()
    report = orjson.loads(out.read_bytes())
    assert report["chunk"]["exit"] == report["embed"]["exit"] == 0
    assert report["chunk"]["peak_rss_mib"] > 0 and report["embed"]["records"] == 2000
