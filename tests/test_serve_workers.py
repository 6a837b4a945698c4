"""rag-serve --workers 2 as a real server on loopback: both processes answer, each the record the
single process gives; SIGTERM and Ctrl-C finish the requests in flight and exit 0; a rebuild is
picked up by every worker; an index that cannot serve is one line and exit 1."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import threading
from pathlib import Path

import pytest
from corpora import TINY, build_index
from serving import Server, httpx, rebuild, refuses_connections, serving, settled, slow_llm, wait_for
from stagecli import run, stage_env

pytestmark = pytest.mark.serve

SWEEP = "When does the nightly sweep run?"


def workers_of(server: Server) -> list[int]:
    """The server's child processes (its workers), from /proc."""
    children = Path(f"/proc/{server.proc.pid}/task/{server.proc.pid}/children")
    return [int(pid) for pid in children.read_text().split()]


def cpu_ticks(pid: int) -> int:
    """utime + stime of a process, in clock ticks (/proc/PID/stat fields 14 and 15)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_index(tmp_path_factory.mktemp("workers"))


def test_two_workers_both_answer_as_one_does(index: Path) -> None:
    """Two processes serve the port; connections from several clients reach both (each one's CPU time
    grows), and every answer is the single process's record. The connection options hold in each worker:
    /health reports the policy its own connection went through (accepted: at least that one)."""
    with serving(index, "--quiet") as one, one.client() as c:
        want = c.get("/search", params={"q": SWEEP}).json()
    with serving(index, "--quiet", "--workers", "2", "--head-timeout", "30") as server:
        connections = httpx.get(server.url + "/health", timeout=60).json()["connections"]
        assert connections["head_timeout_s"] == 30 and connections["accepted"] >= 1, connections
        pids = workers_of(server)
        assert len(pids) == 2
        before = {pid: cpu_ticks(pid) for pid in pids}
        got: list[dict] = []

        def ask() -> None:
            for _ in range(40):  # a new connection each time: the kernel hands it to a worker waiting in accept
                got.append(httpx.get(server.url + "/search", params={"q": SWEEP}, timeout=60).json())

        threads = [threading.Thread(target=ask) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        grew = {pid: cpu_ticks(pid) - before[pid] for pid in pids}
    assert len(got) == 160 and all({k: v for k, v in r.items() if k != "ms"} == {k: v for k, v in want.items() if k != "ms"} for r in got)
    assert all(ticks > 0 for ticks in grew.values()), grew
    assert "with 2 workers" in server.log()


def connections_of(pid: int, port: int) -> int:
    """How many established TCP connections on `port` the process `pid` holds (its socket
    descriptors matched against /proc/PID/net/tcp and tcp6, state 01)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(OSError):
            target = os.readlink(fd)
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    count = 0
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            if int(fields[1].rsplit(":", 1)[1], 16) == port and fields[3] == "01" and fields[9] in inodes:
                count += 1
    return count


def test_keep_alive_connections_opened_at_once_reach_every_worker(index: Path) -> None:
    """Sixteen connections opened at once and kept open, as a load generator's are, are spread over
    the workers: each worker holds some. Through one shared listening socket the worker that woke
    first accepted every waiting connection, and the other sat idle for the whole load."""
    with serving(index, "--quiet", "--workers", "2") as server:
        port = int(server.url.rsplit(":", 1)[1].strip("/"))
        pids = workers_of(server)
        clients = [socket.create_connection(("127.0.0.1", port)) for _ in range(16)]
        try:
            for c in clients:  # a request on each, answered: every connection has been accepted
                c.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")  # a Host of its own (not 'x': a 421)
            for c in clients:
                c.settimeout(30)
                assert c.recv(65536).startswith(b"HTTP/1.1 200")
            held = {pid: connections_of(pid, port) for pid in pids}
        finally:
            for c in clients:
                c.close()
    assert sum(held.values()) == 16 and all(n > 0 for n in held.values()), held


def test_a_second_server_on_the_workers_port_is_refused(index: Path) -> None:
    """The workers' sockets share their port with SO_REUSEPORT, which the kernel grants to any socket of
    the same user that asks for it: a second rag-serve --workers on that port must be told it is in use,
    not join in and take half the first one's connections."""
    with serving(index, "--quiet", "--workers", "2") as server:
        port = server.url.rsplit(":", 1)[1].strip("/")
        for flags in (["--workers", "2"], []):
            done = run("rag-serve", "--index", index, "--port", port, *flags, timeout=60)
            assert done.returncode == 1 and done.stdout == b"", done.stderr
            assert done.stderr.decode() == f"rag-serve: port {port} on 127.0.0.1 is in use (another server?)\n"


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "Ctrl-C"])
def test_a_signal_to_the_server_finishes_requests_in_flight(index: Path, sig: int) -> None:
    """The signal reaches the parent; each worker stops taking connections, finishes its request and exits;
    the parent exits 0 with the requests of all workers summed, and no worker is left behind."""
    release = threading.Event()
    with slow_llm(held=release) as (url, asked):
        server = Server.start(index, "--reader", "openai", "--workers", "2", env=stage_env(RAG_LLM_URL=url))
        try:
            pids = workers_of(server)
            with server.client() as c:
                assert c.get("/health").status_code == 200
            got: list = []

            def ask() -> None:
                with server.client() as c:
                    got.append(c.post("/answer", json={"question": SWEEP}))

            thread = threading.Thread(target=ask)
            thread.start()
            assert asked.wait(30)  # with the generator, held there until released
            server.proc.send_signal(sig)
            refuses_connections(server.url)  # neither worker takes a new connection
            assert thread.is_alive() and server.proc.poll() is None  # the request still in flight, and the server waits for it
            release.set()
            thread.join(30)
            code = server.proc.wait(30)
        finally:
            server.stop()
    assert got and got[0].status_code == 200 and got[0].json()["answer"] == "The sweep runs at 23:40 [1]."
    assert code == 0
    assert (
        server.log().splitlines()[-1] == f"rag-serve: stopped by {signal.Signals(sig).name} after 1 requests"
    )  # the /answer (/health is not counted)
    assert "Traceback" not in server.log()
    assert not any(os.path.exists(f"/proc/{pid}") for pid in pids)


def test_every_worker_follows_a_rebuild(tmp_path: Path) -> None:
    """Each worker swaps to the new generation on its own: after a rebuild, answers from new connections
    (reaching both workers) all come from it."""
    index = build_index(tmp_path)
    corpus = tmp_path / "corpus"
    with serving(index, "--quiet", "--workers", "2") as server:
        for _ in range(20):
            assert "23:40" in httpx.get(server.url + "/search", params={"q": SWEEP}, timeout=60).json()["hits"][0]["text"]
        (corpus / "settlement.md").write_text(TINY["settlement"].replace("23:40", "22:15"))
        rebuild(corpus, index)
        new = (index / "CURRENT").read_text().strip()
        for _ in range(20):  # a new connection each time: either worker; each reads CURRENT before a search
            with server.client() as c:
                assert "22:15" in c.get("/search", params={"q": SWEEP}).json()["hits"][0]["text"]
                assert settled(c)["generation"] == new


def test_an_index_that_cannot_serve_is_one_line(tmp_path: Path) -> None:
    """The first worker fails to load and says why, once (no second one is started); exit 1."""
    done = run("rag-serve", "--index", tmp_path / "missing", "--port", "0", "--workers", "2", timeout=60)
    assert done.returncode == 1 and done.stdout == b""
    assert done.stderr.decode() == f"rag-serve: {tmp_path / 'missing'}: no index here (run rag-index --out first)\n"


def test_a_killed_worker_is_started_again(index: Path) -> None:
    """A worker that dies (SIGKILL) is named on stderr and started again while the other serves on; every new
    connection is answered after, and SIGTERM still stops the server with 0. (Until issue 32, D9, a dead worker
    stopped the whole server, exit 137, and every connection was refused after.)"""
    server = Server.start(index, "--quiet", "--workers", "2")
    try:
        pids = workers_of(server)
        os.kill(pids[0], signal.SIGKILL)
        wait_for(lambda: "is serving in place of the one that died" in server.log(), "no worker replaced the killed one")
        now = workers_of(server)
        assert len(now) == 2 and pids[1] in now and pids[0] not in now, (pids, now)
        for _ in range(40):  # new connections, spread over both workers by the kernel
            assert httpx.get(server.url + "/search", params={"q": SWEEP}, timeout=30).status_code == 200
        code = server.stop()
    finally:
        server.stop()
    assert code == 0
    assert f"rag-serve: worker {pids[0]} was killed by SIGKILL; starting another in " in server.log()
    assert "Traceback" not in server.log()
