"""Faults of the machine, not of the input, injected for real: two builds of one index at once,
a full disk, a corrupt embedding cache, a corrupt model file.

Each fault in FAULTS pins the exit code, the one stderr line (`…` stands for any text) and
what is left on disk; `python tests/support/fault_table.py` renders FAULTS (tests/support/faults.py) for docs/reliability.md. The
concurrent writers are real processes; the full disk is a small tmpfs that the test mounts
(as root; skipped with the reason otherwise) and fills; the corrupt files are real files
(a text file named as the cache, a truncated cache, a cache with a damaged page, a truncated
copy of the model).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import sqlite3
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
from faults import FAULTS, WRITERS, Fault
from killing import embedded_corpus
from stagecli import command, copy_workspace, live_generation, run, shared_workspace, stage_env

import rag_embed
import rag_index
from ragline import models
from ragline.records import StageError

pytestmark = pytest.mark.battery

RECORDS = 4000  # ~0.5-1 s of rag-index: four at once overlap on two cores


def one_line(fault: Fault, done: subprocess.CompletedProcess[bytes], where: dict[str, str] | None = None) -> None:
    """The run exited with the fault's code and said exactly its line (paths in `where` shortened to their names)."""
    stderr = done.stderr.decode("utf-8", "replace")
    assert "Traceback" not in stderr, stderr
    assert done.returncode == fault.code, f"exit {done.returncode}: {stderr!r}"
    assert stderr.endswith("\n") and stderr.count("\n") == 1, f"one line on stderr, got {stderr!r}"
    line = stderr[:-1]
    for long, short in (where or {}).items():
        line = line.replace(long, short)
    assert fault.regex().fullmatch(line), f"{line!r} does not match {fault.expect!r}"


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> tuple[Path, str]:
    """RECORDS embedded chunk records (random unit vectors) and their corpus digest."""
    path = tmp_path_factory.mktemp("faults") / "corpus.jsonl"
    return path, embedded_corpus(path, seed=7, n=RECORDS)


def index_entries(idx: Path) -> list[str]:
    return sorted(p.name for p in idx.iterdir())


# --------------------------------------------------------------------------- two writers


def waiting_for_a_lock(proc: subprocess.Popen, timeout: float = 60) -> None:
    """Wait until `proc` is blocked on a lock another process holds: a `->` line of /proc/locks names its pid."""
    deadline = time.monotonic() + timeout
    while True:
        for line in Path("/proc/locks").read_text().splitlines():
            fields = line.split()
            if "->" in fields and fields[fields.index("->") + 4] == str(proc.pid):
                return
        assert proc.poll() is None, f"it ended (exit {proc.returncode}) instead of waiting for the lock"
        assert time.monotonic() < deadline, f"it was not waiting for the lock {timeout} s on"
        time.sleep(0.02)


def test_concurrent_writers_take_turns(tmp_path, corpus):
    """Four builds of one index at once: all exit 0 and one complete generation is left (before the
    lock, each build's sweep deleted the others' unfinished generations: three exited 1 with
    `idx/gen-.../vectors.npy: No such file or directory`)."""
    fault = FAULTS["writers"]
    waited = 0
    for attempt in range(3):  # until a round really overlapped (one writer found the lock taken)
        idx = tmp_path / f"idx{attempt}"
        argv = [*command("rag-index"), "--out", str(idx), str(corpus[0])]
        procs = [subprocess.Popen(argv, env=stage_env(), stdin=subprocess.DEVNULL, stderr=subprocess.PIPE) for _ in range(WRITERS)]
        results = [(p.wait(timeout=300), p.stderr.read().decode("utf-8", "replace")) for p in procs]
        for proc in procs:
            proc.stderr.close()
        for code, stderr in results:
            assert code == 0 and "Traceback" not in stderr, f"exit {code}: {stderr!r}"
            if stderr:
                assert stderr.count("\n") == 1, stderr
                assert fault.regex().fullmatch(stderr[:-1].replace(str(idx), "idx")), stderr
                waited += 1
        index = rag_index.load(idx)
        assert index.manifest["corpus_digest"] == corpus[1] and len(index.chunks) == RECORDS
        assert index_entries(idx) == sorted([".lock", "CURRENT", live_generation(idx).name])
        if waited:
            break
    assert waited, f"in 3 rounds of {WRITERS} writers none found another writing: the test did not exercise the lock"


def test_a_writer_waits_for_the_one_holding_the_lock_and_names_it(tmp_path, corpus):
    """The lock held (by this test, as a writer would hold it): rag-index says who holds it, on one
    line, and waits; once it is released the build completes."""
    idx = tmp_path / "idx"
    assert run("rag-index", "--out", idx, corpus[0]).returncode == 0
    before = (idx / "CURRENT").read_text()
    with open(idx / ".lock", "r+b") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        lock.write(f"{os.getpid()}\n".encode())
        lock.flush()
        proc = subprocess.Popen(
            [*command("rag-index"), "--out", str(idx), str(corpus[0])], env=stage_env(), stdin=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
        line = proc.stderr.readline().decode()
        assert line == f"rag-index: {idx}: another rag-index (pid {os.getpid()}) is writing this index; waiting for it to finish\n"
        waiting_for_a_lock(proc)  # it waits while the lock is held
        assert (idx / "CURRENT").read_text() == before
        fcntl.flock(lock, fcntl.LOCK_UN)
    assert proc.wait(timeout=120) == 0
    assert proc.stderr.read() == b""
    proc.stderr.close()
    assert (idx / "CURRENT").read_text() != before
    assert index_entries(idx) == sorted([".lock", "CURRENT", live_generation(idx).name])


def test_quiet_waits_without_a_word(tmp_path, corpus):
    idx = tmp_path / "idx"
    assert run("rag-index", "--out", idx, corpus[0]).returncode == 0
    with open(idx / ".lock", "r+b") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        proc = subprocess.Popen(
            [*command("rag-index"), "--quiet", "--out", str(idx), str(corpus[0])], env=stage_env(), stderr=subprocess.PIPE
        )
        waiting_for_a_lock(proc)
    assert proc.wait(timeout=120) == 0 and proc.stderr.read() == b""
    proc.stderr.close()


# --------------------------------------------------------------------------- a full disk


@pytest.fixture
def small_disk(tmp_path) -> Iterator[callable]:
    """mount(size) -> a directory on a fresh tmpfs of that size, unmounted at the end."""
    mounted: list[Path] = []

    def mount(size: str) -> Path:
        if os.geteuid() != 0:
            pytest.skip("a real full disk needs a small tmpfs, and mounting one needs root")
        path = tmp_path / f"disk{len(mounted)}"
        path.mkdir()
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True, text=True)
        if done.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip() or done.returncode}")
        mounted.append(path)
        return path

    try:
        yield mount
    finally:
        for path in mounted:
            if subprocess.run(["umount", str(path)], capture_output=True).returncode != 0:
                subprocess.run(["umount", "-l", str(path)], capture_output=True)


def fill(disk: Path) -> Path:
    """Write a file on `disk` until the file system refuses another byte."""
    filler = disk / "filler"
    with open(filler, "wb", buffering=0) as out:
        block = b"\0" * 65536
        with contextlib.suppress(OSError):
            while True:
                if not out.write(block):
                    break
        with pytest.raises(OSError) as full:
            out.write(b"\0" * 4096)
        assert full.value.errno == errno.ENOSPC
    return filler


def test_index_on_a_full_disk(small_disk, tmp_path_factory, corpus):
    """Before: `rag-index: 1523 requested and 403 written` (numpy's words)."""
    fault = FAULTS["disk-index"]
    ws = shared_workspace(tmp_path_factory)
    disk = small_disk("2m")  # the tiny index fits; RECORDS vectors (6 MB) do not
    idx = disk / "idx"
    assert run("rag-index", "--out", idx, ws / "embedded.jsonl").returncode == 0
    old = rag_index.load(idx).manifest["corpus_digest"]
    done = run("rag-index", "--out", idx, corpus[0])
    one_line(fault, done, {str(idx): "idx"})
    assert rag_index.load(idx).manifest["corpus_digest"] == old
    assert index_entries(idx) == sorted([".lock", "CURRENT", live_generation(idx).name]), "the unfinished generation is removed"
    assert run("rag-search", "--index", idx, "-k", "1", stdin=b'{"id": "q", "question": "nightly sweep"}\n').returncode == 0
    first = disk / "first"
    done = run("rag-index", "--out", first, corpus[0])
    assert done.stderr.decode() == f"rag-index: {first}: no space left on the device; no index was written\n" and done.returncode == 1
    assert not (first / "CURRENT").exists() and not [p for p in first.iterdir() if p.name.startswith("gen-")]


def test_embed_cache_on_a_full_disk(small_disk, tmp_path_factory, corpus):
    """Before: a traceback (`sqlite3.OperationalError: database or disk is full`)."""
    fault = FAULTS["disk-cache"]
    ws = shared_workspace(tmp_path_factory)
    disk = small_disk("1m")
    cache = disk / "cache.sqlite"
    embed = ("rag-embed", "--model", "hash", "--no-passages", "--cache", cache)
    warm = run(*embed, ws / "chunks.jsonl")
    assert warm.returncode == 0, warm.stderr
    with sqlite3.connect(cache) as db:
        stored = db.execute("SELECT count(*) FROM vectors").fetchone()[0]
    assert stored > 0
    filler = fill(disk)
    done = run(*embed, corpus[0])
    one_line(fault, done, {str(cache): "cache.sqlite"})
    assert done.stdout == b""
    filler.unlink()
    with sqlite3.connect(cache) as db:
        assert db.execute("SELECT count(*) FROM vectors").fetchone()[0] == stored
    again = run(*embed, ws / "chunks.jsonl")
    assert again.returncode == 0 and again.stdout == warm.stdout


def test_result_file_on_a_full_disk(small_disk, tmp_path_factory):
    """Before: `rag-eval: No space left on device`: no path, and no word of the previous file."""
    fault = FAULTS["disk-result"]
    ws = copy_workspace(shared_workspace(tmp_path_factory), tmp_path_factory.mktemp("score") / "ws")
    disk = small_disk("256k")
    result = disk / "result.json"
    result.write_bytes(b'{"schema": "eval-result/1", "label": "the previous run"}\n')
    fill(disk)
    done = run(
        "rag-eval", "score", "--golden", "golden.yaml", "--label", "hash", "--out", result, "answers.jsonl", cwd=ws
    )  # fmt: skip
    one_line(fault, done, {str(result): "result.json"})
    assert result.read_bytes() == b'{"schema": "eval-result/1", "label": "the previous run"}\n'
    assert sorted(p.name for p in disk.iterdir()) == ["filler", "result.json"], "no temporary file left"


# --------------------------------------------------------------------------- a corrupt cache


def test_cache_that_is_not_a_database(tmp_path_factory):
    """Before: `sqlite3.DatabaseError: file is not a database`, with its traceback."""
    ws = copy_workspace(shared_workspace(tmp_path_factory), tmp_path_factory.mktemp("cache") / "ws")
    before = (ws / "chunks.jsonl").read_bytes()
    names = sorted(p.name for p in ws.iterdir())
    done = run("rag-embed", "--model", "hash", "--cache", "chunks.jsonl", "chunks.jsonl", cwd=ws)
    one_line(FAULTS["cache-not-sqlite"], done)
    assert done.stdout == b""
    assert (ws / "chunks.jsonl").read_bytes() == before and sorted(p.name for p in ws.iterdir()) == names


@pytest.fixture
def full_cache(tmp_path, corpus) -> Path:
    """A real cache of RECORDS vectors, written by rag-embed."""
    cache = tmp_path / "cache.sqlite"
    assert run("rag-embed", "--model", "hash", "--no-passages", "--cache", cache, corpus[0]).returncode == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cache.sqlite"], "the WAL was checkpointed into the file"
    return cache


def test_truncated_cache(full_cache, corpus):
    data = full_cache.read_bytes()
    full_cache.write_bytes(data[: len(data) // 2])
    done = run("rag-embed", "--model", "hash", "--no-passages", "--cache", full_cache, corpus[0])
    one_line(FAULTS["cache-truncated"], done, {str(full_cache): "cache.sqlite"})
    assert done.stdout == b"" and full_cache.read_bytes() == data[: len(data) // 2]


def test_search_with_a_truncated_cache(full_cache, tmp_path_factory):
    """rag-search (and rag-answer) open the same cache through RAG_EMBED_CACHE, and say the same."""
    ws = shared_workspace(tmp_path_factory)
    data = full_cache.read_bytes()
    full_cache.write_bytes(data[: len(data) // 2])
    done = run("rag-search", "--index", ws / "idx", "nightly sweep", env=stage_env(RAG_EMBED_CACHE=str(full_cache)))
    line = FAULTS["cache-truncated"].expect.replace("rag-embed:", "rag-search:")
    assert done.returncode == 1 and done.stderr.decode().replace(str(full_cache), "cache.sqlite") == line + "\n"


def test_cache_with_a_damaged_page(full_cache, corpus):
    """The header is sound, so sqlite opens the file; a query that reads the page finds the damage."""
    size = full_cache.stat().st_size
    with open(full_cache, "r+b") as handle:
        handle.seek(size // 2 // 4096 * 4096)
        handle.write(os.urandom(4 * 4096))
    done = run("rag-embed", "--model", "hash", "--no-passages", "--cache", full_cache, corpus[0])
    one_line(FAULTS["cache-damaged-page"], done, {str(full_cache): "cache.sqlite"})
    assert len(done.stdout.splitlines()) % rag_embed.WINDOW == 0, "whole windows only"


def test_cache_errors_in_process_name_the_file(tmp_path):
    """The core raises StageError, never sqlite3's exceptions, from the constructor, get and put."""
    bad = tmp_path / "notes.txt"
    bad.write_text("my notes\n" * 100)
    with pytest.raises(StageError, match=r"not a vector cache \(not an sqlite database\)") as err:
        rag_embed.Cache(bad, "hash:none")
    assert err.value.where == str(bad)
    cache = rag_embed.Cache(tmp_path / "c.sqlite", "hash:none")
    cache.db.close()  # a closed connection: sqlite3.ProgrammingError, still not a traceback
    with pytest.raises(StageError, match="cannot use the vector cache"):
        cache.get([b"k"])


# --------------------------------------------------------------------------- a corrupt model


def test_corrupt_model_says_how_to_fetch_it_again(tmp_path, monkeypatch):
    """A truncated model.onnx in the model cache (the real model cut short when it is fetched here,
    else a stand-in of the same kind): the hash mismatch names both hashes and how to fetch it again."""
    fault = FAULTS["model"]
    home = tmp_path / "models"
    folder = home / "all-MiniLM-L6-v2"
    folder.mkdir(parents=True)
    real = models.model_home() / "all-MiniLM-L6-v2"
    if (real / "model.onnx").is_file():
        data = (real / "model.onnx").read_bytes()
        (folder / "tokenizer.json").write_bytes((real / "tokenizer.json").read_bytes())
    else:
        data = b"\x08\x07\x12\x07pytorch" + os.urandom(1 << 20)  # an ONNX protobuf's first bytes, then noise
        (folder / "tokenizer.json").write_text("{}")
    (folder / "model.onnx").write_bytes(data[: len(data) // 2])
    done = run("rag-embed", stdin=b'{"id": "a", "text": "x"}\n', env=stage_env(RAG_MODEL_HOME=str(home)))
    one_line(fault, done)
    assert done.stdout == b""
    assert (folder / "model.onnx").read_bytes() == data[: len(data) // 2], "the file is left for the user to see"
    monkeypatch.setenv("RAG_MODEL_HOME", str(home))
    assert not rag_embed._usable("all-MiniLM-L6-v2"), "`just model` (rag-embed --fetch-model --if-missing) fetches it again"


def test_a_corrupt_model_outside_the_cache_says_what_fetching_does(tmp_path):
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "model.onnx").write_bytes(b"not the model")
    (folder / "tokenizer.json").write_text("{}")
    spec = models.KNOWN["all-MiniLM-L6-v2"]
    (folder / "ragline-model.json").write_bytes(orjson.dumps(spec.description(spec.onnx_sha256)))
    with pytest.raises(StageError) as err:
        rag_embed.load_embedder(str(folder), home=tmp_path / "models")
    assert err.value.where == str(folder)
    assert err.value.message.endswith(
        ": the file is damaged or replaced; put the right file there, or fetch the model into the model cache "
        "with 'rag-embed --fetch-model' and pass --model all-MiniLM-L6-v2"
    )
