"""The hostile battery (`just hostile`): rag-serve on loopback under load, idle and slow sockets, heavy
and forged requests, and a damaged index pointer, all at once; results/hostile.json and docs/reliability.md.

    python tests/support/hostile.py                                  # `just hostile`: about a minute
    python tests/support/hostile.py --seconds 10 --out /tmp/hostile.json

It builds an index of the repository's corpus with the `hash` embedder (no model needed; the
server's defences do not depend on the model), starts `rag-serve` with an open-file limit of
`--files` (as `ulimit -n`), and for `--seconds` runs, side by side:

- `--clients` client threads asking /search and /answer the golden questions over and over;
- a probe asking /health every 0.2 s, timing each answer;
- `--idle` sockets more than the open-file limit that connect and never send a byte, opened
  in waves, and `--slow` sockets sending a request head a byte a second;
- heavy requests (the issue's 64 questions of 1,000 characters with k=1000), forged access-log
  lines (a %0a newline, a %1b escape), a body that never finishes;
- round three (issue 32): waves of `--stalled` connections that send a request head and hold
  back the body, a client pipelining requests it never reads, requests naming another `Host:`
  (DNS rebinding: 421) and chunked bodies with a malformed chunk size (400);
- the index pointer damaged four times (bytes that are not a generation's name, a directory,
  a FIFO, a symbolic link to /dev/zero), then repaired by a rebuild (`rag-index --out` over
  the damaged pointer).
- round four (issue 40, `hostile_four.py`), after the load: each attack once, its seconds and
  peak resident set (the local model's attacks where `just llm-model` has run).

Every request must get an HTTP answer (nothing lost: no connection error, no 5xx), /health must
answer throughout, the access log must hold no forged line, no escape byte and no traceback,
and the rebuilt generation must be served at the end. The figures go to results/hostile.json,
whose `markdown` docs/reliability.md shows (`just docs`).
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))

import hostile_four
from stagecli import ROOT, run

from ragline import serving as policy

FOREIGN = b"GET /search?q=sweep HTTP/1.1\r\nHost: attacker.example\r\nConnection: close\r\n\r\n"
MALFORMED = b"POST /search HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n\r\nffffffffffffffffffff\r\n"
STALLED = b"POST /search HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n"
UNREAD = b"GET /openapi.json HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n" * 400  # about 9 MB of answers
POINTER_FAULTS = {  # what /health's reload_error says for each fault of the pointer
    "bytes": "not the name of a generation",
    "directory": "a directory, not a file",
    "fifo": "a FIFO, not a file",
    "symlink": "a symbolic link, not a file",
}
FORGED = b"GET /x%0arag-serve:%20GET%20/admin%20200%201.0%20ms HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
ESCAPE = b"GET /%1b%5b2J%07 HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"


def build(work: Path) -> tuple[Path, bytes]:
    chunks = run("rag-chunk", ROOT / "corpus")
    embedded = run("rag-embed", "--model", "hash", "--quiet", stdin=chunks.stdout)
    done = run("rag-index", "--out", work / "idx", "--quiet", stdin=embedded.stdout)
    assert done.returncode == 0, done.stderr
    return work / "idx", embedded.stdout


def start(index: Path, files: int, log: Path) -> tuple[subprocess.Popen[bytes], str]:
    proc, url = hostile_four.launch(index, log, files=files)
    if url is None:
        raise SystemExit(f"rag-serve did not start: {log.read_text(errors='replace')}")
    return proc, url


request = hostile_four.request


def closed_by_server(sock: socket.socket, timeout: float = 0.05) -> bool:
    """Whether the server has closed `sock` (what it sent first, a 408 or answers, read past); the socket is closed after."""
    sock.settimeout(timeout)
    try:
        while sock.recv(1 << 20):
            pass
        return True
    except ConnectionResetError:
        return True
    except OSError:  # nothing more within `timeout`: still open
        return False
    finally:
        sock.close()


def post(path: str, body: dict) -> bytes:
    data = orjson.dumps(body)
    head = f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {len(data)}\r\nConnection: close\r\n\r\n"
    return head.encode() + data


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=40.0)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--files", type=int, default=1024, help="rag-serve's open-file limit (ulimit -n)")
    parser.add_argument("--idle", type=int, default=1030, help="idle sockets held open at once, in waves")
    parser.add_argument("--slow", type=int, default=20, help="sockets sending a head a byte a second")
    parser.add_argument("--stalled", type=int, default=200, help="sockets sending a head and holding back the body, in waves")
    parser.add_argument("--out", type=Path, default=ROOT / "results" / "hostile.json")
    args = parser.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = args.idle + args.slow + args.stalled + args.clients + 256  # this process holds the idle sockets
    if soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(want, hard) if hard != resource.RLIM_INFINITY else want, hard))
    questions = [q["question"] for q in map(orjson.loads, run("rag-eval", "questions", ROOT / "golden.yaml").stdout.splitlines())]
    with tempfile.TemporaryDirectory(prefix="ragline-hostile-") as tmp:
        work = Path(tmp)
        index, embedded = build(work)
        first = (index / "CURRENT").read_text().strip()
        log = work / "serve.log"
        proc, url = start(index, args.files, log)
        host, port = url.removeprefix("http://").rsplit(":", 1)
        address = (host, int(port))
        stop = threading.Event()
        statuses: Counter[int] = Counter()
        kinds: Counter[str] = Counter()
        lock = threading.Lock()
        health_ms: list[float] = []
        health_bad = [0]
        reload_errors: set[str] = set()
        idle_opened = [0]
        idle_closed = [0]
        slow_closed = [0]
        stalled_opened = [0]
        stalled_closed = [0]
        unread = {"sent": 0, "cut": 0}

        def count(kind: str, status: int) -> None:
            with lock:
                statuses[status] += 1
                kinds[kind] += 1

        def client(n: int) -> None:
            i = n
            while not stop.is_set():
                q = questions[i % len(questions)]
                i += 1
                kind = "search" if i % 2 else "answer"
                count(kind, request(address, post(f"/{kind}", {"question": q, "k": 5})))

        def probe() -> None:
            while not stop.is_set():
                start_ = time.monotonic()
                try:
                    with socket.create_connection(address, timeout=10) as sock:
                        sock.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
                        data = b""
                        while chunk := sock.recv(65536):
                            data += chunk
                    health_ms.append((time.monotonic() - start_) * 1000)
                    body = orjson.loads(data.split(b"\r\n\r\n", 1)[1])
                    if body.get("reload_error"):
                        reload_errors.add(body["reload_error"])
                except (OSError, ValueError, IndexError):
                    health_bad[0] += 1
                time.sleep(0.2)

        def idle_waves() -> None:
            while not stop.is_set():
                socks = []
                for _ in range(args.idle):
                    try:
                        socks.append(socket.create_connection(address, timeout=5))
                    except OSError:
                        break
                idle_opened[0] += len(socks)
                time.sleep(policy.HEAD_TIMEOUT + 3)  # from the connect; the server may accept a burst a moment later
                idle_closed[0] += sum(closed_by_server(s) for s in socks)

        def slow_one() -> None:
            try:
                with socket.create_connection(address, timeout=5) as sock:
                    for byte in b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " + b"a" * 60:
                        if stop.is_set():
                            return
                        sock.send(bytes([byte]))
                        time.sleep(1.0)
            except OSError:
                with lock:
                    slow_closed[0] += 1

        def stalled_waves() -> None:
            """Heads whose bodies never come: each is closed by the server (for a newcomer, or at BODY_TIMEOUT)."""
            while not stop.is_set():
                socks = []
                for _ in range(args.stalled):
                    try:
                        sock = socket.create_connection(address, timeout=5)
                        sock.sendall(STALLED)
                        socks.append(sock)
                    except OSError:
                        break
                stalled_opened[0] += len(socks)
                time.sleep(policy.BODY_TIMEOUT + 3)
                stalled_closed[0] += sum(closed_by_server(s) for s in socks)  # for a newcomer, or after a 408

        def unread_client() -> None:
            """Pipelines requests and never reads the answers: cut off once they make no progress for WRITE_TIMEOUT."""
            while not stop.is_set():
                sock = socket.socket()
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
                sock.connect(address)
                sock.sendall(UNREAD)
                unread["sent"] += 1
                time.sleep(policy.WRITE_TIMEOUT + 5)
                unread["cut"] += closed_by_server(sock, 5)

        def attacks() -> None:
            heavy = [("settlement sweep " * 70)[:1000] + str(i) for i in range(64)]
            while not stop.is_set():
                count("heavy", request(address, post("/answer", {"questions": heavy, "k": 1000})))
                count("forged", request(address, FORGED))
                count("escape", request(address, ESCAPE))
                unfinished = b"POST /search HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{"
                count("unfinished body", request(address, unfinished, timeout=policy.BODY_TIMEOUT + 10))
                count("foreign host", request(address, FOREIGN))
                count("malformed chunk", request(address, MALFORMED))

        threads = [threading.Thread(target=client, args=(n,)) for n in range(args.clients)]
        threads += [threading.Thread(target=f) for f in (probe, idle_waves, attacks, stalled_waves, unread_client)]
        threads += [threading.Thread(target=slow_one) for _ in range(args.slow)]
        began = time.monotonic()
        for t in threads:
            t.start()
        faults = []
        third = args.seconds / 3
        time.sleep(third)
        pointer = index / "CURRENT"
        damage = {
            "bytes": ("bytes that are not a generation's name", lambda: pointer.write_bytes(b"gen-\xff")),
            "directory": ("a directory", pointer.mkdir),
            "fifo": ("a FIFO", lambda: os.mkfifo(pointer)),
            "symlink": ("a symbolic link to /dev/zero", lambda: pointer.symlink_to("/dev/zero")),
        }
        for what, make in damage.values():
            if pointer.is_dir() and not pointer.is_symlink():
                pointer.rmdir()
            else:
                pointer.unlink()
            make()
            faults.append(f"CURRENT made {what}")
            time.sleep(third / len(damage))
        rebuilt = run("rag-index", "--out", index, "--quiet", stdin=embedded)
        faults.append(f"rag-index --out over the damaged pointer: exit {rebuilt.returncode}")
        time.sleep(max(0.0, args.seconds - (time.monotonic() - began)))
        stop.set()
        for t in threads:
            t.join(120)
        wall = time.monotonic() - began
        final = orjson.loads(subprocess.run(["curl", "-s", url + "/health"], capture_output=True).stdout or b"{}")
        proc.terminate()
        proc.wait(60)
        text = log.read_text(errors="replace")
        live = (index / "CURRENT").read_text().strip()
        four = hostile_four.round_four(index)
    lines = text.splitlines()
    result = {
        "schema": "hostile/1",
        "seconds": round(wall, 1),
        "files": args.files,
        "clients": args.clients,
        "requests": dict(sorted(kinds.items())),
        "statuses": {str(k): v for k, v in sorted(statuses.items())},
        "lost": statuses.get(0, 0) + sum(v for k, v in statuses.items() if k >= 500),
        "health": {
            "answered": len(health_ms),
            "failed": health_bad[0],
            "median_ms": round(statistics.median(health_ms), 1) if health_ms else None,
            "max_ms": round(max(health_ms), 1) if health_ms else None,
        },
        "idle": {"opened": idle_opened[0], "closed_by_server": idle_closed[0], "slow_heads_cut": slow_closed[0], "slow": args.slow},
        "stalled": {"opened": stalled_opened[0], "closed_by_server": stalled_closed[0]},
        "unread": unread,
        "connections": final.get("connections"),
        "faults": faults,
        "reload_errors_seen": sorted(reload_errors),
        "faults_reported": sum(any(key in e for e in reload_errors) for key in POINTER_FAULTS.values()),
        "rebuilt_served": final.get("generation") == live and live != first,
        "log": {
            "lines": len(lines),
            "bytes": len(text.encode()),
            "forged": sum(line.startswith("rag-serve: GET /admin") for line in lines),
            "escape_bytes": text.count("\x1b") + text.count("\x07"),
            "tracebacks": text.count("Traceback"),
        },
        "round_four": four,
        "machine": f"{platform.machine()}, {platform.python_implementation()} {platform.python_version()}",
    }
    result["markdown"] = markdown(result)
    args.out.write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2) + b"\n")
    print(result["markdown"])
    ok = (
        result["lost"] == 0
        and not health_bad[0]
        and result["rebuilt_served"]
        and result["stalled"]["closed_by_server"] == result["stalled"]["opened"]
        and unread["cut"] == unread["sent"]
        and result["faults_reported"] == len(POINTER_FAULTS)
        and not any(result["log"][k] for k in ("forged", "escape_bytes", "tracebacks"))
        and all(r["held"] is not False for r in four)
    )
    return 0 if ok else 1


def markdown(r: dict) -> str:
    s, h, i, lg = r["statuses"], r["health"], r["idle"], r["log"]
    answered = sum(v for k, v in s.items() if k != "0")
    rows = [
        (
            "requests sent (search, answer, heavy, forged, unfinished bodies, foreign hosts, malformed chunks)",
            f"{sum(r['requests'].values()):,}",
        ),
        ("answered with an HTTP status / lost (no answer, or a 5xx)", f"{answered:,} / {r['lost']}"),
        ("statuses", ", ".join(f"{k}: {v:,}" for k, v in s.items())),
        (
            f"idle sockets opened (waves of more than the {r['files']}-file limit) / closed by the server",
            f"{i['opened']:,} / {i['closed_by_server']:,}",
        ),
        ("heads sent a byte a second, cut off by the server", f"{i['slow_heads_cut']} of {i['slow']}"),
        (
            "heads whose bodies never came (waves), closed by the server",
            f"{r['stalled']['closed_by_server']:,} of {r['stalled']['opened']:,}",
        ),
        ("clients pipelining requests they never read, cut off by the server", f"{r['unread']['cut']} of {r['unread']['sent']}"),
        ("`/health` answered / failed, median and slowest (ms)", f"{h['answered']} / {h['failed']}, {h['median_ms']} and {h['max_ms']}"),
        (
            "index pointer faults / each reported by `/health`'s `reload_error`",
            f"{len(r['faults']) - 1} / {r['faults_reported']} ({'; '.join(r['faults'][:-1])})",
        ),
        ("the generation rebuilt over the damaged pointer is served", "yes" if r["rebuilt_served"] else "no"),
        (
            "access log: lines, bytes, forged lines, escape bytes, tracebacks",
            f"{lg['lines']:,}, {lg['bytes']:,}, {lg['forged']}, {lg['escape_bytes']}, {lg['tracebacks']}",
        ),
    ]
    table = "\n".join(["| the hostile battery | |", "| --- | ---: |", *(f"| {a} | {b} |" for a, b in rows)])
    return (
        f"The hostile battery, by `just hostile` (`tests/support/hostile.py`): `rag-serve` on loopback with an open-file limit of "
        f"{r['files']}, the repository's corpus indexed with the `hash` embedder, for {r['seconds']} s: {r['clients']} clients "
        "asking the golden questions, a `/health` probe every 0.2 s, waves of idle sockets and heads sent a byte a second, "
        "the issue's heavy request, forged log lines and bodies that never finish, waves of heads whose bodies never come, "
        "a client pipelining requests it never reads, foreign `Host:` names and malformed chunk sizes, and the index pointer "
        "damaged four times, then "
        f"rebuilt ({r['machine']}).\n\n{table}\n\n"
        "Round four (issue 40), each attack once after the load, in `tests/support/hostile_four.py`: what it cost (seconds; "
        "the stage's own peak resident set where one stage process ran it) and whether it held (skipped: the attack needs "
        "the local model, `just llm-model`).\n\n" + hostile_four.markdown(r.get("round_four", []))
    )


if __name__ == "__main__":
    raise SystemExit(main())
