"""The stages as real processes: the console scripts of this interpreter's environment, and a
shared workspace (the tiny corpus chunked, embedded with `hash`, indexed, asked and answered)
built once per session through those scripts.

Used by test_bad_input, test_crash, test_pipes and measure_large. No ONNX model is needed:
every run uses the `hash` embedder, with RAG_MODEL_HOME pointing at a folder that does not exist.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import orjson

ROOT = Path(__file__).resolve().parent.parent.parent
BIN = Path(sys.executable).parent
STAGES = ("rag-chunk", "rag-expand", "rag-embed", "rag-index", "rag-search", "rag-rerank", "rag-answer", "rag-eval")
NO_MODELS = "/nonexistent/ragline-models"

GOLDEN = """version: 1
questions:
  - id: t-01
    kind: factual
    question: When does the nightly sweep run?
    gold: ["settlement#the-nightly-sweep"]
    evidence: ["The sweep runs once a day at 23:40 IST"]
    answer_contains: ["23:40"]
  - id: t-02
    kind: identifier
    question: What does NW-4021 mean?
    gold: ["errors#client-errors"]
    evidence: ["NW-4021 means the capture amount is larger"]
    answer_contains: ["capture amount"]
  - id: t-03
    kind: unanswerable
    question: Can customers pay with Apple Pay?
"""


def command(stage: str) -> list[str]:
    """The console script beside sys.executable; a stage not yet installed as a script
    (a fresh checkout before `pip install -e .`) runs from its module file instead."""
    script = BIN / stage
    if script.exists():
        return [str(script)]
    return [sys.executable, str(ROOT / f"{stage.replace('-', '_')}.py")]


def environment() -> dict[str, str]:
    """A copy of os.environ, whole. The bad-input battery starts its cases from worker threads while
    pytest's own thread sets and deletes PYTEST_CURRENT_TEST at every step; a copy taken meanwhile
    met a key listed and then gone (KeyError, under load: 14 in 20,000 copies beside such a thread),
    or a dict that changed size (RuntimeError). Such a copy is taken again."""
    while True:
        try:
            return dict(os.environ)
        except (KeyError, RuntimeError):
            continue


def stage_env(**extra: str) -> dict[str, str]:
    """The environment without any RAG_* setting of the caller's, models pointed nowhere."""
    env = {k: v for k, v in environment().items() if not k.startswith("RAG_")}
    env["RAG_MODEL_HOME"] = NO_MODELS
    env.update(extra)
    return env


def run(
    stage: str,
    *args: str | os.PathLike[str],
    stdin: bytes | None = None,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
    timeout: float = 120,
) -> subprocess.CompletedProcess[bytes]:
    """Run one stage; stdin is the bytes given, or /dev/null (never a terminal, never a hang)."""
    return subprocess.run(
        [*command(stage), *map(str, args)],
        input=stdin,
        stdin=subprocess.DEVNULL if stdin is None else None,
        capture_output=True,
        cwd=cwd,
        env=env or stage_env(),
        timeout=timeout,
    )


def on_a_terminal(argv: list[str], columns: int | None = None) -> bytes:
    """What a command writes to a terminal: its stdout a pseudo-terminal (`columns` wide where given,
    with COLUMNS and LINES left out of its environment so the terminal's own size counts)."""
    import fcntl
    import pty
    import struct
    import termios

    leader, follower = pty.openpty()
    env = stage_env()
    if columns is not None:
        fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))
        env = {k: v for k, v in env.items() if k not in ("COLUMNS", "LINES")}
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=follower, stderr=subprocess.PIPE, env=env)
    os.close(follower)
    out = b""
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        out += chunk
    os.close(leader)
    assert proc.wait(60) == 0, proc.stderr.read() if proc.stderr else b""
    return out


def check(done: subprocess.CompletedProcess[bytes]) -> bytes:
    """stdout of a run that must succeed; otherwise an AssertionError showing its stderr."""
    assert done.returncode == 0, f"{done.args}: exit {done.returncode}: {done.stderr.decode(errors='replace')}"
    return done.stdout


def lines(data: bytes) -> list[dict]:
    return [orjson.loads(line) for line in data.splitlines() if line.strip()]


def snapshot(root: Path) -> dict[str, str]:
    """Every file and directory under root (hidden ones included) with its content digest."""
    out: dict[str, str] = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        out[rel] = "dir" if path.is_dir() else hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def live_generation(index: Path) -> Path:
    return index / (index / "CURRENT").read_text().strip()


# --------------------------------------------------------------------------- the workspace

_BUILT: dict[str, Path] = {}


def build_workspace(base: Path) -> Path:
    """The tiny corpus through every stage, by the CLIs, in `base`:

    corpus/*.md  chunks.jsonl  embedded.jsonl  idx/  golden.yaml  questions.jsonl
    hits.jsonl  answers.jsonl  result.json
    """
    _importable(Path(__file__).parent)
    from corpora import TINY

    base.mkdir(parents=True, exist_ok=True)
    (base / "corpus").mkdir()
    for name, text in TINY.items():
        (base / "corpus" / f"{name}.md").write_text(text)
    (base / "golden.yaml").write_text(GOLDEN)
    (base / "chunks.jsonl").write_bytes(check(run("rag-chunk", "corpus", cwd=base)))
    (base / "embedded.jsonl").write_bytes(check(run("rag-embed", "--model", "hash", "chunks.jsonl", cwd=base)))
    check(run("rag-index", "--out", "idx", "embedded.jsonl", cwd=base))
    (base / "questions.jsonl").write_bytes(check(run("rag-eval", "questions", "golden.yaml", cwd=base)))
    (base / "hits.jsonl").write_bytes(check(run("rag-search", "--index", "idx", "--queries", "questions.jsonl", cwd=base)))
    answers = lines(check(run("rag-answer", "--index", "idx", "--hits", "hits.jsonl", cwd=base)))
    (base / "answers.jsonl").write_bytes(b"".join(orjson.dumps(as_run(a, "hash")) + b"\n" for a in answers))
    check(run("rag-eval", "score", "--golden", "golden.yaml", "--label", "hash", "--out", "result.json", "answers.jsonl", cwd=base))
    return base


def as_run(record: dict, label: str) -> dict:
    """An answer record showing exactly the configuration rag_eval.RUNS gives `label`.

    The bad-input cases of `rag-eval score` are about its input, not about which
    configuration keys the other stages record this week: this keeps them independent.
    """
    _importable(ROOT)
    import rag_eval

    config = rag_eval.RUNS[label]
    record["retrieval"] = record["retrieval"] | {k: v for k, v in config.items() if k != "features"}
    record["generator"] = record["generator"] | {"features": list(config["features"])}
    return record


def _importable(folder: Path) -> None:
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))


def shared_workspace(factory) -> Path:
    """build_workspace once per test session (factory: pytest's tmp_path_factory)."""
    if "ws" not in _BUILT:
        _BUILT["ws"] = build_workspace(factory.mktemp("workspace") / "ws")
    return _BUILT["ws"]


def copy_workspace(source: Path, target: Path) -> Path:
    shutil.copytree(source, target, symlinks=True)
    return target


def measure(argv: list[str], stdin_path: Path | None = None, cwd: Path | None = None, env: dict[str, str] | None = None) -> dict:
    """Run argv (stdout to /dev/null) and report its exit code, wall time and peak RSS (MiB).

    The peak is the child's own VmHWM (/proc/PID/status), polled every 10 ms until it
    exits. Not ru_maxrss: on Linux that carries over the RSS the child inherited from
    the forking parent before exec, so a test process that had loaded a model would
    make every child look as large as itself.
    """
    import threading
    import time

    peak = [0]

    def poll(pid: int, done: threading.Event) -> None:
        while not done.is_set():
            try:
                with open(f"/proc/{pid}/status") as status:
                    for line in status:
                        if line.startswith("VmHWM:"):
                            peak[0] = max(peak[0], int(line.split()[1]))
            except (FileNotFoundError, ProcessLookupError, ValueError):
                return
            time.sleep(0.01)

    with open(stdin_path or os.devnull, "rb") as source, open(os.devnull, "wb") as sink:
        start = time.perf_counter()
        proc = subprocess.Popen(argv, stdin=source, stdout=sink, stderr=subprocess.PIPE, cwd=cwd, env=env or stage_env())
        done = threading.Event()  # Popen returns after the exec: every reading is the stage's own
        watcher = threading.Thread(target=poll, args=(proc.pid, done), daemon=True)
        watcher.start()
        err = proc.stderr.read() if proc.stderr else b""
        proc.wait()
        done.set()
        watcher.join()
        seconds = time.perf_counter() - start
    return {
        "exit": proc.returncode,
        "stderr": err.decode("utf-8", "replace"),
        "seconds": round(seconds, 2),
        "peak_rss_mib": round(peak[0] / 1024, 1),  # VmHWM is in kB
    }
