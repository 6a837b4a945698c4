"""SIGKILL at random moments: the helpers of tests/test_crash.py, and the kill loop at scale.

    python tests/support/killing.py                   # `just reliability`: 100,000 chunks, 50 kills
    python tests/support/killing.py --records 4000 --kills 6 --out /tmp/sigkill.json

The loop builds an index of `--records` chunks (synthetic: random unit vectors of 384 values,
texts of 20 words drawn from a small vocabulary), then rebuilds it from two corpora in turn
until `--kills` rebuilds have been killed with SIGKILL (`kill_loop`: half at a random moment of
the whole run, half at a random moment of the writing and the swap), while a reader runs
`rag-search` against the index over and over. After every rebuild it checks that the index
loads (`rag_index.load`: every file against the manifest's sizes and sha256s), is the old
corpus or the new one, answers a query through `rag-search`, and that no more than
`rag_index.DEAD_BOUND` dead generations (and one `.CURRENT.*.tmp`) lie beside the live one.
Every query of the reader must answer. The figures go to results/sigkill.json, whose
`markdown` the reliability section of docs/reliability.md shows (`just docs`).
"""

from __future__ import annotations

import argparse
import platform
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import numpy as np
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))

from stagecli import ROOT, command, live_generation, run, stage_env

sys.path.insert(0, str(ROOT))

import rag_index

QUERY = b'{"id": "q", "question": "nightly settlement sweep"}\n'
WORDS = np.array(
    "the sweep runs nightly settlement batch payout refund webhook retry key idempotency charge capture ledger acquirer timeout".split()
)
DIM = 384


def embedded_corpus(path: Path, seed: int, n: int, words: int = 60) -> str:
    """n embedded chunk records with random unit vectors; returns the corpus digest rag-index will record."""
    rng = np.random.default_rng(seed)
    digest_of = []
    with open(path, "wb") as out:
        for start in range(0, n, 10_000):
            m = min(10_000, n - start)
            vectors = rng.standard_normal((m, DIM)).astype(np.float32)
            vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
            picks = WORDS[rng.integers(0, len(WORDS), (m, words))]
            for j in range(m):
                i = start + j
                doc = f"doc{i // 20:05d}"
                record = {
                    "schema": "chunk/1",
                    "id": f"{doc}#s{i}",
                    "doc": doc,
                    "headings": [doc.title(), f"Section {i}"],
                    "text": " ".join(picks[j]) + f" (corpus {seed}, chunk {i}).",
                    "vector": vectors[j],
                    "model": "hash",
                    "embed_headings": True,
                    "window": 180,
                }
                out.write(orjson.dumps(record, option=orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_APPEND_NEWLINE))
                digest_of.append({"id": record["id"], "text": record["text"]})
    return rag_index.corpus_digest(digest_of)


class Clock:
    """How long an uninterrupted run takes: the calibration, raised by any slower run seen since
    (a busy machine drifts), so the moments chosen keep covering the whole run."""

    def __init__(self, seconds: float):
        self.seconds = seconds

    def saw(self, seconds: float) -> None:
        self.seconds = max(self.seconds, seconds)


def kill_after(
    argv: list[str], delay: float, cwd: Path, clock: Clock, sig: int = signal.SIGKILL, start_when: Callable[[], bool] | None = None
) -> tuple[bool, int, str]:
    """Start argv, send `sig` after `delay` seconds (counted from when `start_when()` first holds,
    if given) unless it ended first: (signalled, exit code, stderr). A run that ended tells `clock`
    how long it took (from that same moment)."""
    with open(cwd / ".stderr", "w+b") as err:
        start = time.perf_counter()
        proc = subprocess.Popen(argv, cwd=cwd, env=stage_env(), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err)
        if start_when is not None:
            while proc.poll() is None and not start_when():
                time.sleep(0.002)
            start = time.perf_counter()
        try:
            code = proc.wait(timeout=delay)
            signalled = False
            clock.saw(time.perf_counter() - start)
        except subprocess.TimeoutExpired:
            proc.send_signal(sig)
            code = proc.wait(timeout=60)
            signalled = True
        err.seek(0)
        text = err.read().decode("utf-8", "replace")
    (cwd / ".stderr").unlink()
    return signalled, code, text


def moments(clock: Clock, rng: random.Random, seen: Counter, aims: dict[str, tuple[float, float]], trials: int = 20, span: float = 1.6):
    """When to strike: one random moment in each of `trials` equal slices of [0, span x the run],
    shuffled, so every phase (start-up, reading, building, the swap, after the end) gets kills.
    Then, while a phase named in `aims` (phase: its share of the run, low to high) has never been
    seen in `seen`, up to ten more moments aimed at it: the checks hold for every trial, and this
    makes sure the trials did reach each phase, even when the machine is busy."""
    slices = [(i + rng.random()) / trials for i in range(trials)]
    rng.shuffle(slices)
    for share in slices:
        yield share * span * clock.seconds
    for _ in range(10):
        missing = [phase for phase in aims if not seen[phase]]
        if not missing:
            return
        low, high = aims[missing[0]]
        yield rng.uniform(low, high) * clock.seconds


def timed_build(argv: list[str], idx: Path) -> tuple[float, float]:
    """One uninterrupted build: (its seconds, the seconds until its generation's folder appeared)."""
    before = {p.name for p in idx.iterdir()}
    start = time.perf_counter()
    proc = subprocess.Popen(argv, env=stage_env(), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
    appeared = None
    while proc.poll() is None:
        if appeared is None and any(p.name.startswith("gen-") and p.name not in before for p in idx.iterdir()):
            appeared = time.perf_counter() - start
        time.sleep(0.005)
    seconds = time.perf_counter() - start
    assert proc.returncode == 0, f"the calibration build failed (exit {proc.returncode})"
    return seconds, appeared or seconds


def search_answers(index: Path, k: int = 3) -> tuple[bool, str]:
    """Does `rag-search` answer a query on this index with k hits? (answered, its stderr)"""
    done = run("rag-search", "--index", index, "-k", str(k), stdin=QUERY)
    stderr = done.stderr.decode("utf-8", "replace")
    return done.returncode == 0 and len(orjson.loads(done.stdout)["hits"]) == k, stderr


class Reader(threading.Thread):
    """Runs `rag-search` on the index, one process after another, until `stop` is set."""

    def __init__(self, index: Path):
        super().__init__(daemon=True)
        self.index = index
        self.stop = threading.Event()
        self.seconds: list[float] = []
        self.failures: list[str] = []

    def run(self) -> None:
        while not self.stop.is_set():
            start = time.perf_counter()
            answered, stderr = search_answers(self.index)
            self.seconds.append(time.perf_counter() - start)
            if not answered:
                self.failures.append(stderr.strip() or "no hits")


def new_generations(idx: Path, before: set[str]) -> set[str]:
    return {p.name for p in idx.iterdir() if p.name.startswith("gen-")} - before


def leftovers(idx: Path) -> tuple[list[str], list[str], list[str]]:
    """What lies beside the live generation: (dead generations, CURRENT temp files, anything else)."""
    live = live_generation(idx).name
    names = [p.name for p in idx.iterdir() if p.name not in ("CURRENT", rag_index.LOCK, live)]
    dead = [n for n in names if n.startswith("gen-")]
    temps = [n for n in names if n.startswith(".CURRENT.") and n.endswith(".tmp")]
    return dead, temps, sorted(set(names) - set(dead) - set(temps))


class Latest(Clock):
    """The duration of the latest uninterrupted run (a machine that others share speeds up and slows down)."""

    def saw(self, seconds: float) -> None:
        self.seconds = seconds


PHASES = ("killed before writing", "killed while writing", "killed after the swap", "finished before the kill")


def kill_loop(work: Path, records: int, kills: int, seed: int = 20_240_611, say=lambda line: None) -> dict:
    """Rebuild an index until `kills` rebuilds have been killed with SIGKILL, a reader running
    throughout; AssertionError at the first check that fails. Returns the figures.

    Half the kills come at a random moment of the whole run (uniform over the latest
    uninterrupted build's duration), half at a random moment after the new generation's folder
    appears (uniform over the latest writing phase's duration): the writing and the swap are a
    few percent of a run, and they are where a crash could leave a broken index. A rebuild that
    finishes before its kill comes is checked the same way and does not count as a kill.
    """
    began = time.perf_counter()
    corpora = {
        name: (work / f"{name}.jsonl", embedded_corpus(work / f"{name}.jsonl", s, records, words=20)) for name, s in (("A", 1), ("B", 2))
    }
    say(f"corpora written ({records:,} records each) in {time.perf_counter() - began:.0f} s")
    idx = work / "idx"
    index = [*command("rag-index"), "--out", str(idx)]
    assert subprocess.run([*index, str(corpora["A"][0])], env=stage_env()).returncode == 0
    reader = Reader(idx)
    reader.start()
    try:  # the calibration runs beside the reader, as every rebuild will
        build_seconds, writes_from = timed_build([*index, str(corpora["B"][0])], idx)
    except BaseException:
        reader.stop.set()
        raise
    clocks = {"run": Latest(build_seconds), "writing": Latest(build_seconds - writes_from)}
    say(f"a full build: {build_seconds:.1f} s, writing its generation from {writes_from:.1f} s")
    size = sum(p.stat().st_size for p in live_generation(idx).rglob("*") if p.is_file())
    rng = random.Random(seed)
    current, worst = "B", Counter()
    seen = {"run": Counter(), "writing": Counter()}
    trials = 0
    try:
        while True:
            done = {k: sum(seen[k][p] for p in PHASES[:3]) for k in seen}  # kills so far, by aim
            if sum(done.values()) >= kills:
                break
            run_left, writing_left = done["run"] < kills - kills // 2, done["writing"] < kills // 2
            aim = "run" if run_left and (done["run"] <= done["writing"] or not writing_left) else "writing"
            delay = rng.random() * clocks[aim].seconds
            new = "A" if current == "B" else "B"
            gens_before = new_generations(idx, set())
            writing = (lambda before=gens_before: bool(new_generations(idx, before))) if aim == "writing" else None
            killed, code, stderr = kill_after([*index, str(corpora[new][0])], delay, work, clocks[aim], start_when=writing)
            assert (killed and stderr == "") or (code, stderr) == (0, ""), f"trial {trials}: exit {code}, {stderr!r}"
            loaded = rag_index.load(idx)  # the manifest check: every file's size and sha256
            digest = loaded.manifest["corpus_digest"]
            assert digest in (corpora[current][1], corpora[new][1]), f"trial {trials}: the index is neither the old nor the new corpus"
            assert len(loaded.chunks) == records == loaded.vectors.shape[0]
            del loaded
            answered, why = search_answers(idx)
            assert answered, f"trial {trials}: rag-search did not answer: {why}"
            dead, temps, other = leftovers(idx)
            assert len(dead) <= rag_index.DEAD_BOUND and len(temps) <= 1 and not other, f"trial {trials}: {dead} {temps} {other}"
            worst["dead"] = max(worst["dead"], len(dead))
            worst["temps"] = max(worst["temps"], len(temps))
            outcome = "new" if digest == corpora[new][1] else "old"
            wrote = bool(new_generations(idx, gens_before)) or outcome == "new"
            phase = PHASES[3] if not killed else PHASES[2] if outcome == "new" else PHASES[1] if wrote else PHASES[0]
            seen[aim][phase] += 1
            worst[outcome] += 1
            current = new if outcome == "new" else current
            trials += 1
            say(
                f"trial {trials}: {delay:.1f} s into the {aim}: {phase}; dead generations {len(dead)}; reader {len(reader.seconds)} queries"
            )
    finally:
        reader.stop.set()
        reader.join()
    assert not reader.failures, f"the reader failed {len(reader.failures)} times: {reader.failures[:3]}"
    assert subprocess.run([*index, str(corpora["A" if current == "B" else "B"][0])], env=stage_env()).returncode == 0
    assert leftovers(idx) == ([], [], []), "a complete build sweeps every leftover away"
    return {
        "records": records,
        "dim": DIM,
        "index_bytes": size,
        "build_seconds": round(build_seconds, 2),
        "writing_from_seconds": round(writes_from, 2),
        "rebuilds": trials,
        "kills": kills,
        "phases": {aim: {p: seen[aim][p] for p in PHASES} for aim in seen},
        "outcomes": {"old": worst["old"], "new": worst["new"]},
        "checks_passed": trials,
        "max_dead_generations": worst["dead"],
        "max_current_temps": worst["temps"],
        "dead_bound": rag_index.DEAD_BOUND,
        "reader": {
            "queries": len(reader.seconds),
            "failed": len(reader.failures),
            "median_seconds": round(statistics.median(reader.seconds), 2) if reader.seconds else None,
            "max_seconds": round(max(reader.seconds), 2) if reader.seconds else None,
        },
        "seconds": round(time.perf_counter() - began),
    }


def markdown(f: dict) -> str:
    run, writing = f["phases"]["run"], f["phases"]["writing"]
    rows = [
        (label, run[p], writing[p])
        for label, p in zip(
            (
                "killed before writing a generation (reading the records, building BM25)",
                "killed while writing a generation (left dead beside the live one)",
                "killed after the swap (the new index live, the old one perhaps not yet swept)",
                "finished before its kill came (not counted as a kill)",
            ),
            PHASES,
            strict=True,
        )
    ]
    table = "".join(f"| {label} | {a} | {b} |\n" for label, a, b in rows)
    return (
        f"SIGKILL at scale, by `just reliability` (`tests/support/killing.py`): an index of {f['records']:,} chunks "
        f"({f['dim']}-value synthetic vectors; {f['index_bytes'] / 1e6:.0f} MB on disk; a full build {f['build_seconds']} s, "
        f"writing its generation from {f['writing_from_seconds']} s) rebuilt from two corpora in turn until {f['kills']} rebuilds "
        "had been killed with SIGKILL, half at a random moment of the whole run, half at a random moment of its writing and swap "
        "(a few percent of a run, and where a crash could break an index), while a reader ran `rag-search` on it throughout.\n\n"
        "| rebuilds | kill at a moment of the run | kill at a moment of the writing |\n| --- | ---: | ---: |\n"
        + table
        + "\n| after each of the "
        + f"{f['rebuilds']} rebuilds | |\n| --- | ---: |\n"
        f"| the index loads, passes its manifest check (sizes, sha256) and `rag-search` answers | {f['checks_passed']} of {f['rebuilds']} |\n"
        f"| it is the old corpus / the new one (never a mixture) | {f['outcomes']['old']} / {f['outcomes']['new']} |\n"
        f"| dead generations beside the live one, the most seen (bound: {f['dead_bound']}) | {f['max_dead_generations']} |\n"
        f"| `.CURRENT.*.tmp` files beside it, the most seen (bound: 1) | {f['max_current_temps']} |\n\n"
        f"The reader: {f['reader']['queries'] - f['reader']['failed']} `rag-search` runs answered, {f['reader']['failed']} failed "
        f"(seconds per run, a process that starts, loads the index and queries it: median {f['reader']['median_seconds']}, "
        f"max {f['reader']['max_seconds']}). The next complete build swept every leftover away. "
        f"Wall time {f['seconds'] / 60:.1f} min."
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--kills", type=int, default=50)
    parser.add_argument("--seed", type=int, default=20_240_611)
    parser.add_argument("--out", type=Path, default=ROOT / "results" / "sigkill.json")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="ragline-sigkill-") as tmp:
        figures = kill_loop(Path(tmp), args.records, args.kills, args.seed, say=lambda line: print(line, file=sys.stderr, flush=True))
    missed = [p for p in PHASES[:2] if not sum(by_aim[p] for by_aim in figures["phases"].values())]
    assert not missed, f"no kill landed {' or '.join(p.removeprefix('killed ') for p in missed)}: {figures['phases']}"
    report = {
        "schema": "sigkill/1",
        **figures,
        "machine": {"python": platform.python_version(), "system": platform.system(), "processor": platform.machine()},
    }
    report["markdown"] = markdown(figures)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_bytes(orjson.dumps(report, option=orjson.OPT_INDENT_2) + b"\n")
    print(
        f"{figures['rebuilds']} rebuilds ({figures['kills']} killed), every check passed; reader {figures['reader']['queries']} queries, none failed -> {args.out}"
    )


if __name__ == "__main__":
    main()
