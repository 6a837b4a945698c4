"""rag-serve as a real process on loopback, for the serve, browser and fuzz tests.

`Server.start(index, *flags)` runs the console script on port 0 (any free port), waits for
its "serving ... at URL" line on stderr and knows its URL; `stop` sends a signal and waits.
Every run uses the `hash` embedder's indexes, with RAG_MODEL_HOME pointing nowhere.
A slow stand-in for an OpenAI-protocol server (`slow_llm`) keeps a request in flight for as
long as a test needs, to test what happens to it meanwhile: `held=` an event, its reply waits
until the test sets it, so the request is in flight for certain however busy the machine is.
"""

from __future__ import annotations

import json
import re
import resource
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from llmserver import send_chat_reply
from stagecli import command, stage_env

pytest.importorskip("fastapi", reason="rag-serve's tests need the serve extra: pip install -e '.[serve-test]'")
httpx = pytest.importorskip("httpx", reason="rag-serve's tests need httpx: pip install -e '.[serve-test]'")

READY = re.compile(r"rag-serve: serving .* at (http://\S+)/")


@dataclass
class Server:
    proc: subprocess.Popen[bytes]
    log_path: Path
    url: str = ""

    @classmethod
    def start(
        cls,
        index: Path,
        *flags: str,
        env: dict[str, str] | None = None,
        log: Path | None = None,
        timeout: float = 60,
        files: int | None = None,
    ) -> Server:
        """`files`: the server's open-file limit (RLIMIT_NOFILE, soft and hard), as `ulimit -n` sets it."""
        log = log or index.parent / f"serve-{time.monotonic_ns()}.log"
        handle = open(log, "wb")  # noqa: SIM115 - the child writes to it until it exits
        proc = subprocess.Popen(
            [*command("rag-serve"), "--index", str(index), "--port", "0", *flags],
            stdin=subprocess.DEVNULL,
            stdout=handle,
            stderr=handle,
            env=env or stage_env(),
            preexec_fn=None if files is None else lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (files, files)),
        )
        handle.close()
        server = cls(proc, log)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if m := READY.search(server.log()):
                server.url = m.group(1)
                return server
            if proc.poll() is not None:
                raise AssertionError(f"rag-serve exited {proc.returncode}: {server.log()}")
            time.sleep(0.05)
        proc.kill()
        raise AssertionError(f"rag-serve did not start in {timeout} s: {server.log()}")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 40) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError(f"rag-serve did not stop in {timeout} s after {signal.Signals(sig).name}") from None

    def client(self, **kwargs: object) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=60, **kwargs)


@contextmanager
def serving(index: Path, *flags: str, env: dict[str, str] | None = None, files: int | None = None) -> Iterator[Server]:
    server = Server.start(index, *flags, env=env, files=files)
    try:
        yield server
    finally:
        server.stop()


HELD_AT_MOST = 120  # seconds a held reply waits for its event: a test that fails before setting it does not hang


class SlowLLM(BaseHTTPRequestHandler):
    """An OpenAI-protocol chat server that takes `delay` seconds (or, with a `gate`, waits until it is set),
    then quotes the time block [1] names; `calls` counts the requests it was sent."""

    delay = 1.5
    asked: threading.Event
    gate: threading.Event | None = None
    calls: list[int]

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.calls.append(1)
        self.asked.set()
        if self.gate is None:
            time.sleep(self.delay)
        else:
            self.gate.wait(HELD_AT_MOST)
        prompt = body["messages"][-1]["content"]
        found = re.search(r"\[1\][^\[]*?(\d\d:\d\d)", prompt, re.S)
        send_chat_reply(self, f"The sweep runs at {found.group(1)} [1]." if found else "I could not find that in the handbook.")

    def log_message(self, format: str, *args: object) -> None:
        pass


@contextmanager
def _llm(**attributes: object) -> Iterator[str]:
    handler = type("Slow", (SlowLLM,), attributes)
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)  # a quick shutdown()
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    finally:
        gate = attributes.get("gate")
        if isinstance(gate, threading.Event):
            gate.set()  # set on the way out, should the test not
        httpd.shutdown()
        httpd.server_close()


@contextmanager
def slow_llm(delay: float = 1.5, held: threading.Event | None = None) -> Iterator[tuple[str, threading.Event]]:
    """The URL of a SlowLLM on loopback, for RAG_LLM_URL, and an event set when it is first asked.
    With `held`, every reply waits until that event is set (set on the way out, should the test not)."""
    asked = threading.Event()
    with _llm(delay=delay, asked=asked, gate=held, calls=[]) as url:
        yield url, asked


@contextmanager
def gated_llm() -> Iterator[tuple[str, threading.Event, threading.Event, list[int]]]:
    """A SlowLLM that answers each request once `release` is set: (URL, asked, release, calls so far)."""
    asked, release, calls = threading.Event(), threading.Event(), []
    with _llm(asked=asked, gate=release, calls=calls) as url:
        yield url, asked, release, calls


def rebuild(corpus: Path, index: Path) -> None:
    """rag-chunk | rag-embed --model hash | rag-index --out index, as a user rebuilds one."""
    chunk = subprocess.Popen([*command("rag-chunk"), str(corpus)], stdout=subprocess.PIPE, env=stage_env())
    embed = subprocess.Popen(
        [*command("rag-embed"), "--model", "hash", "--quiet"], stdin=chunk.stdout, stdout=subprocess.PIPE, env=stage_env()
    )
    assert chunk.stdout is not None and embed.stdout is not None
    chunk.stdout.close()
    done = subprocess.run([*command("rag-index"), "--out", str(index), "--quiet"], stdin=embed.stdout, capture_output=True, env=stage_env())
    embed.stdout.close()
    assert chunk.wait() == 0 and embed.wait() == 0 and done.returncode == 0, done.stderr.decode()


def refuses_connections(url: str, timeout: float = 30) -> None:
    """Wait until a new connection to the server at `url` is refused: it has stopped listening.
    Until then a probe may be answered, or cut while the listener closes; past `timeout`, an AssertionError."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            httpx.get(url + "/health", timeout=5)
        except httpx.ConnectError:
            return
        except httpx.TransportError:  # accepted just before the listener closed, then dropped: not yet refused
            pass
        assert time.monotonic() < deadline, f"the server at {url} still takes new connections {timeout} s on"
        time.sleep(0.05)


def wait_for(condition: Callable[[], object], what: str, timeout: float = 60) -> None:
    """Poll `condition()` until it holds, or fail naming `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"{what} within {timeout:g} s"
        time.sleep(0.1)


def settled(client: httpx.Client, timeout: float = 30) -> dict:
    """/health once no swap is pending: /health answers at once and queues a swap to a new CURRENT on the worker."""
    deadline = time.monotonic() + timeout
    while True:
        health = client.get("/health").json()
        if health.get("pending") is None or time.monotonic() > deadline:
            return health
        time.sleep(0.05)
