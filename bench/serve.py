"""serve: rag-serve's /search and /answer on loopback under wrk, against the CLI asking the same questions one process each.

On the Northwind index (built into a temporary folder with all-MiniLM-L6-v2), the golden
questions in turn:

    concurrency  wrk -c 1, 8, 32 for `serve_seconds` each on GET /search?q= and POST /answer:
                 requests/s, p50 and p99 latency (wrk --latency), errors (socket errors,
                 timeouts and non-2xx responses)
    cli          `rag-search --index IDX --json Q` and `rag-answer --index IDX --json Q`, one
                 process per question (what a script does without the server): median wall
                 time; the ratio is the server's requests/s at concurrency 1 over the CLI's
                 questions/s
    soak         GET /search at concurrency 32 for `serve_soak_seconds`: every response 2xx,
                 no socket error, no timeout
    memory       the server's resident memory after the warm-up (every question once through
                 both routes) and again after at least
                 `serve_memory_requests` more requests (its /health counts them)

Neither side uses the embedding cache (RAG_EMBED_CACHE is unset for both): a question asked
again is embedded again. Targets: /search p50 <= 25 ms at concurrency 1; no error and no
5xx over the soak; resident memory grows < 10% over the requests.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from bench.harness import ROOT, bin_path, child_env, fmt, median, target
from bench.workload import MODEL, golden_questions

CONCURRENCY = (1, 8, 32)
ROUTES = ("search", "answer")


def sizes(quick: bool) -> dict[str, Any]:
    """Seconds per wrk run, the soak, the requests the memory figure spans, the CLI questions."""
    return {
        "serve_seconds": 3 if quick else 10,
        "serve_soak_seconds": 10 if quick else 60,
        "serve_memory_requests": 1000 if quick else 10_000,
        "serve_cli_questions": 3 if quick else 10,
        "serve_workers_runs": 1 if quick else 3,
    }


def _env() -> dict[str, str]:
    env = child_env()
    env.pop("RAG_EMBED_CACHE", None)
    return env


def build_index(tmp: Path) -> Path:
    """rag-chunk corpus | rag-embed (the cache `just` uses, if any) | rag-index: the Northwind index."""
    cache = ROOT / ".cache" / "embed-cache.sqlite"
    embed = [bin_path("rag-embed"), "--quiet", "--model", MODEL, *(["--cache", str(cache)] if cache.parent.is_dir() else [])]
    out = tmp / "idx"
    chunk = subprocess.Popen([bin_path("rag-chunk"), str(ROOT / "corpus")], stdout=subprocess.PIPE, env=_env())
    vectors = subprocess.Popen(embed, stdin=chunk.stdout, stdout=subprocess.PIPE, env=_env())
    assert chunk.stdout is not None and vectors.stdout is not None
    chunk.stdout.close()
    subprocess.run([bin_path("rag-index"), "--out", str(out), "--quiet"], stdin=vectors.stdout, check=True, env=_env())
    vectors.stdout.close()
    if chunk.wait() or vectors.wait():
        raise RuntimeError("building the Northwind index failed")
    return out


def start(index: Path, log: Path, *flags: str) -> tuple[subprocess.Popen[bytes], str]:
    with open(log, "wb") as handle:
        proc = subprocess.Popen([bin_path("rag-serve"), "--index", str(index), "--port", "0", "--quiet", *flags], stderr=handle, env=_env())
    for _ in range(1200):
        if m := re.search(r"at (http://\S+)/", log.read_text()):
            return proc, m.group(1)
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    proc.kill()
    raise RuntimeError(f"rag-serve did not start: {log.read_text()}")


def lua(questions: list[str]) -> str:
    """A wrk script asking the questions in turn, GET /search or POST /answer by `route` (wrk's first argument)."""
    gets = ", ".join(json.dumps(urllib.parse.quote(q)) for q in questions)
    posts = ", ".join(json.dumps(json.dumps({"question": q})) for q in questions)
    return f"""
local gets = {{{gets}}}
local posts = {{{posts}}}
local route = "search"
local i = 0
function init(args) route = args[1] or "search" end
function request()
  i = i + 1
  if route == "answer" then
    return wrk.format("POST", "/answer", {{["Content-Type"] = "application/json"}}, posts[(i % #posts) + 1])
  end
  return wrk.format("GET", "/search?q=" .. gets[(i % #gets) + 1])
end
"""


_UNIT = {"us": 1e-3, "ms": 1.0, "s": 1000.0, "m": 60_000.0}


def _ms(text: str) -> float:
    m = re.fullmatch(r"([\d.]+)(us|ms|s|m)", text)
    if not m:
        raise ValueError(f"wrk latency {text!r}")
    return float(m.group(1)) * _UNIT[m.group(2)]


def parse_wrk(out: str) -> dict[str, Any]:
    """requests, requests/s, p50/p99 ms and the error counts of a `wrk --latency` report."""
    pct = {m.group(1): _ms(m.group(2)) for m in re.finditer(r"^\s+(50|75|90|99)%\s+(\S+)\s*$", out, re.M)}
    total = re.search(r"(\d+) requests in", out)
    rps = re.search(r"Requests/sec:\s+([\d.]+)", out)
    sock = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    errors = sum(int(x) for x in sock.groups()) if sock else 0
    return {
        "requests": int(total.group(1)) if total else 0,
        "rps": round(float(rps.group(1)), 2) if rps else 0.0,
        "p50_ms": round(pct.get("50", float("nan")), 2),
        "p99_ms": round(pct.get("99", float("nan")), 2),
        "socket_errors": errors,
        "non_2xx": int(non2xx.group(1)) if non2xx else 0,
    }


def wrk(url: str, script: Path, route: str, connections: int, seconds: int) -> dict[str, Any]:
    threads = min(connections, 2)
    cmd = [
        "wrk",
        "-t",
        str(threads),
        "-c",
        str(connections),
        "-d",
        f"{seconds}s",
        "--latency",
        "--timeout",
        "30s",
        "-s",
        str(script),
        url,
        "--",
        route,
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds + 120)
    if done.returncode:
        raise RuntimeError(f"wrk failed: {done.stderr.strip()}")
    return parse_wrk(done.stdout)


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def served(url: str) -> int:
    with urllib.request.urlopen(url + "/health", timeout=60) as response:
        return int(json.loads(response.read())["requests"])


def warm_up(url: str, questions: list[str]) -> None:
    """Every question once through /search and /answer: the timed runs see the server as it runs for long
    (the answer stage keeps the vectors of the sentences it has scored)."""
    for q in questions:
        urllib.request.urlopen(f"{url}/search?{urllib.parse.urlencode({'q': q})}", timeout=60).read()
        body = json.dumps({"question": q}).encode()
        request = urllib.request.Request(f"{url}/answer", body, {"Content-Type": "application/json"})
        urllib.request.urlopen(request, timeout=60).read()


def cli_seconds(stage: str, index: Path, questions: list[str]) -> list[float]:
    """Wall time of one `STAGE --index IDX --json Q` process per question."""
    times = []
    for q in questions:
        t0 = time.perf_counter()
        subprocess.run([bin_path(stage), "--index", str(index), "--json", q], stdout=subprocess.DEVNULL, check=True, env=_env())
        times.append(time.perf_counter() - t0)
    return times


def children(pid: int) -> list[int]:
    return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


SERVERS = {"1": (), "1, --threads 1": ("--threads", "1"), "2": ("--workers", "2")}  # "1": the one-process server of the section


def workers(index: Path, script: Path, questions: list[str], one: str, one_pid: int, tmp: Path, runs: int, seconds: int) -> dict[str, Any]:
    """`--workers 2` (whose workers get one onnxruntime thread each) against the one-process server `one` (one
    thread per core) and against one process with one thread: wrk at concurrency 8 on both routes, the servers'
    runs interleaved (median of `runs`), and the resident memory of each worker after the warm-up."""
    procs, urls = {}, {"1": one}
    try:
        for name, flags in SERVERS.items():
            if flags:
                procs[name], urls[name] = start(index, tmp / f"serve-{len(procs)}.log", *flags)
                warm_up(urls[name], questions)
                warm_up(urls[name], questions)  # connections land on either worker: each has seen the questions
        got: dict[str, dict[str, list[dict[str, Any]]]] = {route: {name: [] for name in SERVERS} for route in ROUTES}
        for _ in range(runs):
            for route in ROUTES:
                for name in SERVERS:
                    got[route][name].append(wrk(urls[name], script, route, 8, seconds))
        out: dict[str, Any] = {"concurrency": 8, "runs": runs, "routes": {}}
        for route, by in got.items():
            out["routes"][route] = {name: sorted(r, key=lambda x: x["rps"])[len(r) // 2] for name, r in by.items()}  # the median run, whole
            rps = {name: out["routes"][route][name]["rps"] for name in SERVERS}
            out["routes"][route]["ratio"] = round(rps["2"] / rps["1"], 3)
            out["routes"][route]["ratio_same_threads"] = round(rps["2"] / rps["1, --threads 1"], 3)
        out["rss_mib"] = {
            "1 worker": round(rss_kib(one_pid) / 1024, 1),
            "2 workers, each": [round(rss_kib(c) / 1024, 1) for c in children(procs["2"].pid)],
            "2 workers, parent": round(rss_kib(procs["2"].pid) / 1024, 1),
        }
        return out
    finally:
        for proc in procs.values():
            proc.terminate()
            proc.wait(60)


def run(sizes: dict[str, Any]) -> dict[str, Any]:
    fig: dict[str, Any] = {}
    targets: list[dict[str, Any]] = []
    notes: list[str] = []
    if shutil.which("wrk") is None or not Path(bin_path("rag-serve")).exists():
        why = (
            "wrk is not installed (apt-get install wrk)"
            if shutil.which("wrk") is None
            else "rag-serve is not installed (pip install -e '.[serve]')"
        )
        for name, limit, unit in (
            ("/search p50 at concurrency 1", 25, "ms"),
            ("errors and 5xx over the soak", 0, ""),
            ("memory growth", 10, "%"),
        ):
            targets.append(target("serve", name, None, "<=", limit, unit, why))
        return {"figures": fig, "targets": targets, "notes": [why]}
    questions = [q["question"] for q in golden_questions()]
    tmp = Path(tempfile.mkdtemp(prefix="ragline-bench-serve-"))
    proc = None
    try:
        index = build_index(tmp)
        script = tmp / "ask.lua"
        script.write_text(lua(questions))
        proc, url = start(index, tmp / "serve.log")
        fig["questions"] = len(questions)
        warm_up(url, questions)
        base_rss, base_served = rss_kib(proc.pid), served(url)
        fig["routes"] = {route: {str(c): wrk(url, script, route, c, sizes["serve_seconds"]) for c in CONCURRENCY} for route in ROUTES}
        asked = questions[: sizes["serve_cli_questions"]]
        fig["cli"] = {}
        for route, stage in (("search", "rag-search"), ("answer", "rag-answer")):
            wall = cli_seconds(stage, index, asked)
            server_rps = fig["routes"][route]["1"]["rps"]
            fig["cli"][route] = {
                "command": f"{stage} --index IDX --json QUESTION",
                "questions": len(asked),
                "median_ms": round(median(wall) * 1000, 1),
                "questions_per_s": round(1 / median(wall), 3),
                "server_over_cli": round(server_rps * median(wall), 1),
            }
        fig["workers"] = workers(index, script, questions, url, proc.pid, tmp, sizes["serve_workers_runs"], sizes["serve_seconds"])
        ratio = fig["workers"]["routes"]["search"]["ratio"]
        targets.append(target("serve", "GET /search requests/s at concurrency 8, 2 workers over 1", ratio, ">=", 1.3, "x"))
        same = fig["workers"]["routes"]["search"]["ratio_same_threads"]
        targets.append(
            target(
                "serve", "GET /search requests/s at concurrency 8, 2 workers over 1 with one onnxruntime thread each", same, ">=", 1.3, "x"
            )
        )
        soak = wrk(url, script, "search", 32, sizes["serve_soak_seconds"])
        fig["soak"] = soak | {"seconds": sizes["serve_soak_seconds"], "concurrency": 32}
        while served(url) - base_served < sizes["serve_memory_requests"]:
            wrk(url, script, "search", 8, 5)
        end_rss, end_served = rss_kib(proc.pid), served(url)
        growth = 100.0 * (end_rss - base_rss) / base_rss
        fig["memory"] = {
            "rss_start_mib": round(base_rss / 1024, 1),
            "rss_end_mib": round(end_rss / 1024, 1),
            "requests": end_served - base_served,
            "growth_pct": round(growth, 2),
        }
        p50 = fig["routes"]["search"]["1"]["p50_ms"]
        targets.append(target("serve", "/search p50 at concurrency 1", p50, "<=", 25, "ms"))
        errors = soak["socket_errors"] + soak["non_2xx"]
        targets.append(target("serve", f"errors and 5xx over {sizes['serve_soak_seconds']} s at concurrency 32", errors, "<=", 0, ""))
        targets.append(target("serve", f"memory growth over {fig['memory']['requests']:,} requests", growth, "<=", 10, "%"))
        notes.append(
            "one rag-serve process runs the work on one thread in arrival order (the rest of a request is Python under the interpreter's lock): "
            "concurrency adds queueing, not throughput; --workers N adds interpreters, and on 2 cores wrk takes its share of them"
        )
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(60)
        shutil.rmtree(tmp, ignore_errors=True)
    return {"figures": fig, "targets": targets, "notes": notes}


def render(f: dict[str, Any]) -> list[str]:
    """The section's lines of results/bench.md: the routes by concurrency, the CLI beside them, the soak and memory."""
    if not f.get("routes"):
        return []
    lines = [
        "",
        f"**rag-serve** (wrk on loopback, the {f['questions']} golden questions in turn, Northwind index; "
        "the CLI: one process per question)",
        "",
        "| Route | concurrency | requests/s | p50 ms | p99 ms | errors |",
        "|---|---|---|---|---|---|",
    ]
    for route, runs in f["routes"].items():
        path = "GET /search" if route == "search" else "POST /answer"
        for c, r in runs.items():
            lines.append(
                f"| {path} | {c} | {fmt(r['rps'], 1)} | {fmt(r['p50_ms'], 1)} | {fmt(r['p99_ms'], 1)} | {r['socket_errors'] + r['non_2xx']} |"
            )
    for c in f.get("cli", {}).values():
        lines.append(f"| `{c['command']}` | 1 | {fmt(c['questions_per_s'], 2)} | {fmt(c['median_ms'], 0)} | - | - |")
    lines += ["", "| Server against CLI (requests/s at concurrency 1 over questions/s) | ratio |", "|---|---|"]
    for route, c in f.get("cli", {}).items():
        lines.append(f"| {route} | {fmt(c['server_over_cli'], 1)}x |")
    if w := f.get("workers"):
        lines += [
            "",
            f"**rag-serve --workers** (wrk at concurrency {w['concurrency']}, the two servers' runs interleaved, median of {w['runs']})",
            "",
            "| Route | workers | requests/s | p50 ms | p99 ms | errors | 2 over 1 (over 1 with one thread) |",
            "|---|---|---|---|---|---|---|",
        ]
        for route, r in w["routes"].items():
            path = "GET /search" if route == "search" else "POST /answer"
            for n in [k for k in r if k not in ("ratio", "ratio_same_threads")]:
                x = r[n]
                ratio = f"{r['ratio']:.2f}x ({r['ratio_same_threads']:.2f}x)" if n == "2" and "ratio_same_threads" in r else ""
                lines.append(
                    f"| {path} | {n} | {fmt(x['rps'], 1)} | {fmt(x['p50_ms'], 1)} | {fmt(x['p99_ms'], 1)} | {x['socket_errors'] + x['non_2xx']} | {ratio} |"
                )
        m = w["rss_mib"]
        each = ", ".join(f"{fmt(x, 1)}" for x in m["2 workers, each"])
        lines += [
            "",
            f"Resident memory: one worker {fmt(m['1 worker'], 1)} MiB; two workers {each} MiB each, and the parent {fmt(m['2 workers, parent'], 1)} MiB.",
        ]
    s, m = f["soak"], f["memory"]
    lines += [
        "",
        f"Soak: GET /search at concurrency {s['concurrency']} for {s['seconds']} s: {s['requests']:,} requests, "
        f"{s['non_2xx']} non-2xx, {s['socket_errors']} socket errors or timeouts, p99 {fmt(s['p99_ms'], 0)} ms. "
        f"Resident memory {fmt(m['rss_start_mib'], 1)} MiB after the warm-up, {fmt(m['rss_end_mib'], 1)} MiB "
        f"{m['requests']:,} requests later ({m['growth_pct']:+.1f}%).",
    ]
    return lines
