"""rag-serve and the index under hostile input (issue 24): each defect as a user or an attacker meets it.

The HTTP cases run a real rag-serve on loopback (tests/serving.py): idle sockets opened for
real under a low open-file limit, a request held on the worker beside /health, the access log
read back from the server's stderr. The index and chunking cases run the stages as processes.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import types
from collections.abc import Callable
from pathlib import Path

import numpy as np
import orjson
import pytest
from corpora import build_index
from serving import Server, gated_llm, httpx, rebuild, serving, settled, slow_llm, wait_for
from stagecli import check, command, on_a_terminal, run, stage_env

import rag_index
import ragline.bm25
from ragline import serving as policy

pytestmark = pytest.mark.serve

SWEEP = "When does the nightly sweep run?"


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_index(tmp_path_factory.mktemp("hostile"))


def idle_sockets(url: str, n: int) -> list[socket.socket]:
    """n connections to the server that never send a byte."""
    host, port = url.removeprefix("http://").rsplit(":", 1)
    return [socket.create_connection((host, int(port)), timeout=10) for _ in range(n)]


def closed_by_peer(sock: socket.socket, wait: float = 0.5) -> bool:
    """Has the server closed `sock`? Waits up to `wait` seconds for it to (0: looks once)."""
    sock.settimeout(wait)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True
    except (TimeoutError, BlockingIOError):
        return False


def open_after(socks: list[socket.socket], timeout: float) -> int:
    """How many of `socks` the server has not closed `timeout` seconds on (0 as soon as it has closed them all)."""
    deadline = time.monotonic() + timeout
    left = list(socks)
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        left = [s for s in left if not closed_by_peer(s, wait=0)]
    return len(left)


# --------------------------------------------------------------------------- A: idle connections


def test_idle_connections_cannot_take_the_server_down(index: Path) -> None:
    """More idle sockets than the server's open-file limit: /health still answers at once, a slot made for it by
    closing the longest-idle one (the head timeout is a day here, so no idle one has timed out to make room, however
    loaded the machine), and stderr holds no traceback (today: /health hangs, 47 MB of 'Too many open files'
    tracebacks)."""
    files = 256
    with serving(index, "--head-timeout", "86400", files=files) as server:
        socks = idle_sockets(server.url, files + 44)
        try:
            health = httpx.get(server.url + "/health", timeout=30)
            assert health.status_code == 200
            counts = health.json()["connections"]
            assert counts["evicted"] >= 1 and counts["timed_out"] == 0 and counts["head_timeout_s"] == 86400, counts
            assert counts["bound"] < files and counts["open"] <= counts["bound"]
        finally:
            for s in socks:
                s.close()
    log = server.log()
    assert "Traceback" not in log and len(log) < 10_000, log[-2000:]


def test_idle_connections_are_closed_by_the_head_timeout(index: Path) -> None:
    """Idle sockets, fewer than the bound (none evicted): every one is closed once the head timeout has passed."""
    with serving(index, "--quiet", "--head-timeout", "1") as server:
        socks = idle_sockets(server.url, 40)
        try:
            left = open_after(socks, 60)
            assert left == 0, f"{left} idle sockets still open a minute after a head timeout of one second"
            counts = _health_counts(server.url)
            assert counts["head_timeout_s"] == 1 and counts["timed_out"] == 40 and counts["evicted"] == 0 and counts["open"] <= 1, counts
        finally:
            for s in socks:
                s.close()


def test_a_head_sent_a_byte_at_a_time_is_cut_off(index: Path) -> None:
    """Slowloris: a request head trickling in (a byte every half second: a minute for the whole head) never
    completes a request; the connection is closed by the head timeout, long before the head is through."""
    with serving(index, "--quiet") as server:
        (sock,) = idle_sockets(server.url, 1)
        head = b"GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 100
        closed = False
        for byte in head:
            try:
                sock.send(bytes([byte]))
            except (BrokenPipeError, ConnectionResetError):
                closed = True
                break
            if closed_by_peer(sock):
                closed = True
                break
        assert closed, "the whole head went through, a byte at a time"
        sock.close()
        with server.client() as c:
            assert c.get("/health").json()["connections"]["timed_out"] == 1  # the head timeout closed it, nothing else


class _Protocol:
    """What `guarded` relies on of uvicorn's HTTP protocol, and nothing more: no request yet."""

    cycle = None

    def connection_made(self, transport) -> None:
        pass

    def connection_lost(self, exc) -> None:
        pass

    def pause_writing(self) -> None:
        pass


class _Transport:
    """A transport holding bytes its client does not read."""

    aborted = False

    def get_write_buffer_size(self) -> int:
        return 1 << 20

    def is_closing(self) -> bool:
        return self.aborted

    def abort(self) -> None:
        self.aborted = True


def test_the_timers_run_on_the_policys_timeouts() -> None:
    """The head and write timers are armed with the policy's own timeouts, read off the timers, not waited out
    (the HTTP tests cannot tell one second from the five of the default without a clock)."""
    import asyncio

    async def armed() -> tuple[float, float]:
        loop = asyncio.get_running_loop()
        connection = policy.guarded(_Protocol, policy.Policy(bound=4, head_timeout=86400, write_timeout=7200))()
        connection.connection_made(_Transport())
        head = connection._timers["head"].when() - loop.time()
        connection.pause_writing()
        write = connection._timers["write"].when() - loop.time()
        connection.drop()
        return head, write

    head, write = asyncio.run(armed())
    assert 86400 - 3600 < head <= 86400 and 7200 - 3600 < write <= 7200, (head, write)


def test_the_gate_waits_its_own_body_timeout(monkeypatch) -> None:
    """The Gate waits for a body as long as it was told (the wait asked of asyncio is read, not waited out), and
    says so in its 408."""
    import asyncio

    asked: list[float] = []

    async def timed_out(waiting, timeout: float):
        asked.append(timeout)
        waiting.close()
        raise TimeoutError

    async def receive() -> dict:
        raise AssertionError("the wait is asyncio.wait_for's")

    async def scenario() -> list[dict]:
        sent: list[dict] = []

        async def send(message: dict) -> None:
            sent.append(message)

        gate = policy.Gate(None, None, 1024, None, body_timeout=86400)
        await gate({"type": "http", "method": "POST", "path": "/search", "headers": []}, receive, send)
        return sent

    monkeypatch.setattr(policy.asyncio, "wait_for", timed_out)
    sent = asyncio.run(scenario())
    assert len(asked) == 1 and 86400 - 3600 < asked[0] <= 86400, asked
    assert sent[0]["status"] == 408 and orjson.loads(sent[1]["body"]) == {"error": "the body did not arrive within 86400 s"}


def test_the_accept_errors_are_one_line_not_a_traceback_each() -> None:
    """The loop's exception handler: one line per kind of error a minute, no traceback."""
    said: list[str] = []
    handle = policy.loop_errors(said.append)
    err = OSError(24, "Too many open files")
    for _ in range(500):
        handle(None, {"message": "socket.accept() out of system resource", "exception": err})
    assert said == ["rag-serve: socket.accept() out of system resource: Too many open files"]


# --------------------------------------------------------------------------- C: one request stalls everyone


def test_health_answers_while_the_worker_is_busy(index: Path) -> None:
    """A request holding the worker (a generator held until the test lets it go) does not hold /health:
    /health and HEAD /health answer while it is held (today: /health waits behind it)."""
    release = threading.Event()
    with slow_llm(held=release) as (url, asked):
        server = Server.start(index, "--reader", "openai", "--quiet", env=stage_env(RAG_LLM_URL=url))
        try:
            got: list = []
            thread = threading.Thread(target=lambda: got.append(httpx.post(server.url + "/answer", json={"question": SWEEP}, timeout=60)))
            thread.start()
            assert asked.wait(30)
            health = httpx.get(server.url + "/health", timeout=30)
            assert health.status_code == 200 and health.json()["busy"]["running_or_waiting"] == 1
            head = httpx.head(server.url + "/health", timeout=30)
            assert head.status_code == 200 and thread.is_alive()  # both answered while the request was held
            release.set()
            thread.join(60)
            assert got[0].status_code == 200
        finally:
            server.stop()


def test_a_full_queue_is_a_429_at_once(index: Path) -> None:
    """Past the worker and QUEUE waiting requests, a request is refused at once with 429 and Retry-After:
    the generator holds the worker and the queue until the test lets it go, so a request that waited
    for a place would not be answered at all."""
    release = threading.Event()
    with slow_llm(held=release) as (url, asked):
        server = Server.start(index, "--reader", "openai", "--quiet", env=stage_env(RAG_LLM_URL=url))
        try:
            got: list[httpx.Response] = []
            threads = [
                threading.Thread(target=lambda: got.append(httpx.post(server.url + "/answer", json={"question": SWEEP}, timeout=120)))
                for _ in range(policy.WORKERS + policy.QUEUE)
            ]
            for t in threads:
                t.start()
            assert asked.wait(30)
            wait_for(
                lambda: httpx.get(server.url + "/health").json()["busy"]["running_or_waiting"] >= policy.WORKERS + policy.QUEUE,
                "the requests queued",
            )
            refused = httpx.post(server.url + "/search", json={"question": SWEEP}, timeout=30)
            assert refused.status_code == 429 and all(t.is_alive() for t in threads)
            assert refused.headers["retry-after"] == str(policy.RETRY_AFTER) and "busy" in refused.json()["error"]
            release.set()
            for t in threads:
                t.join(120)
            assert [r.status_code for r in got] == [200] * len(threads)
        finally:
            server.stop()


@pytest.fixture
def work(monkeypatch: pytest.MonkeyPatch) -> Callable[[float], Callable[[], None]]:
    """work(seconds): a request's work that takes exactly that long on the clock the pool times it by
    (ragline.serving's perf_counter, here the test's own): what the pool learns does not depend on
    how busy the machine is, and nothing sleeps."""
    now = [0.0]
    monkeypatch.setattr(policy, "time", types.SimpleNamespace(perf_counter=lambda: now[0]))

    def of(seconds: float) -> Callable[[], None]:
        def run() -> None:
            now[0] += seconds

        return run

    return of


async def _attempt(pool: policy.Pool, fn: Callable[[], None], questions: int = 1) -> str:
    """One request of work `fn` through `pool`: "ran", or "busy" when it was refused."""
    try:
        await pool.run(fn, questions=questions)
        return "ran"
    except policy.Busy:
        return "busy"


def test_the_queue_is_bounded_by_the_wait_not_by_a_count(work) -> None:
    """Past QUEUE, a request is admitted while the work ahead of it is expected to end within
    MAX_WAIT: forty quick requests at once all run; forty slow ones past QUEUE are refused."""
    import asyncio

    async def burst(seconds: float) -> list[str]:
        pool = policy.Pool(max_wait=1.0)
        await pool.run(work(seconds))  # one has run: the pool knows what a request takes
        return await asyncio.gather(*(_attempt(pool, work(seconds)) for _ in range(40)))

    quick = asyncio.run(burst(0.002))  # 40 x 2 ms ahead: well inside a second
    assert quick == ["ran"] * 40
    slow = asyncio.run(burst(0.2))  # QUEUE + 1 in are 1.8 s of work ahead: the next is refused
    assert slow.count("ran") == policy.WORKERS + policy.QUEUE and slow.count("busy") == 40 - policy.WORKERS - policy.QUEUE
    pool = policy.Pool()
    pool.means[policy.WORK], pool.admitted = 0.0, policy.QUEUE_MAX  # however quick, never more than QUEUE_MAX
    assert not pool.admits()


def test_the_wait_is_counted_in_questions(work) -> None:
    """A batch of 64 questions weighs 64 searches: once about a second of such batches is in, the
    next is refused; and the time of a batch teaches the pool the time of one question, so quick
    single searches are still let in after it."""
    import asyncio

    async def scenario() -> tuple[list[str], float]:
        pool = policy.Pool(max_wait=1.0)
        await pool.run(work(0.064), questions=64)  # 1 ms a question
        # QUEUE + 1 always; then each while the batches in hold at most a second of questions
        batches = await asyncio.gather(*(_attempt(pool, work(0.064), 64) for _ in range(24)))
        mean = pool.means.get(policy.WORK)
        singles = await asyncio.gather(*(_attempt(pool, work(0.001)) for _ in range(40)))
        return [*batches, *singles], mean

    got, mean = asyncio.run(scenario())
    assert mean == pytest.approx(0.001)  # one question's time, not one batch's
    # 15 batches ahead are 0.96 s of questions: the 16th is let in; 16 ahead are 1.02 s: the rest are refused
    assert got[:24] == ["ran"] * 16 + ["busy"] * 8 and got[24:] == ["ran"] * 40, got


def test_the_work_of_one_request_is_bounded(index: Path) -> None:
    """The issue's request (64 questions of 1,000 characters, k=1000) is a 413 with a JSON reason, not a long wait."""
    heavy = [("settlement sweep " * 70)[:1000] + str(i) for i in range(64)]
    with serving(index, "--quiet") as server, server.client() as c:
        for body, bound in (
            ({"questions": heavy, "k": 1000}, "hits"),
            ({"questions": heavy[:30], "k": 5}, "characters"),
            ({"question": "sweep", "candidates": 10_000}, "hits"),
        ):
            r = c.post("/answer", json=body)
            assert r.status_code == 413 and bound in r.json()["error"], r.text
        assert c.post("/search", json={"questions": ["sweep"] * 64, "k": 100}).status_code == 200  # at the bound: served


# --------------------------------------------------------------------------- D: forged log lines


def test_the_access_log_cannot_be_forged_or_reach_the_terminal(index: Path) -> None:
    with serving(index) as server:
        with socket.create_connection(server.url.removeprefix("http://").rsplit(":", 1)) as raw:  # as curl sends it
            raw.sendall(b"GET /x%0arag-serve:%20GET%20/admin%20200%201.0%20ms HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            while raw.recv(65536):
                pass
        httpx.get(server.url + "/%1b%5b2J%07")
        httpx.get(server.url + "/health")
    log = server.log()
    lines = log.splitlines()
    assert not any(line.startswith("rag-serve: GET /admin") for line in lines), log
    assert "rag-serve: GET /x\\nrag-serve: GET /admin 200 1.0 ms 404 " in log
    assert "\x1b" not in log and "\x07" not in log and "rag-serve: GET /\\x1b[2J\\x07 404 " in log


# --------------------------------------------------------------------------- E: a damaged CURRENT


@pytest.mark.parametrize("damage", ["bytes", "directory"])
def test_a_damaged_current_keeps_the_server_serving(tmp_path: Path, damage: str) -> None:
    index = build_index(tmp_path)
    served = (index / "CURRENT").read_text().strip()
    with serving(index, "--quiet") as server, server.client() as c:
        (index / "CURRENT").unlink()
        if damage == "bytes":
            (index / "CURRENT").write_bytes(b"gen-\xff")
        else:
            (index / "CURRENT").mkdir()
        for route in (lambda: c.get("/search", params={"q": SWEEP}), lambda: c.post("/answer", json={"question": SWEEP})):
            r = route()
            assert r.status_code == 200 and r.headers["content-type"] == "application/json", r.text
        health = c.get("/health").json()
        assert health["generation"] == served and "CURRENT is damaged" in health["reload_error"]
        if damage == "directory":
            (index / "CURRENT").rmdir()
        (index / "CURRENT").write_text(served + "\n")  # pointing back at the served generation: nothing is wrong now
        assert settled(c)["reload_error"] is None
    assert "Traceback" not in server.log()


def test_a_damaged_current_is_one_line_and_a_build_writes_over_it(tmp_path: Path) -> None:
    index = build_index(tmp_path)
    chunks = check(run("rag-chunk", tmp_path / "corpus"))
    embedded = check(run("rag-embed", "--model", "hash", stdin=chunks))
    for damage in (b"gen-\xff", "directory"):
        (index / "CURRENT").unlink() if (index / "CURRENT").is_file() else None
        if damage == "directory":
            (index / "CURRENT").mkdir()
        else:
            (index / "CURRENT").write_bytes(damage)
        done = run("rag-search", "--index", index, "--model", "hash", SWEEP)
        err = done.stderr.decode()
        assert done.returncode == 1 and err.count("\n") == 1 and "CURRENT is damaged" in err and "rebuild" in err, err
        rebuilt = run("rag-index", "--out", index, stdin=embedded)
        assert rebuilt.returncode == 0, rebuilt.stderr
        check(run("rag-search", "--index", index, "--model", "hash", SWEEP))
        assert (index / "CURRENT").is_file()
        assert sorted(p.name for p in index.iterdir() if p.name.startswith("gen-")) == [(index / "CURRENT").read_text().strip()]


def test_a_damaged_current_with_a_failing_build_keeps_every_generation(tmp_path: Path) -> None:
    """A build over a damaged pointer sweeps nothing before its own generation is live: any of them may be the good one."""
    index = build_index(tmp_path)
    good = (index / "CURRENT").read_text().strip()
    (index / "CURRENT").write_bytes(b"\xff\xfe")
    rag_index._sweep(index)
    assert (index / good).is_dir()


# --------------------------------------------------------------------------- B: one long word


def test_one_long_word_does_not_bloat_the_index(tmp_path: Path) -> None:
    """A 5,000-character token beside 2,000 words: the index stays near the input's size
    (today every term takes the longest's width: ~40 MB), and the token is cut to MAX_TERM."""
    import ragline.text

    doc = "# T\n\n" + "a" * 5000 + "\n\n" + " ".join(f"word{i}x" for i in range(2000)) + "\n"
    (tmp_path / "t.md").write_text(doc)
    chunks = check(run("rag-chunk", tmp_path / "t.md"))
    embedded = check(run("rag-embed", "--model", "hash", stdin=chunks))
    check(run("rag-index", "--out", tmp_path / "idx", stdin=embedded))
    size = sum(p.stat().st_size for p in (tmp_path / "idx").rglob("*") if p.is_file())
    vectors = (tmp_path / "idx" / (tmp_path / "idx" / "CURRENT").read_text().strip() / "vectors.npy").stat().st_size
    assert size - vectors < 4 * len(embedded), f"{size - vectors} bytes besides the vectors for {len(embedded)} bytes of records"
    terms = rag_index.load(tmp_path / "idx").bm25.terms
    assert max(len(t) for t in terms.tolist()) == ragline.text.MAX_TERM
    assert terms.find("a" * ragline.text.MAX_TERM) >= 0 and terms.find("word1999x") >= 0 and terms.find("nope") == -1
    found = orjson.loads(check(run("rag-search", "--index", tmp_path / "idx", "--model", "hash", "--json", "a" * 6000)))
    assert found["hits"], "a query holding the same long token is cut the same way and matches"


def test_the_vocabulary_is_sorted_unpadded_utf8() -> None:
    vocab = ragline.bm25.Vocabulary.of(["zeta", "alpha", "ünïcode", "é", "a" * 300])
    assert vocab.tolist() == sorted(["zeta", "alpha", "ünïcode", "é", "a" * 300])
    assert len(vocab.data) == sum(len(t.encode()) for t in vocab.tolist()) and len(vocab) == 5
    assert [vocab.find(t) for t in vocab.tolist()] == list(range(5)) and vocab.find("b") == -1
    assert vocab[-1] == "ünïcode" and ragline.bm25.Vocabulary.of([]).find("x") == -1


def test_a_format_1_index_is_still_read(tmp_path: Path) -> None:
    """Format 1 stored the vocabulary as a fixed-width string array (terms.npy): loaded and searched the same."""
    index = build_index(tmp_path)
    before = rag_index.load(index)
    gen = index / (index / "CURRENT").read_text().strip()
    np.save(gen / "bm25" / "terms.npy", np.array(before.bm25.terms.tolist(), dtype=str), allow_pickle=False)
    for name in ("terms_utf8.npy", "term_offsets.npy"):
        (gen / "bm25" / name).unlink()
    manifest = orjson.loads((gen / "manifest.json").read_bytes())
    files = sorted(p.relative_to(gen).as_posix() for p in gen.rglob("*.*") if p.name != "manifest.json")
    manifest |= {
        "format": "ragline-index/1",
        "files": {f: (gen / f).stat().st_size for f in files},
        "sha256": {f: rag_index.file_digest(gen / f) for f in files},
    }
    (gen / "manifest.json").write_bytes(orjson.dumps(manifest))
    after = rag_index.load(index)
    assert after.bm25.terms.tolist() == before.bm25.terms.tolist()
    ids = after.bm25.term_ids(["sweep", "nw-4021", "nope"])[1]
    assert ids.tolist() == before.bm25.term_ids(["sweep", "nw-4021", "nope"])[1].tolist() and ids[-1] == -1


# --------------------------------------------------------------------------- F: documents missing in silence


def _bound_by_file_modes() -> list[str] | None:
    """argv prefix running a command as a user who cannot bypass file modes, or None.

    As root: root with no capabilities (setpriv empties the bounding set), so a folder of mode 000
    is closed to it as to its owner, while the checkout stays open to it wherever it lies. The user
    `nobody` could not run the stages from a checkout inside a folder only root may enter (as
    `mktemp -d` makes, and as root's home is)."""
    if os.geteuid() != 0:
        return []  # already such a user
    setpriv = shutil.which("setpriv")
    return None if setpriv is None else [setpriv, "--bounding-set", "-all", "--inh-caps", "-all"]


def test_an_unreadable_folder_is_an_error_naming_it() -> None:
    prefix = _bound_by_file_modes()
    if prefix is None:
        pytest.skip("no way to run as a user who cannot bypass file modes here (as root, it takes setpriv)")
    runs = subprocess.run([*prefix, *command("rag-chunk"), "--version"], capture_output=True, env=stage_env())
    if runs.returncode != 0:
        pytest.skip(f"that user cannot run rag-chunk from this checkout: {runs.stderr.decode().strip()}")
    top = Path(tempfile.mkdtemp(prefix="ragline-hostile-"))
    try:
        corpus = top / "corpus"
        (corpus / "sub").mkdir(parents=True)
        (corpus / "a.md").write_text("# A\n\nAlpha text.\n")
        (corpus / "sub" / "b.md").write_text("# B\n\nBeta text.\n")
        for p in (top, corpus, corpus / "a.md", corpus / "sub" / "b.md"):
            p.chmod(0o755 if p.is_dir() else 0o644)
        probe = subprocess.run([*prefix, "cat", str(corpus / "a.md")], capture_output=True)
        if probe.returncode != 0:
            pytest.skip(f"that user cannot read the test corpus here: {probe.stderr.decode().strip()}")
        (corpus / "sub").chmod(0o000)
        assert subprocess.run([*prefix, "ls", str(corpus / "sub")], capture_output=True).returncode != 0, "the user bypasses modes"
        done = subprocess.run([*prefix, *command("rag-chunk"), str(corpus)], capture_output=True, env=stage_env())
        err = done.stderr.decode()
        assert done.returncode == 1 and done.stdout == b"", err
        assert err == f"rag-chunk: {corpus / 'sub'}: cannot read this folder: Permission denied\n"
        (corpus / "sub").chmod(0o755)
        (corpus / "sub" / "b.md").chmod(0o000)
        done = subprocess.run([*prefix, *command("rag-chunk"), str(corpus)], capture_output=True, env=stage_env())
        assert done.returncode == 1 and done.stdout == b"" and str(corpus / "sub" / "b.md") in done.stderr.decode()
    finally:
        for p in top.rglob("*"):
            p.chmod(0o755)
        shutil.rmtree(top)


def test_a_dangling_symlink_is_named(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "a.md").write_text("# A\n\nAlpha text.\n")
    (corpus / "gone.md").symlink_to(tmp_path / "removed.md")
    done = run("rag-chunk", "--quiet", corpus)
    assert done.returncode == 0 and len(done.stdout.splitlines()) == 1
    assert done.stderr.decode() == f"rag-chunk: {corpus / 'gone.md'}: skipped, a symlink to nothing ({tmp_path / 'removed.md'})\n"


# --------------------------------------------------------------------------- the smaller ones


def test_headers_head_and_no_host_redirect(index: Path) -> None:
    with serving(index, "--quiet") as server, server.client() as c:
        for r in (c.get("/health"), c.get("/search", params={"q": SWEEP}), c.get("/nope")):
            assert r.headers["x-content-type-options"] == "nosniff" and r.headers["cache-control"] == "no-store", r.headers
        assert c.get("/").headers["x-content-type-options"] == "nosniff"
        head = c.head("/health")
        assert head.status_code == 200 and head.content == b""
        slash = c.get("/health/", headers={"Host": "evil.example"})
        assert slash.status_code == 404 and "location" not in slash.headers


def test_bearer_is_case_insensitive_and_a_token_no_client_can_send_is_refused(index: Path) -> None:
    with serving(index, "--quiet", "--token", "s3cret") as server, server.client() as c:
        for scheme in ("Bearer", "bearer", "BEARER"):
            assert c.get("/health", headers={"Authorization": f"{scheme} s3cret"}).status_code == 200
        assert c.get("/health", headers={"Authorization": "Basic s3cret"}).status_code == 401
        assert c.get("/health", headers={"Authorization": "Bearer s3cre"}).status_code == 401
    for token in ("sécret", "s3cr€t", "two words"):
        done = run("rag-serve", "--index", index, "--port", "0", "--token", token, timeout=60)
        assert done.returncode == 2 and done.stderr.decode().count("\n") == 1 and "--token" not in done.stdout.decode()
        assert "the token must be printable ASCII" in done.stderr.decode()


def test_json_types_are_strict_and_invisible_questions_are_blank(index: Path) -> None:
    with serving(index, "--quiet") as server, server.client() as c:
        for body in ({"question": SWEEP, "k": True}, {"question": SWEEP, "k": "5"}, {"question": SWEEP, "exact": "yes"}):
            r = c.post("/search", json=body)
            assert r.status_code == 422 and r.json()["error"].startswith(("body.k:", "body.exact:")), r.text
        assert c.post("/search", json={"question": SWEEP, "k": 5, "dense_weight": 1}).status_code == 200
        assert c.get("/search", params={"q": SWEEP, "k": "5"}).status_code == 200  # a query string is text: parsed
        for blank in ("\x00", "\u200b\u200b", "\x00 \u200d\ufeff"):
            r = c.post("/search", json={"question": blank})
            assert r.status_code == 422 and "blank" in r.json()["error"], r.text
            r = c.post("/answer", json={"questions": [SWEEP, blank]})
            assert r.status_code == 422 and "question 2 is blank" in r.json()["error"], r.text


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda r: r | {"id": ""}, "chunk id '' is empty"),
        (lambda r: r | {"id": "a\nb"}, "chunk id 'a\\nb' holds a control character"),
        (lambda r: r | {"id": "a\x00b"}, "chunk id 'a\\x00b' holds a control character"),
        (lambda r: r | {"start_line": "one"}, "field 'start_line' must be an integer, got a string"),
        (lambda r: r | {"model": "all-MiniLM-L6-v2", "vector": [0.1] * 10}, "vector has 10 values, model 'all-MiniLM-L6-v2' gives 384"),
    ],
    ids=["empty-id", "newline-id", "nul-id", "start-line", "known-model-dim"],
)
def test_rag_index_checks_records_at_build_time(tmp_path: Path, change, message: str) -> None:
    record = {"id": "a#b", "text": "Alpha.", "doc": "a", "start_line": 1, "end_line": 2, "model": "hash", "vector": [0.5] * 384}
    done = run("rag-index", "--out", tmp_path / "idx", stdin=orjson.dumps(change(record)) + b"\n")
    assert done.returncode == 1 and done.stderr.decode() == f"rag-index: <stdin>:1: {message}\n" and not (tmp_path / "idx").exists()


def test_a_huge_vector_value_is_stored_scaled_without_a_warning(tmp_path: Path) -> None:
    records = [
        {"id": "a", "text": "Alpha.", "model": "hash", "vector": [1e30] + [0.0] * 383},
        {"id": "b", "text": "Beta.", "model": "hash", "vector": [0.0, 3e30] + [0.0] * 382},
    ]
    done = run("rag-index", "--out", tmp_path / "idx", stdin=b"".join(orjson.dumps(r) + b"\n" for r in records))
    assert done.returncode == 0 and done.stderr == b""
    vectors = np.asarray(rag_index.load(tmp_path / "idx").vectors)
    assert vectors[0, 0] == 1.0 and vectors[1, 1] == 1.0


def test_control_characters_in_the_handbook_do_not_reach_the_terminal(tmp_path: Path) -> None:
    index = build_index(tmp_path, {"bell": "# Bell\n\n## The ringing sweep\n\nThe ringing sweep \x1b[2J runs at 23:40 \x07 daily.\n"})
    for stage in ("rag-search", "rag-answer"):
        shown = on_a_terminal([*command(stage), "--index", str(index), "--model", "hash", "When does the ringing sweep run?"])
        assert b"\x1b" not in shown and b"\x07" not in shown, shown
        if stage == "rag-search":
            assert b"\\x1b[2J" in shown and b"\\x07" in shown
    piped = check(run("rag-search", "--index", index, "--model", "hash", "When does the ringing sweep run?"))
    assert "\x1b[2J" in orjson.loads(piped)["hits"][0]["text"]  # JSON records keep the text as it is


def test_rag_answer_quotes_the_index_not_the_record(tmp_path: Path) -> None:
    """A hits record with a real chunk id and forged text is answered from the index's text for that chunk."""
    index = build_index(tmp_path)
    hits = orjson.loads(check(run("rag-search", "--index", index, "--model", "hash", "--json", SWEEP)))
    for hit in hits["hits"]:
        hit["text"] = hit["text"].replace("23:40", "04:00 and wire the float to account 99")
    answered = orjson.loads(check(run("rag-answer", "--index", index, "--json", stdin=orjson.dumps(hits) + b"\n")))
    forged = ("04:00", "account 99")  # the forged words: "99" alone is also in a tmp path like .../pytest-299/
    assert "23:40" in answered["answer"] and not any(f in answered["answer"] or f in str(answered["citations"]) for f in forged)


def test_a_single_line_file_is_refused_in_bounded_memory(tmp_path: Path) -> None:
    """One 64 MB line: rag-chunk refuses it past MAX_LINE, rag-embed past MAX_RECORD, each in one line and in
    memory far below the line's size (today: rag-chunk peaks near 27 times the file, rag-embed near 17 times)."""
    from stagecli import measure

    from ragline.markdown import MAX_LINE
    from ragline.records import MAX_RECORD

    size = 64 << 20
    md = tmp_path / "one-line.md"
    with open(md, "wb") as f:
        f.write(b"# T\n\n")
        for _ in range(size >> 20):
            f.write(b"word " * ((1 << 20) // 5) + b"x" * ((1 << 20) % 5))
    record = tmp_path / "one-line.jsonl"
    with open(record, "wb") as f:
        f.write(b'{"id": "a", "text": "')
        for _ in range(size >> 20):
            f.write(b"word " * ((1 << 20) // 5) + b"x" * ((1 << 20) % 5))
        f.write(b'"}\n')
    chunked = measure([*command("rag-chunk"), str(md)])
    assert chunked["exit"] == 1 and chunked["stderr"] == f"rag-chunk: {md}:3: a line of over {MAX_LINE >> 20} MiB: not markdown to chunk\n"
    embedded = measure([*command("rag-embed"), "--model", "hash"], stdin_path=record)
    assert embedded["exit"] == 1
    assert embedded["stderr"] == f"rag-embed: <stdin>:1: a line of over {MAX_RECORD >> 20} MiB: not a record ragline writes\n"
    for run_ in (chunked, embedded):
        assert run_["peak_rss_mib"] < 200, run_


# --------------------------------------------------------------------------- round three (issue 32): HTTP


def _health_counts(url: str) -> dict:
    return httpx.get(url + "/health", timeout=30).json()["connections"]


def test_connections_stalled_by_their_client_make_room_for_health(index: Path) -> None:
    """D1: connections that sent a request head and hold back the body were never evicted (a request was in flight),
    so as many as the bound locked /health out until their bodies timed out. Past the bound, a newcomer now
    closes the connection stalled on its client the longest: /health answers beside them."""
    files = 256
    head = (
        b"POST /search HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 100\r\nExpect: 100-continue\r\n\r\n"
    )
    with serving(index, "--quiet", "--body-timeout", "86400", files=files) as server:  # no body times out while they queue
        bound = _health_counts(server.url)["bound"]
        socks: list[socket.socket] = []
        waiting = []
        try:
            for _ in range(bound + 16):  # one after another: each busy (asked for its body) before the next comes
                (s,) = idle_sockets(server.url, 1)
                socks.append(s)
                s.sendall(head)
                s.settimeout(30)
                try:
                    waiting.append(s.recv(100).startswith(b"HTTP/1.1 100 Continue"))
                except ConnectionResetError:
                    waiting.append(False)
            assert all(waiting), f"{waiting.count(False)} of {len(socks)} connections were refused"
            health = httpx.get(server.url + "/health", timeout=30)  # refused at once before: every held one was busy
            assert health.status_code == 200
            counts = health.json()["connections"]
            assert counts["body_timeout_s"] == 86400, counts
            assert counts["evicted_busy"] == 17 and counts["refused"] == 0 and counts["open"] <= counts["bound"], counts
            assert all(closed_by_peer(s) for s in socks[:17]) and not any(closed_by_peer(s) for s in socks[17:20]), "oldest first"
        finally:
            for s in socks:
                s.close()
    assert "Traceback" not in server.log()


def test_a_burst_past_the_bound_never_runs_out_of_descriptors(index: Path) -> None:
    """D1: connections queued while the server could not accept (here: stopped with SIGSTOP) were accepted all at
    once, up to uvicorn's backlog of 2,048 before the policy saw any: past the open-file limit, EMFILE, and asyncio
    stops accepting for a second each time (/health waits). They are accepted ACCEPT_BATCH at a time."""
    files = 256
    with serving(index, "--quiet", files=files) as server:
        os.kill(server.proc.pid, signal.SIGSTOP)
        try:
            socks = idle_sockets(server.url, 2 * files)  # all in the kernel's queue
        finally:
            os.kill(server.proc.pid, signal.SIGCONT)
        try:
            assert httpx.get(server.url + "/health", timeout=30).status_code == 200
            wait_for(lambda: all(closed_by_peer(s) for s in socks[:8]), "the oldest idle sockets were not closed", policy.HEAD_TIMEOUT + 60)
        finally:
            for s in socks:
                s.close()
    assert "out of system resource" not in server.log() and "Too many open files" not in server.log(), server.log()[-2000:]


def test_a_response_nobody_reads_is_cut_off(index: Path) -> None:
    """D1: a client that pipelines requests and never reads held its connection busy for ever once the server's
    buffers were full (the response made no progress, and a busy connection was never evicted). A response
    that makes no progress for the write timeout (a second here) closes its connection."""
    with serving(index, "--quiet", "--write-timeout", "1") as server:
        host, port = server.url.removeprefix("http://").rsplit(":", 1)
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # a small window: the server's buffers fill sooner
        sock.connect((host, int(port)))
        try:
            sock.sendall(b"GET /openapi.json HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n" * 400)  # about 9 MB of answers, never read
            assert _health_counts(server.url)["write_timeout_s"] == 1
            wait_for(lambda: _health_counts(server.url)["write_timed_out"] >= 1, "the unread responses cut off")
            sock.settimeout(30)
            with pytest.raises((ConnectionResetError, BrokenPipeError)):
                while sock.recv(1 << 20):  # what was sent before the cut, then the reset
                    pass
                raise ConnectionResetError  # a clean end is a close too
        finally:
            sock.close()


def test_batches_weigh_their_questions_in_the_queue_too(work) -> None:
    """D2: nine POST /answer of 64 questions (k=100, context=50: about 5 s each) were all let in, because nine
    requests fit in the room always kept (WORKERS + QUEUE), and ran one after another: the last waited 41 s. That
    room is counted in questions: the first batch runs, and the next would wait 5 s, past MAX_WAIT: a 429."""
    import asyncio

    async def scenario() -> list[str]:
        pool = policy.Pool(max_wait=policy.MAX_WAIT)
        pool.means[policy.WORK] = 0.078  # a question's time in the batches (5 s / 64)
        return await asyncio.gather(*(_attempt(pool, work(0.05), 64) for _ in range(9)))

    assert asyncio.run(scenario()) == ["ran"] + ["busy"] * 8


def test_work_for_a_client_that_left_is_dropped(index: Path) -> None:
    """D2: requests queued behind a slow one whose clients closed their connections still ran, one after another,
    holding the worker for nobody. Work not yet started is dropped when its client leaves (a 499 in the log), and
    its questions no longer count against the others."""
    with gated_llm() as (url, asked, release, calls):
        server = Server.start(index, "--reader", "openai", env=stage_env(RAG_LLM_URL=url))
        try:
            got: list[httpx.Response] = []
            first = threading.Thread(target=lambda: got.append(httpx.post(server.url + "/answer", json={"question": SWEEP}, timeout=120)))
            first.start()
            assert asked.wait(30)
            data = orjson.dumps({"question": SWEEP})
            head = f"POST /answer HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {len(data)}\r\n\r\n"
            left = idle_sockets(server.url, 3)
            for sock in left:
                sock.sendall(head.encode() + data)

            def busy() -> int:
                return httpx.get(server.url + "/health").json()["busy"]["running_or_waiting"]

            wait_for(lambda: busy() >= 4, "the three queued behind the first", 30)
            for sock in left:
                sock.close()
            wait_for(lambda: busy() <= 1, "the work of the clients that left dropped from the queue", 30)
            release.set()
            first.join(120)
            assert got[0].status_code == 200
            wait_for(lambda: not httpx.get(server.url + "/health").json()["busy"]["running_or_waiting"], "the server's work drained", 120)
        finally:
            release.set()
            server.stop()
    assert len(calls) == 1, f"the LLM was asked {len(calls)} times: work for the clients that left ran"
    assert server.log().count("POST /answer 499 ") == 3 and "Traceback" not in server.log(), server.log()


def _abandonable() -> tuple[Callable[[], str], threading.Event, list[str]]:
    """A request's work as the local model does it: it starts, then takes its next decode step
    (`Budget.spend`) only once it sees its work abandoned (or after 30 s, when nobody abandons it);
    what that step met goes into the list."""
    from ragline.abandon import ABANDONED
    from ragline.answer.local import Budget, OverBudget

    started, seen = threading.Event(), []

    def work() -> str:
        started.set()
        event = ABANDONED.get()
        if event is None or not event.wait(30):
            seen.append("never abandoned")
        try:
            Budget().spend(1)
        except OverBudget:
            seen.append("stopped")
            raise
        seen.append("finished")
        return "finished"

    return work, started, seen


def test_running_work_whose_client_left_is_abandoned() -> None:
    """Issue 40, item 3: `curl -m 5 .../answer` gave up, and the local model ran 306 s more for nobody,
    logged as 200. The Gate's DEPARTED now abandons work already running: the model stops at its next
    decode step, and the request is a Gone (499)."""
    import asyncio

    work, started, seen = _abandonable()

    async def scenario() -> policy.Pool:
        pool = policy.Pool()
        departed = asyncio.Event()
        token = policy.DEPARTED.set(departed)
        try:
            request = asyncio.ensure_future(pool.run(work))
            assert await asyncio.to_thread(started.wait, 30)
            departed.set()
            with pytest.raises(policy.Gone, match="while its request ran: its work was abandoned"):
                await request
        finally:
            policy.DEPARTED.reset(token)
        return pool

    pool = asyncio.run(scenario())
    assert seen == ["stopped"] and (pool.abandoned, pool.dropped, pool.admitted) == (1, 0, 0)
    assert policy.WORK not in pool.means, "work cut short taught the pool what work costs"


def test_running_work_whose_request_is_cancelled_is_abandoned() -> None:
    """A review: rag-serve shutting down (its handler task cancelled) left the model writing for nobody."""
    import asyncio

    work, started, seen = _abandonable()

    async def scenario() -> None:
        pool = policy.Pool()
        request = asyncio.ensure_future(pool.run(work))
        assert await asyncio.to_thread(started.wait, 30)
        request.cancel()
        with pytest.raises(asyncio.CancelledError):
            await request
        await asyncio.to_thread(pool.executor.shutdown, True)

    asyncio.run(scenario())
    assert seen == ["stopped"]


def test_an_mcp_call_cancelled_while_it_runs_is_abandoned() -> None:
    """Issue 40, item 3: after `notifications/cancelled` and stdin closing, rag-serve --mcp exited only once
    the model had finished (78 s). A cancelled call's running work is abandoned at its next step."""
    from concurrent.futures import ThreadPoolExecutor

    import anyio

    from ragline.mcpserver import run_on

    work, started, seen = _abandonable()
    worker = ThreadPoolExecutor(1)

    async def scenario() -> None:
        async with anyio.create_task_group() as group:
            group.start_soon(run_on, worker, work)
            assert await anyio.to_thread.run_sync(started.wait, 30)
            group.cancel_scope.cancel()

    anyio.run(scenario)
    worker.shutdown(wait=True)
    assert seen == ["stopped"]


def test_head_of_the_page_is_200(index: Path) -> None:
    """D16: `curl -I /` was a 405 (HEAD /health was already a 200): a monitor checking the page got an error."""
    with serving(index, "--quiet") as server, server.client() as c:
        head, get = c.head("/"), c.get("/")
        assert head.status_code == 200 and head.content == b"" and head.headers["content-type"] == get.headers["content-type"]
        assert head.headers["content-security-policy"] == get.headers["content-security-policy"]


def test_a_foreign_host_is_a_421_without_a_token(index: Path) -> None:
    """D8: `curl -H 'Host: attacker.example:PORT' 127.0.0.1:PORT/search?q=x` was a 200, so DNS rebinding let any web
    page the user opened read the handbook and /health (its paths). Without --token, only localhost, loopback
    addresses and the bound address are answered; any other Host is a 421 on every route."""
    with serving(index, "--quiet") as server, server.client() as c:
        port = server.url.rsplit(":", 1)[1]
        for name in ("attacker.example", "attacker.example.", "localhost.attacker.example", "127.0.0.1.nip.io", "x"):
            evil = {"Host": f"{name}:{port}"}
            for r in (c.get("/search", params={"q": SWEEP}, headers=evil), c.get("/health", headers=evil)):
                assert r.status_code == 421 and "is not this server" in r.json()["error"], (name, r.text)
            assert c.post("/answer", json={"question": SWEEP}, headers=evil).status_code == 421
            assert c.get("/openapi.json", headers=evil).status_code == 421 and c.get("/", headers=evil).status_code == 421
        for name in ("localhost", "LOCALHOST", "127.0.0.1", "127.0.0.2", "[::1]"):
            assert c.get("/health", headers={"Host": f"{name}:{port}"}).status_code == 200, name
        assert c.get("/nope", headers={"Host": "attacker.example"}).status_code == 404  # an unknown route names nothing
    with serving(index, "--quiet", "--token", "s3cret") as server, server.client() as c:
        r = c.get("/health", headers={"Host": "handbook.example", "Authorization": "Bearer s3cret"})
        assert r.status_code == 200  # behind a token (a proxy's name): the page cannot know the token


def _first_response(url: str, raw: bytes) -> tuple[int, dict[str, str], bytes]:
    """Send raw bytes on a new connection; the status, headers and body of the first response (read to its end)."""
    host, port = url.removeprefix("http://").rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=60) as sock:
        sock.sendall(raw)
        data = b""
        while b"\r\n\r\n" not in data or len(data.split(b"\r\n\r\n", 1)[1]) < int(_headers(data).get("content-length", 0)):
            got = sock.recv(65536)
            assert got, f"closed after {data!r}"
            data += got
    head, body = data.split(b"\r\n\r\n", 1)
    return int(head.split(b" ", 2)[1]), _headers(data), body


def _headers(data: bytes) -> dict[str, str]:
    lines = data.split(b"\r\n\r\n", 1)[0].decode("latin-1").split("\r\n")[1:]
    return {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines)}


@pytest.mark.parametrize(
    ("chunks", "status", "message"),
    [
        (b"ffffffffffffffffffff\r\n", 400, "a chunk size over 64 bits: malformed"),
        (b"2\r\n{}\r\nffffffffffffffffffff\r\n", 400, "a chunk size over 64 bits: malformed"),
        (b"fffffff\r\n", 413, "the body is over 65536 bytes"),
        (b"zz\r\n{}\r\n0\r\n\r\n", 400, "the request is not valid HTTP/1.1 (illegal chunk header"),
    ],
    ids=["20-digits", "20-digits-second", "over-the-limit", "not-hex"],
)
def test_a_malformed_chunk_size_is_answered_at_once(index: Path, chunks: bytes, status: int, message: str) -> None:
    """D17: a chunk size of twenty hex digits (over 64 bits) was a 408 after BODY_TIMEOUT, h11 waiting for bytes no
    body may hold; one h11 refuses was uvicorn's text/plain 400. Both are JSON at once, and close the connection."""
    head = b"POST /search HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
    with serving(index, "--quiet", "--max-body", "65536") as server:
        got, headers, body = _first_response(server.url, head + chunks)
        assert (got, headers["content-type"], headers["connection"]) == (status, "application/json", "close"), (got, headers, body)
        assert orjson.loads(body)["error"].startswith(message), body


def test_a_body_that_stops_coming_is_a_408_after_the_body_timeout(index: Path) -> None:
    """A request head declaring 100 bytes of body, and 10 sent: once the body timeout (a second here) has passed
    with the rest still missing, the answer is a 408 saying so, and the connection is closed."""
    head = b"POST /search HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n"
    with serving(index, "--quiet", "--body-timeout", "1") as server:
        got, headers, body = _first_response(server.url, head + b'{"query": ')
        assert (got, headers["connection"]) == (408, "close"), (got, headers, body)
        assert orjson.loads(body)["error"] == "the body did not arrive within 1 s", body


# --------------------------------------------------------------------------- round three: the workers


def _children(server: Server) -> list[int]:
    children = Path(f"/proc/{server.proc.pid}/task/{server.proc.pid}/children")
    return [int(pid) for pid in children.read_text().split()]


def test_a_stopped_worker_is_replaced(index: Path) -> None:
    """D9: `kill -STOP` on one of two workers: its listening socket went on taking its share of new connections,
    which waited for ever. A worker that has not beaten for prefork.STALL seconds is killed and started again."""
    from ragline import prefork

    server = Server.start(index, "--quiet", "--workers", "2")
    try:
        stopped, other = _children(server)
        os.kill(stopped, signal.SIGSTOP)
        wait_for(
            lambda: "is serving in place of the one that died" in server.log(), "the stopped worker was not replaced", prefork.STALL + 60
        )
        assert stopped not in _children(server) and other in _children(server)
        for _ in range(40):  # new connections: none reaches a socket nobody accepts on
            assert httpx.get(server.url + "/health", timeout=30).status_code == 200
        assert server.stop() == 0
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(stopped, signal.SIGKILL)
        server.stop()
    log = server.log()
    assert f"rag-serve: worker {stopped} has not answered for {prefork.STALL:g} s (stopped?): killing it" in log, log
    assert f"rag-serve: worker {stopped} stalled and was killed by SIGKILL; starting another in " in log


def test_a_worker_that_cannot_start_again_stops_the_server(tmp_path: Path) -> None:
    """D9's other side: a replacement that cannot load the index (damaged since the start) is not started again for
    ever: it says why, once, and the server stops with exit 1 (its one line), as at the first start."""
    index = build_index(tmp_path)
    server = Server.start(index, "--quiet", "--workers", "2")
    try:
        (index / "CURRENT").unlink()
        (index / "CURRENT").mkdir()
        victim = _children(server)[0]
        os.kill(victim, signal.SIGKILL)
        code = server.proc.wait(120)
    finally:
        server.stop()
    log = server.log()
    assert code == 1, log
    assert log.count("the index pointer CURRENT is damaged (a directory, not a file)") == 1 and log.count("starting another") == 1, log
    assert "Traceback" not in log


# --------------------------------------------------------------------------- round three: the chunker


def test_unique_chunk_ids_take_linear_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """D7: sections of one heading each tried every `~N` taken before them (16,000: 65 s). The next free `~N`
    is kept per slug and part: the chunk_id calls are linear in the sections, and the ids are the same."""
    import rag_chunk

    calls = [0]
    real = rag_chunk.chunk_id

    def counted(name: str, slug: str, suffix: str = "") -> str:
        calls[0] += 1
        return real(name, slug, suffix)

    monkeypatch.setattr(rag_chunk, "chunk_id", counted)
    n = 2000
    chunks = rag_chunk.chunk_document(rag_chunk.Doc("d", "d.md", "# T\n\n" + "## same\n\ntext\n\n" * n))
    assert [c["id"] for c in chunks] == ["d#same"] + [f"d#same~{i}" for i in range(2, n + 1)]
    assert calls[0] <= 2 * n, f"{calls[0]} chunk_id calls for {n} sections"
    words = " ".join(f"w{i}" for i in range(12))
    doc = f"# Doc\n\n## Step\n\n{words}.\n\n{words}.\n\n## Step 2\n\nx\n\n## Step\n\nagain\n\n## Step 2\n\ny\n"
    ids = [c["id"] for c in rag_chunk.chunk_document(rag_chunk.Doc("d", "d.md", doc), 10)]
    assert ids == ["d#step", "d#step-2", "d#step-3", "d#step-4", "d#step-2~2", "d#step~2", "d#step-2~3"]


# --------------------------------------------------------------------------- round three: what reaches a terminal


def test_bidi_controls_do_not_reach_the_log_or_the_terminal(tmp_path: Path) -> None:
    """D15: U+202E (right-to-left override) and the other embeddings and isolates reorder what follows them on
    screen; they reached the access log and the terminal raw. They are escaped as the control characters are."""
    from ragline.records import printable

    index = build_index(tmp_path, {"flip": "# Flip\n\n## The flipped sweep\n\nThe flipped sweep \u202eruns at 23:40\u202c daily.\n"})
    with serving(index) as server:
        httpx.get(server.url + "/%E2%80%AEnip.exe")
    assert "\u202e" not in server.log() and "rag-serve: GET /\\u202enip.exe 404 " in server.log()
    shown = on_a_terminal([*command("rag-search"), "--index", str(index), "--model", "hash", "When does the flipped sweep run?"])
    assert "\u202e".encode() not in shown and "\u202c".encode() not in shown and b"\\u202eruns" in shown, shown
    assert printable("a\u202ab\u202ec\u2066d\u2069e") == "a\\u202ab\\u202ec\\u2066d\\u2069e"


# --------------------------------------------------------------------------- round three: the index pointer


def test_a_fifo_as_current_blocks_no_one(tmp_path: Path) -> None:
    """D3: `mkfifo idx/CURRENT` under a running server. open() waited for a writer on the event loop: /health never
    answered and SIGTERM could not stop it; rag-search hung. The pointer is opened without blocking and must be a file."""
    index = build_index(tmp_path)
    served = (index / "CURRENT").read_text().strip()
    with serving(index, "--quiet") as server, httpx.Client(base_url=server.url, timeout=20) as c:
        (index / "CURRENT").unlink()
        os.mkfifo(index / "CURRENT")
        health = c.get("/health")
        assert health.status_code == 200 and health.json()["generation"] == served
        assert "CURRENT is damaged (a FIFO, not a file)" in health.json()["reload_error"], health.text
        assert c.get("/search", params={"q": SWEEP}).status_code == 200
        assert server.stop() == 0
    done = run("rag-search", "--index", index, "--model", "hash", SWEEP, timeout=60)
    assert done.returncode == 1 and done.stderr.decode() == (
        f"rag-search: {index}: the index pointer CURRENT is damaged (a FIFO, not a file): rebuild the index (rag-index --out writes over it)\n"
    )
    (index / "CURRENT").unlink()
    (index / "CURRENT").write_text(served + "\n")
    (index / served / "manifest.json").unlink()
    os.mkfifo(index / served / "manifest.json")  # the generation's manifest is read the same way
    done = run("rag-search", "--index", index, "--model", "hash", SWEEP, timeout=60)
    assert done.returncode == 1 and done.stderr.decode().endswith("manifest.json: index manifest is a FIFO, not a file: rebuild it\n")


@pytest.mark.parametrize("target", ["/dev/zero", "secret"])
def test_a_symlinked_current_is_refused_unread(tmp_path: Path, target: str) -> None:
    """D4, D10: CURRENT linked to /dev/zero was read whole before its length was checked (2.6 GB, a MemoryError
    traceback, /health 500); linked to a secret file, /health's reload_error showed its first 60 bytes. A symlinked
    pointer is refused without reading it, and a pointer's bytes are never repeated."""
    index = build_index(tmp_path)
    secret = tmp_path / "secret"
    secret.write_text("gen-hunter2 AKIAIOSFODNN7EXAMPLE\n")
    (index / "CURRENT").unlink()
    (index / "CURRENT").symlink_to(target if target.startswith("/") else secret)
    done = run("rag-search", "--index", index, "--model", "hash", SWEEP, timeout=60)
    assert done.returncode == 1 and done.stderr.decode().count("\n") == 1, done.stderr
    assert "CURRENT is damaged (a symbolic link, not a file)" in done.stderr.decode() and "hunter2" not in done.stderr.decode()
    (index / "CURRENT").unlink()
    shutil.copy(secret, index / "CURRENT")  # the same bytes in a plain file: not a generation's name, and not shown
    done = run("rag-search", "--index", index, "--model", "hash", SWEEP, timeout=60)
    err = done.stderr.decode()
    assert done.returncode == 1 and "(32 bytes that are not the name of a generation)" in err and "hunter2" not in err, err


def test_a_pointer_linked_to_a_secret_is_not_shown_by_health(tmp_path: Path) -> None:
    """D10 as the server meets it: reload_error names what is wrong with CURRENT, never what it holds."""
    index = build_index(tmp_path)
    secret = tmp_path / "secret"
    secret.write_text("hunter2 AKIAIOSFODNN7EXAMPLE\n")
    with serving(index, "--quiet") as server, server.client() as c:
        for damage in ("link", "copy", "zero"):
            (index / "CURRENT").unlink()
            if damage == "link":
                (index / "CURRENT").symlink_to(secret)
            elif damage == "zero":
                (index / "CURRENT").symlink_to("/dev/zero")
            else:
                shutil.copy(secret, index / "CURRENT")
            health = c.get("/health")
            assert health.status_code == 200 and "CURRENT is damaged" in health.json()["reload_error"], health.text
            assert "hunter2" not in health.text and "AKIA" not in health.text and "\\x00" not in health.text, health.text
            assert c.get("/search", params={"q": SWEEP}).status_code == 200
    assert "Traceback" not in server.log() and "hunter2" not in server.log()


# --------------------------------------------------------------------------- round three: the writers' lock


@pytest.mark.parametrize("lock", ["symlink", "hardlink", "fifo", "directory"])
def test_a_lock_that_is_not_ours_is_refused_and_left_alone(tmp_path: Path, lock: str) -> None:
    """D5: `ln -s ~/precious idx/.lock; rag-index --out idx` wrote rag-index's PID through the link into the
    target (truncated first). The lock is opened with O_NOFOLLOW and must be a regular file of one link."""
    index = build_index(tmp_path)
    live = (index / "CURRENT").read_text()
    precious = tmp_path / "precious"
    precious.write_text("the only copy\n")
    (index / ".lock").unlink()
    if lock == "symlink":
        (index / ".lock").symlink_to(precious)
    elif lock == "hardlink":
        os.link(precious, index / ".lock")
    elif lock == "fifo":
        os.mkfifo(index / ".lock")
    else:
        (index / ".lock").mkdir()
    embedded = check(run("rag-embed", "--model", "hash", stdin=check(run("rag-chunk", tmp_path / "corpus"))))
    done = run("rag-index", "--out", index, stdin=embedded, timeout=60)
    err = done.stderr.decode()
    assert done.returncode == 1 and err.count("\n") == 1 and err.startswith(f"rag-index: {index}: .lock is "), err
    assert err.endswith(", not rag-index's lock file: remove it\n"), err
    assert precious.read_text() == "the only copy\n" and (index / "CURRENT").read_text() == live
    assert sorted(p.name for p in index.iterdir() if p.name.startswith("gen-")) == [live.strip()]


# --------------------------------------------------------------------------- round three: index arrays that lie


def _edit_generation(index: Path, name: str, edit) -> None:
    """Replace one file of the live generation by edit(its array), or edit(its bytes) for chunks.jsonl, and put the
    manifest's size and sha256 for it back, as whoever edits an index can."""
    gen = index / (index / "CURRENT").read_text().strip()
    if name.endswith(".npy"):
        np.save(gen / name, edit(np.load(gen / name, allow_pickle=False)), allow_pickle=False)
    else:
        (gen / name).write_bytes(edit((gen / name).read_bytes()))
    manifest = orjson.loads((gen / "manifest.json").read_bytes())
    manifest["files"][name] = (gen / name).stat().st_size
    manifest["sha256"][name] = rag_index.file_digest(gen / name)
    (gen / "manifest.json").write_bytes(orjson.dumps(manifest))


def _nan_every_seventh(a: np.ndarray) -> np.ndarray:
    return np.where(np.arange(a.size).reshape(a.shape) % 7 == 0, np.nan, a).astype(np.float32)


LIES = {
    "vectors-strings": ("vectors.npy", lambda a: a.astype(str), "vectors.npy is damaged (<U32 values, not float32)"),
    "vectors-nan": ("vectors.npy", _nan_every_seventh, "vectors.npy is damaged (a value that is NaN or infinite)"),
    "docs-out-of-range": ("bm25/docs.npy", lambda a: a + 1000, "bm25/docs.npy is damaged (a chunk row outside 0..5)"),
    "docs-negative": ("bm25/docs.npy", lambda a: a - 1000, "bm25/docs.npy is damaged (a chunk row outside 0..5)"),
    "docs-floats": ("bm25/docs.npy", lambda a: a.astype(np.float64), "bm25/docs.npy is damaged (float64 values, not integers)"),
    "df-2d": ("bm25/df.npy", lambda a: np.stack([a, a]), "bm25/df.npy is damaged (shape (2, "),
    "indptr-scaled": ("bm25/indptr.npy", lambda a: a * 50, "bm25/indptr.npy is damaged (postings that disagree with df)"),
    "weights-nan": ("bm25/weights.npy", lambda a: np.full_like(a, np.nan), "bm25/weights.npy is damaged (a value that is NaN"),
    "terms-int64": ("bm25/terms_utf8.npy", lambda a: a.astype(np.int64), "bm25/terms_utf8.npy is damaged (int64 of shape"),
    "offsets-reversed": ("bm25/term_offsets.npy", lambda a: np.concatenate([a[:1], a[1:-1][::-1], a[-1:]]), "term_offsets.npy is damaged"),
    "chunk-text-number": (
        "chunks.jsonl",
        lambda b: b.replace(b'"text":"', b'"text":1,"was":"', 1),
        "chunks.jsonl is damaged (line 1: field 'text' must be a string",
    ),
    "chunk-id-twice": ("chunks.jsonl", lambda b: b + b.splitlines(keepends=True)[0], "chunks.jsonl is damaged (line 7: a second chunk"),
}


@pytest.mark.parametrize("lie", list(LIES))
def test_index_arrays_that_lie_are_one_line_at_load(tmp_path: Path, lie: str) -> None:
    """D11: arrays edited with the manifest's sizes and digests put back (strings or NaN in the vectors, chunk rows out
    of range, a 2-D df.npy) were tracebacks in rag-search (IndexError, TypeError, a numpy ufunc error) or silent NaN
    scores. `load` checks dtypes, shapes and ranges: one line naming the file, rebuild it."""
    index = build_index(tmp_path)
    name, edit, message = LIES[lie]
    _edit_generation(index, name, edit)
    done = run("rag-search", "--index", index, "--model", "hash", SWEEP, timeout=60)
    err = done.stderr.decode()
    assert done.returncode == 1 and err.count("\n") == 1 and done.stdout == b"", err
    assert err.startswith(f"rag-search: {index}: index file ") and message in err and err.endswith(": rebuild it\n"), err


def test_a_generation_that_lies_is_not_served_and_a_bug_is_a_json_500(tmp_path: Path) -> None:
    """D11 as the server meets it: a rebuilt generation whose arrays lie is not swapped in (the old one serves, /health
    says why); it was loaded, and its searches were plain-text 500s. A bug the server did not foresee is a JSON 500
    too (a fault injected at start-up through sitecustomize), its traceback on stderr."""
    index = build_index(tmp_path)
    corpus = tmp_path / "corpus"
    with serving(index, "--quiet") as server, server.client() as c:
        served = c.get("/health").json()["generation"]
        (corpus / "settlement.md").write_text((corpus / "settlement.md").read_text().replace("23:40", "22:15"))
        rebuild(corpus, index)
        _edit_generation(index, "bm25/docs.npy", lambda a: a + 1000)
        r = c.get("/search", params={"q": SWEEP})
        assert r.status_code == 200 and "23:40" in r.json()["hits"][0]["text"], r.text
        health = c.get("/health").json()
        assert health["generation"] == served and "bm25/docs.npy is damaged" in health["reload_error"], health
    rebuild(corpus, index)  # a generation that does not lie
    inject = tmp_path / "inject"
    inject.mkdir()
    (inject / "sitecustomize.py").write_text(
        "import rag_answer\n\ndef broken(*args, **kwargs):\n    raise RuntimeError('an injected bug')\n\nrag_answer.answer_records = broken\n"
    )
    with serving(index, "--quiet", env=stage_env(PYTHONPATH=str(inject))) as server, server.client() as c:
        r = c.post("/answer", json={"question": SWEEP})
        assert r.status_code == 500 and r.headers["content-type"] == "application/json", r.text
        assert r.json() == {"error": "internal error (RuntimeError): the server's log has its traceback"}
        assert c.get("/health").status_code == 200
    assert "RuntimeError: an injected bug" in server.log()


# --------------------------------------------------------------------------- round three: MCP on stdio


class RawMcp:
    """`rag-serve --mcp` as a subprocess spoken to line by line, as a host (or an attacker) can."""

    def __init__(self, index: Path, *flags: str, env: dict[str, str] | None = None):
        self.proc = subprocess.Popen(
            [*command("rag-serve"), "--mcp", "--index", str(index), *flags],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=open(index.parent / "mcp-raw.log", "ab"),  # noqa: SIM115 - the child writes to it until it exits
            env=env or stage_env(),
        )
        self.pending = b""
        self.seen: list[dict] = []  # every message read so far, in order
        init = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}}
        assert "result" in self.ask({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": init}, 1)
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def send(self, message: dict | bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(message if isinstance(message, bytes) else orjson.dumps(message) + b"\n")
        self.proc.stdin.flush()

    def reply(self, ident: object, timeout: float = 60) -> dict:
        """The next message answering `ident` (None: an error with a null id), within `timeout` seconds."""
        import select

        assert self.proc.stdout is not None
        deadline = time.monotonic() + timeout
        while True:
            while b"\n" in self.pending:
                line, self.pending = self.pending.split(b"\n", 1)
                message = orjson.loads(line)
                self.seen.append(message)
                if "id" in message and message["id"] == ident:
                    return message
            left = deadline - time.monotonic()
            assert left > 0, f"no reply to id {ident!r} within {timeout:g} s"
            if select.select([self.proc.stdout], [], [], left)[0]:
                data = os.read(self.proc.stdout.fileno(), 1 << 16)
                assert data, f"stdout closed with no reply to id {ident!r}"
                self.pending += data

    def ask(self, message: dict, ident: object) -> dict:
        self.send(message)
        return self.reply(ident)

    def call(self, ident: int, tool: str, arguments: dict) -> dict:
        return self.ask({"jsonrpc": "2.0", "id": ident, "method": "tools/call", "params": {"name": tool, "arguments": arguments}}, ident)

    def close(self) -> int:
        if self.proc.stdin and not self.proc.stdin.closed:
            self.proc.stdin.close()
        return self.proc.wait(60)


def test_mcp_answers_every_request_and_every_line(index: Path) -> None:
    """D12: a call holding a lone surrogate (valid JSON syntax, not Unicode) never got a reply; a line that is not
    JSON got no -32700. Each gets a JSON-RPC error (with the request's id when it has one), and the server goes on."""
    mcp = RawMcp(index)
    try:
        raw = b'{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"search","arguments":{"question":"\\ud800 sweep"}}}\n'
        mcp.send(raw)
        error = mcp.reply(2)["error"]
        assert error["code"] == -32600 and "lone surrogate ('\\ud800')" in error["message"], error
        mcp.send(b"{this is not json\n")
        assert mcp.reply(None)["error"]["code"] == -32700
        mcp.send(b"[1, 2]\n")  # JSON, but no JSON-RPC message
        assert mcp.reply(None)["error"]["code"] == -32600
        mcp.send(b'{"jsonrpc":"2.0","id":"x7","method":42}\n')
        assert mcp.reply("x7")["error"]["code"] == -32600
        found = mcp.call(3, "search", {"question": SWEEP})
        assert not found["result"].get("isError") and found["result"]["structuredContent"]["hits"], found
    finally:
        assert mcp.close() == 0


def test_mcp_arguments_are_as_strict_as_http(index: Path) -> None:
    """D13: `"k": "5"`, `"k": true` and `"dense": "yes"` were accepted over MCP where HTTP gives 422."""
    mcp = RawMcp(index)
    try:
        for n, (tool, bad) in enumerate(
            [("search", {"k": "5"}), ("search", {"k": True}), ("search", {"dense": "yes"}), ("answer", {"threshold": "0.5"})], 10
        ):
            result = mcp.call(n, tool, {"question": SWEEP} | bad)["result"]
            (name,) = bad
            assert result.get("isError") and result["content"][0]["text"].startswith(f"{name}:"), (bad, result)
        assert not mcp.call(20, "search", {"question": SWEEP, "k": 5, "dense_weight": 1})["result"].get("isError")
    finally:
        assert mcp.close() == 0


def test_one_huge_mcp_message_is_refused_in_bounded_memory(index: Path) -> None:
    """D14: one 200 MB line took the server from 82 to 828 MB. A message over MAX_MESSAGE is refused unread (an
    error with a null id), and the server's peak memory grows by far less than the line."""
    from ragline.mcpserver import MAX_MESSAGE

    def peak_mib() -> float:
        status = Path(f"/proc/{mcp.proc.pid}/status").read_text()
        return int(status.split("VmHWM:")[1].split()[0]) / 1024

    mcp = RawMcp(index)
    try:
        before = peak_mib()
        size = 64 << 20
        assert mcp.proc.stdin is not None
        mcp.proc.stdin.write(b'{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"search","arguments":{"question":"')
        for _ in range(size >> 20):
            mcp.proc.stdin.write(b"sweep " * ((1 << 20) // 6))
        mcp.send(b'"}}}\n')
        error = mcp.reply(None, timeout=120)["error"]
        assert error["code"] == -32600 and f"over {MAX_MESSAGE} bytes" in error["message"], error
        assert not mcp.call(6, "search", {"question": SWEEP})["result"].get("isError")
        grew = peak_mib() - before
        assert grew < 32, f"peak memory grew by {grew:.0f} MiB for one {size >> 20} MiB line"
    finally:
        assert mcp.close() == 0


def test_calls_in_flight_are_answered_when_the_host_closes_stdin(index: Path) -> None:
    """D12: the host closing stdin mid-call made the server exit with the call dropped: no reply was ever written.
    At the end of stdin, the calls in flight finish (within DRAIN) and are answered before the server exits."""
    with gated_llm() as (url, asked, release, _):
        mcp = RawMcp(index, "--reader", "openai", env=stage_env(RAG_LLM_URL=url))
        try:
            mcp.send({"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": {"name": "answer", "arguments": {"question": SWEEP}}})
            assert asked.wait(60)
            assert mcp.proc.stdin is not None
            mcp.proc.stdin.close()
            release.set()
            answered = mcp.reply(9)
            assert answered["result"]["structuredContent"]["answer"] == "The sweep runs at 23:40 [1].", answered
        finally:
            release.set()
            code = mcp.close()
    assert code == 0


# --------------------------------------------------------------------------- round four (issue 40): MCP


@pytest.mark.parametrize("ident", [b'{"a":1}', b"null", b"1.5", b"[1]", b"true"])
def test_an_mcp_request_with_an_invalid_id_gets_an_error_with_a_null_id(index: Path, ident: bytes) -> None:
    """40.13: a request whose id is no string or integer was taken for a notification and never answered.
    JSON-RPC 2.0: an invalid id is an Invalid Request (-32600) answered with id null; the server goes on."""
    mcp = RawMcp(index)
    try:
        mcp.send(b'{"jsonrpc":"2.0","id":' + ident + b',"method":"tools/list"}\n')
        assert not mcp.call(7, "search", {"question": SWEEP})["result"].get("isError")  # the refusal is written before
        (error,) = [m["error"] for m in mcp.seen if "error" in m and m.get("id", 0) is None]
        assert error["code"] == -32600 and "id" in error["message"], error
    finally:
        assert mcp.close() == 0


def test_mcp_calls_have_the_http_work_budget(index: Path) -> None:
    """40.14: `candidates: 10000` was answered over MCP where HTTP gives a 413: one budget (serving.check_budget)
    for both; a call within it is answered."""
    mcp = RawMcp(index)
    try:
        for n, (tool, arguments) in enumerate([("search", {"candidates": 10_000}), ("answer", {"candidates": 10_000})], 30):
            result = mcp.call(n, tool, {"question": SWEEP} | arguments)["result"]
            assert result.get("isError") and f"over the {policy.MAX_HITS}" in result["content"][0]["text"], result
        assert not mcp.call(40, "search", {"question": SWEEP, "candidates": 100})["result"].get("isError")
    finally:
        assert mcp.close() == 0


# --------------------------------------------------------------------------- round four (issue 40): shedding


def test_sixteen_concurrent_searchers_are_all_served(work) -> None:
    """40.12: 16 threads of plain searches were refused once the expected wait passed 2 s (105 of 208 on a busy
    machine). A team of 16 (16 clients, searches of 0.4 s on a busy machine: 6.4 s of work in) and an agent
    fanning out 16 searches (one client, 0.25 s each: 3.75 s ahead of the last) are all served; times are the
    test's clock, so the outcome does not depend on the machine."""
    import asyncio

    async def burst(seconds: float, clients: list[str]) -> list[str]:
        pool = policy.Pool()
        await pool.run(work(seconds), client="warm")  # the pool knows what a search takes
        return await asyncio.gather(*(pool_attempt(pool, work(seconds), client) for client in clients))

    team = asyncio.run(burst(0.4, [f"10.0.0.{n}" for n in range(16)]))
    agent = asyncio.run(burst(0.25, ["10.0.0.1"] * 16))
    assert team == ["ran"] * 16 and agent == ["ran"] * 16, (team, agent)


def test_a_fresh_servers_first_burst_of_searches_is_served(work) -> None:
    """40.12, seen by `just hostile`: sixteen searches from one address at a fresh rag-serve got 7 refusals:
    nothing had finished yet, so past the room always kept an unknown mean refused. rag-serve times a
    search at start (`Pool.warm`); a kind never timed (answers, an LLM's) is still refused past the room."""
    import asyncio

    async def burst(warmed: bool) -> list[str]:
        pool = policy.Pool()
        if warmed:
            pool.warm("search", 0.01)
        started, release = threading.Event(), threading.Event()

        def first() -> None:
            started.set()
            release.wait(30)

        head = asyncio.ensure_future(pool.run(first, client="127.0.0.1", kind="search"))
        assert await asyncio.to_thread(started.wait, 30)

        async def one() -> str:
            try:
                await pool.run(work(0.01), client="127.0.0.1", kind="search")
                return "ran"
            except policy.Busy:
                return "busy"

        rest = asyncio.gather(*(one() for _ in range(15)))
        await asyncio.sleep(0)  # every one of them admitted or refused before the first finishes
        release.set()
        await head
        return await rest

    assert asyncio.run(burst(warmed=True)) == ["ran"] * 15
    refused = asyncio.run(burst(warmed=False))
    assert refused.count("busy") == 15 - (policy.WORKERS + policy.QUEUE - 1), refused


def test_the_warm_up_leaves_out_the_first_cold_search(monkeypatch: pytest.MonkeyPatch) -> None:
    """The first search after start carries one-off costs (with MiniLM many times a warm one's): timed as
    the search's mean it refused a fresh server's burst again. The fastest of the later ones is taken."""
    import rag_serve

    clock, costs = [0.0], iter([5.0, 0.03, 0.02])

    class Engine:
        def search(self, queries: list, overrides: dict) -> None:
            clock[0] += next(costs)

    monkeypatch.setattr(rag_serve, "time", types.SimpleNamespace(perf_counter=lambda: clock[0]))
    assert rag_serve.time_a_search(Engine()) == pytest.approx(0.02)  # type: ignore[arg-type]


def test_rag_serve_times_a_search_before_its_first_request(index: Path) -> None:
    """What `Pool.warm` is given: rag-serve measures one search as it starts; answers have no mean until one has run."""
    with serving(index, "--quiet") as server, server.client() as c:
        means = c.get("/health").json()["busy"]["mean_s"]
    assert means.get("search", 0) > 0 and "answer" not in means, means


def test_a_flooding_client_is_shed_not_the_others(work) -> None:
    """40.12: the wait bound is applied per client: one client's forty slow requests past the room and the
    bound are refused, while another client's search, arriving behind them, is let in."""
    import asyncio

    async def scenario() -> tuple[list[str], str]:
        pool = policy.Pool(max_wait=1.0)
        await pool.run(work(0.2), client="flood")
        flood = [pool_attempt(pool, work(0.2), "flood") for _ in range(40)]
        return list(await asyncio.gather(*flood, pool_attempt(pool, work(0.01), "team")))

    *flood, team = asyncio.run(scenario())
    assert flood.count("busy") == 40 - policy.WORKERS - policy.QUEUE and team == "ran", (flood, team)


async def pool_attempt(pool: policy.Pool, fn: Callable[[], None], client: str) -> str:
    """One request of `client` through `pool`: "ran", or "busy" when it was refused."""
    try:
        await pool.run(fn, client=client)
        return "ran"
    except policy.Busy:
        return "busy"
