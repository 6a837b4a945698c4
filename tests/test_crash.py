"""Crash safety: a stage killed at any moment leaves the old output or the complete new one.

rag-index rebuilding an existing index is killed with SIGKILL at seeded random moments:
afterwards the index loads and is the old corpus or the new one, never a mixture, and
rag-search works on it; in `test_sigkill_loop_with_a_reader`, a reader queries throughout
and never fails (`just reliability` runs that loop on 100,000 chunks: tests/support/killing.py,
which also holds the helpers here). The same for rag-eval score writing its result file.

What a SIGKILL leaves behind (no handler runs), and why it is acceptable:

- rag-index: a dead `gen-*` directory and perhaps a `.CURRENT.*.tmp` file beside the live
  generation. Readers only follow CURRENT, and the next build sweeps both away before it
  writes, so there is never more than one of each (rag_index.DEAD_BOUND). The lock file
  `.lock` stays; the kernel released the killed writer's lock on it.
- rag-eval score (ragline.records.atomic_file): perhaps a `.result.json.XXXXXXXX.tmp` beside the
  result. Nothing cleans it; no reader opens it: it is a dot-file whose name ends in `.tmp`,
  so neither `results/*.json` (the tables' glob) nor an explicit path ever names it.
  (A `.gitignore` line `.*.tmp` keeps it out of commits.)

Ctrl-C and SIGTERM run the cleanup handlers instead, so they leave nothing behind; the two
windows where an interrupt once destroyed the live output are pinned by in-process tests.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path

import orjson
import pytest
from corpora import build_index
from killing import Clock, embedded_corpus, kill_after, kill_loop, moments, timed_build
from stagecli import command, copy_workspace, live_generation, run, shared_workspace, stage_env

import rag_index
import ragline.records

RECORDS = 4000  # ~0.5-1 s of rag-index on an idle core
TRIALS = 20
SEED = 20_240_611
QUERY = b'{"id": "q", "question": "nightly settlement sweep"}\n'


def assert_search_works_or_refuses(index: Path) -> None:
    done = run("rag-search", "--index", index, "-k", "1", stdin=QUERY)
    stderr = done.stderr.decode("utf-8", "replace")
    assert "Traceback" not in stderr, stderr
    if done.returncode == 0:
        assert len(orjson.loads(done.stdout)["hits"]) == 1
    else:
        assert done.returncode == 1 and stderr.count("\n") == 1 and stderr.startswith("rag-search: "), stderr


@pytest.fixture(scope="module")
def corpora(tmp_path_factory) -> dict[str, tuple[Path, str]]:
    base = tmp_path_factory.mktemp("crash")
    return {name: (base / f"{name}.jsonl", embedded_corpus(base / f"{name}.jsonl", seed, RECORDS)) for name, seed in (("A", 1), ("B", 2))}


# --------------------------------------------------------------------------- SIGKILL


def built_twice(tmp_path, corpora) -> tuple:
    """An index built from corpus A, then rebuilt from B: (the index, the rag-index command, a Clock of one build)."""
    idx = tmp_path / "idx"
    index = [*command("rag-index"), "--out", str(idx)]
    assert subprocess.run([*index, str(corpora["A"][0])], env=stage_env()).returncode == 0
    start = time.perf_counter()
    assert subprocess.run([*index, str(corpora["B"][0])], env=stage_env()).returncode == 0
    return idx, index, Clock(time.perf_counter() - start)


@pytest.mark.slow
def test_sigkill_during_index_rebuild(tmp_path, corpora):
    idx, index, clock = built_twice(tmp_path, corpora)
    seconds, writing = timed_build([*index, str(corpora["A"][0])], idx)  # when the generation's folder appears
    clock.saw(seconds)
    rng = random.Random(SEED)
    state = {"current": "A"}
    seen: Counter = Counter()

    def trial(n: int, delay: float, start_when=None) -> None:
        current = state["current"]
        new = "A" if current == "B" else "B"
        gens_before = {p.name for p in idx.iterdir() if p.name.startswith("gen-")}
        killed, code, stderr = kill_after([*index, str(corpora[new][0])], delay, tmp_path, clock, start_when=start_when)
        assert killed or code == 0, f"trial {n}: the uninterrupted build failed: {stderr}"
        loaded = rag_index.load(idx)  # never a StageError: CURRENT always names a complete generation
        digest = loaded.manifest["corpus_digest"]
        assert digest in (corpora[current][1], corpora[new][1]), f"trial {n}: the index is neither the old nor the new corpus"
        assert loaded.manifest["counts"]["chunks"] == RECORDS and len(loaded.chunks) == RECORDS
        live = live_generation(idx).name
        leftovers = sorted(p.name for p in idx.iterdir() if p.name not in ("CURRENT", rag_index.LOCK, live))
        assert all(n.startswith("gen-") or (n.startswith(".CURRENT.") and n.endswith(".tmp")) for n in leftovers), leftovers
        assert_search_works_or_refuses(idx)
        outcome = "new" if digest == corpora[new][1] else "old"
        seen[outcome] += 1
        seen["killed while writing"] += killed and bool({n for n in leftovers if n.startswith("gen-")} - gens_before)
        state["current"] = new if outcome == "new" else current

    aims = {"old": (0.0, 0.5), "new": (2.0, 3.0)}
    for n, delay in enumerate(moments(clock, rng, seen, aims, TRIALS)):
        trial(n, delay)
    # the writing phase is the last few per cent of a run: aim at it from the moment the new generation's folder appears
    for n in range(TRIALS, TRIALS + 10):
        if seen["killed while writing"]:
            break
        before = {p.name for p in idx.iterdir()}
        trial(
            n,
            rng.uniform(0.0, max(0.002, seconds - writing)),
            lambda before=before: any(p.name.startswith("gen-") and p.name not in before for p in idx.iterdir()),
        )
    assert seen["old"] and seen["new"] and seen["killed while writing"], (
        f"the kills missed a phase: {dict(seen)} (build {clock.seconds:.2f} s)"
    )
    current = state["current"]
    # the next complete build sweeps every leftover away
    assert subprocess.run([*index, str(corpora["A" if current == "B" else "B"][0])], env=stage_env()).returncode == 0
    assert sorted(p.name for p in idx.iterdir()) == sorted(["CURRENT", rag_index.LOCK, live_generation(idx).name])


@pytest.mark.slow
def test_sigkill_loop_with_a_reader(tmp_path):
    """`just reliability` in small: rebuilds killed at random moments while a reader queries
    throughout; after each, the index loads, is one corpus or the other, answers, and at most
    rag_index.DEAD_BOUND dead generations lie beside it. The reader never fails."""
    figures = kill_loop(tmp_path, records=3000, kills=6, seed=SEED + 4)
    assert figures["checks_passed"] == figures["rebuilds"] >= 6
    assert sum(n for by_aim in figures["phases"].values() for phase, n in by_aim.items() if phase.startswith("killed")) == 6
    assert figures["reader"]["queries"] > 0 and figures["reader"]["failed"] == 0
    assert figures["max_dead_generations"] <= rag_index.DEAD_BOUND


@pytest.mark.slow
def test_sigkill_during_first_build(tmp_path, corpora):
    """No index yet: a killed first build leaves no index (rag-search refuses in one line) or a complete one."""
    rng = random.Random(SEED + 1)
    start = time.perf_counter()
    assert subprocess.run([*command("rag-index"), "--out", str(tmp_path / "probe"), str(corpora["A"][0])], env=stage_env()).returncode == 0
    clock = Clock(time.perf_counter() - start)
    outcomes = Counter()
    for trial, delay in enumerate(moments(clock, rng, outcomes, {}, trials=6, span=1.2)):
        idx = tmp_path / f"idx{trial}"
        killed, code, stderr = kill_after([*command("rag-index"), "--out", str(idx), str(corpora["A"][0])], delay, tmp_path, clock)
        assert killed or code == 0, stderr
        try:
            outcomes[rag_index.load(idx).manifest["corpus_digest"] == corpora["A"][1]] += 1
        except ragline.records.StageError as err:
            assert "no CURRENT" in str(err) or "no index here" in str(err), err
            outcomes["none"] += 1
        assert_search_works_or_refuses(idx)
    assert outcomes[False] == 0, "a half-built first index was loaded"


@pytest.mark.slow
def test_sigkill_while_writing_the_result(tmp_path_factory):
    d = copy_workspace(shared_workspace(tmp_path_factory), tmp_path_factory.mktemp("score") / "ws")
    score = [*command("rag-eval"), "score", "--golden", "golden.yaml", "--label", "hash", "--corpus-chunks", "chunks.jsonl"]
    start = time.perf_counter()
    assert subprocess.run([*score, "--out", "new.json", "answers.jsonl"], cwd=d, env=stage_env()).returncode == 0
    clock = Clock(time.perf_counter() - start)
    new = (d / "new.json").read_bytes()
    assert subprocess.run([*score, "--out", "again.json", "answers.jsonl"], cwd=d, env=stage_env()).returncode == 0
    assert (d / "again.json").read_bytes() == new, "score is deterministic (the test compares bytes)"
    old = b'{"schema": "eval-result/1", "label": "the old run"}\n'
    rng = random.Random(SEED + 2)
    seen = Counter()
    for trial, delay in enumerate(moments(clock, rng, seen, {"old": (0.0, 0.5), "new": (2.0, 3.0)}, TRIALS)):
        (d / "result.json").write_bytes(old)
        killed, code, stderr = kill_after([*score, "--out", "result.json", "answers.jsonl"], delay, d, clock)
        assert killed or code == 0, stderr
        got = (d / "result.json").read_bytes()
        assert got in (old, new), f"trial {trial}: result.json is neither the old file nor the complete new one"
        seen["new" if got == new else "old"] += 1
    temps = sorted(p.name for p in d.iterdir() if p.name.startswith("."))
    assert all(n.startswith(".result.json.") and n.endswith(".tmp") for n in temps), temps
    assert sorted(p.name for p in d.glob("*.json")) == ["again.json", "new.json", "result.json"], "readers' globs never see the temp files"
    assert seen["old"] and seen["new"], f"the kills missed a phase: {dict(seen)} (run {clock.seconds:.2f} s)"


# --------------------------------------------------------------------------- Ctrl-C at random moments


def opened(pid: int, path: Path, timeout: float = 30) -> None:
    """Wait until process pid has `path` open: its start-up is over and it is inside the stage."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if any(os.path.realpath(f"/proc/{pid}/fd/{fd}") == str(path) for fd in os.listdir(f"/proc/{pid}/fd")):
                return
        except (FileNotFoundError, ProcessLookupError):
            return  # already ended
        time.sleep(0.002)
    raise AssertionError(f"process {pid} never opened {path}")


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc to see when the stage has started")
def test_sigint_during_index_rebuild_cleans_up(tmp_path, corpora):
    """Ctrl-C once the stage runs: exit 130 and `rag-index: interrupted` (or 0 if it had finished),
    the old index or the new one, and no dead generation or temp file left behind."""
    idx, index, clock = built_twice(tmp_path, corpora)
    rng = random.Random(SEED + 3)
    current, seen = "B", Counter()
    for trial, delay in enumerate(moments(clock, rng, seen, {"old": (0.0, 0.5)}, trials=10, span=1.2)):
        new = "A" if current == "B" else "B"
        source = corpora[new][0].resolve()
        before = {p.name for p in idx.iterdir()}
        with open(tmp_path / ".stderr", "w+b") as err:
            proc = subprocess.Popen([*index, str(source)], env=stage_env(), stdin=subprocess.DEVNULL, stderr=err)
            opened(proc.pid, source)
            try:
                code = proc.wait(timeout=delay)
            except subprocess.TimeoutExpired:
                proc.send_signal(signal.SIGINT)
                code = proc.wait(timeout=60)
            err.seek(0)
            stderr = err.read().decode("utf-8", "replace")
        digest = rag_index.load(idx).manifest["corpus_digest"]
        assert digest in (corpora[current][1], corpora[new][1])
        outcome = "new" if digest == corpora[new][1] else "old"
        # a SIGINT landing while the interpreter exits, its work done, finds the default handler back: killed, silently
        late = code == -signal.SIGINT and stderr == "" and outcome == "new"
        assert late or (code, stderr) in ((130, "rag-index: interrupted\n"), (0, "")), f"trial {trial}: exit {code}, {stderr!r}"
        names = sorted(p.name for p in idx.iterdir())
        if outcome == "old":  # the handlers removed the unfinished generation and the CURRENT temp file
            assert not set(names) - before - {rag_index.LOCK}, names
            # what an earlier trial interrupted after its swap may leave: at most one dead generation (the documented bound)
            assert len([n for n in names if n.startswith("gen-")]) <= 2 and not [n for n in names if n.startswith(".CURRENT.")], names
        seen[outcome] += 1
        seen[outcome, code] += 1
        current = new if outcome == "new" else current
    assert seen["old", 130], f"no interrupt landed before the swap: {dict(seen)}"


# --------------------------------------------------------------------------- the interrupt windows, pinned


def test_interrupt_after_current_is_replaced_keeps_the_new_index(tmp_path, monkeypatch):
    """Ctrl-C while the directory holding CURRENT is fsynced: CURRENT already names the new
    generation, so the cleanup must not remove it (it once did: CURRENT named a deleted folder)."""
    idx = build_index(tmp_path)
    real = ragline.records.fsync_dir

    def interrupted(path):
        real(path)
        if Path(path) == idx:
            raise KeyboardInterrupt

    monkeypatch.setattr(ragline.records, "fsync_dir", interrupted)
    with pytest.raises(KeyboardInterrupt):
        build_index(tmp_path, {"other": "# Other\n\nDifferent text entirely.\n"})
    monkeypatch.undo()
    index = rag_index.load(idx)
    assert any(c["id"] == "other#other" for c in index.chunks)


def test_interrupt_between_the_renames_of_atomic_dir_keeps_the_old_dir(tmp_path, monkeypatch):
    target = tmp_path / "model"
    target.mkdir()
    (target / "file").write_text("old")
    real, calls = os.replace, []

    def replace(src, dst):
        calls.append((src, dst))
        if len(calls) == 2:  # the old one is moved aside, the new one not yet in place
            raise KeyboardInterrupt
        return real(src, dst)

    with pytest.raises(KeyboardInterrupt), ragline.records.atomic_dir(target) as build:
        (build / "file").write_text("new")
        monkeypatch.setattr(os, "replace", replace)
    monkeypatch.undo()
    assert (target / "file").read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"], "no temporary folder left"


def _interrupted_once_created(monkeypatch, name: str):
    """os.open / os.mkdir that create what was asked, then take a Ctrl-C before returning:
    the moment the signal lands once the temporary file exists but before its caller holds its name."""
    real = getattr(os, name)

    def create(path, *args, **kwargs):
        result = real(path, *args, **kwargs)
        if name == "open":
            if not args[0] & os.O_CREAT:
                return result
            os.close(result)
        raise KeyboardInterrupt

    monkeypatch.setattr(os, name, create)


def test_interrupt_as_atomic_file_creates_its_temp_file_leaves_nothing(tmp_path, monkeypatch):
    (tmp_path / "CURRENT").write_text("old\n")
    _interrupted_once_created(monkeypatch, "open")
    with pytest.raises(KeyboardInterrupt), ragline.records.atomic_file(tmp_path / "CURRENT") as handle:
        handle.write(b"new\n")
    monkeypatch.undo()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["CURRENT"], "no temporary file left"
    assert (tmp_path / "CURRENT").read_text() == "old\n"


def test_interrupt_as_atomic_dir_creates_its_temp_dir_leaves_nothing(tmp_path, monkeypatch):
    _interrupted_once_created(monkeypatch, "mkdir")
    with pytest.raises(KeyboardInterrupt), ragline.records.atomic_dir(tmp_path / "model") as build:
        (build / "file").write_text("new")
    monkeypatch.undo()
    assert list(tmp_path.iterdir()) == [], "no temporary folder left"
