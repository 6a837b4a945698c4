"""serving: how rag-serve holds up against clients: the connection policy, the bounded work pool, the budget of one request.

rag-serve's routes are thin; what keeps one client (careless or hostile) from taking the
service from everyone else lives here, so each rule is written once and tested alone:

- **Connections** (`Policy`, `guarded`). A connection has HEAD_TIMEOUT seconds from its
  opening, or from the end of its last response, to send a whole request head; one that
  has not is closed (a socket that never speaks, a head sent a byte at a time). At most
  `connection_bound()` connections are held: a new one past the bound closes the connection
  that has waited longest without a request in flight and with nothing in its receive buffer
  (FIONREAD: a client whose head has arrived but is not read yet, in a burst of accepts, is
  kept), so a flood of idle sockets cannot keep a real client (an orchestrator's `/health`)
  out; when every held connection is busy, the new one is closed. The bound stays below the process's
  open-file limit, so accepting never runs out of descriptors; if it does anyway (another
  part of the process holds them), `loop_errors` says so in one line a minute, never a
  traceback per failed accept.
- **Work** (`Pool`). Search and answer run on WORKERS threads (one: the embedding cache's
  sqlite connection belongs to the thread that opened it, and the work is Python under the
  interpreter's lock anyway). A request waits for them while the work ahead of it is expected
  to end within MAX_WAIT seconds (the questions in, times the mean time of one question lately),
  and QUEUE may always wait; past that, or past QUEUE_MAX requests in, a request is refused
  at once with 429 and `Retry-After`, rather than waiting behind the others. So thirty-two
  clients of millisecond searches are all served, while eight slow answers fill the queue.
  `/health` never enters the pool.
- **A request's budget** (`check_budget`). Questions x hits (the larger of k and the candidate
  lists) at most MAX_HITS, question characters at most MAX_CHARS: a bigger request is a 413
  saying which bound and by how much, so no single request holds the worker for long.
  The body of a request must arrive within BODY_TIMEOUT seconds (`Gate`, in rag_serve).

Nothing here imports a stage; uvicorn's protocol class is passed in.
"""

from __future__ import annotations

import asyncio
import fcntl
import resource
import sys
import termios
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

HEAD_TIMEOUT = 5.0  # seconds a connection has to send a whole request head
BODY_TIMEOUT = 10.0  # seconds a request has to send its whole body
MAX_CONNECTIONS = 1000  # connections held at once, at most (less when the open-file limit is lower)
FD_RESERVE = 64  # descriptors kept for everything but connections: the index, the model, logs, the reload
WORKERS = 1  # threads running search and answer
QUEUE = 8  # requests that may always wait for a worker
MAX_WAIT = 2.0  # seconds of work ahead a request may wait behind; past it (and QUEUE), 429
QUEUE_MAX = 256  # requests running or waiting, at most, however quick they are
RECENT = 0.2  # the weight of the latest request's time in the running mean
MAX_HITS = 6400  # questions x max(k, candidates) in one request (64 questions of 100 hits)
MAX_CHARS = 16_384  # characters of all the questions of one request
RETRY_AFTER = 1  # seconds, in a 429's Retry-After
LOOP_NOTE_EVERY = 60.0  # seconds between two notes of one event-loop error


def connection_bound(limit: int = MAX_CONNECTIONS) -> int:
    """Connections held at once: `limit`, or the open-file limit less FD_RESERVE if that is lower (at least 8)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return limit
    return max(8, min(limit, soft - FD_RESERVE))


class Busy(Exception):
    """The pool's queue is full: answer 429 now."""


class OverBudget(Exception):
    """One request asks for more work than MAX_HITS or MAX_CHARS allow: answer 413."""


def check_budget(questions: list[str], hits: int) -> None:
    """Refuse (OverBudget, one line) a request of `questions` asking for `hits` hits each, past MAX_HITS or MAX_CHARS."""
    work = len(questions) * hits
    if work > MAX_HITS:
        raise OverBudget(
            f"{len(questions)} questions x {hits} hits is {work} hits, over the {MAX_HITS} one request may ask for: "
            "ask for fewer hits (k, candidates) or split the batch"
        )
    chars = sum(len(q) for q in questions)
    if chars > MAX_CHARS:
        raise OverBudget(f"the questions hold {chars} characters, over the {MAX_CHARS} one request may send: split the batch")


class Pool:
    """WORKERS threads for the model work; a request waits for them while the work ahead of it
    is expected to take at most MAX_WAIT seconds, or fewer than `queue` wait, never more than QUEUE_MAX.

    The work ahead is counted in questions (a batch request of 64 weighs 64 searches), at the
    running mean time of one question of the recent requests: one heavy batch neither lets a
    flood of others in behind it nor shuts quick searches out after it."""

    def __init__(self, workers: int = WORKERS, queue: int = QUEUE, name: str = "rag-serve", max_wait: float = MAX_WAIT):
        self.executor = ThreadPoolExecutor(workers, thread_name_prefix=name)
        self.workers = workers
        self.capacity = workers + queue  # always admitted
        self.max_wait = max_wait
        self.mean_seconds: float | None = None  # of one question's work, recently; None until a request has run
        self.admitted = 0  # requests running or waiting; touched on the event loop only
        self.questions = 0  # the questions they hold
        self.refused = 0

    def expected_wait(self) -> float | None:
        """Seconds the work already in is expected to take (on `workers` threads), or None before any has run."""
        if self.mean_seconds is None:
            return None
        return self.questions * self.mean_seconds / self.workers

    def admits(self) -> bool:
        if self.admitted < self.capacity:
            return True
        wait = self.expected_wait()
        return self.admitted < QUEUE_MAX and wait is not None and wait <= self.max_wait

    async def run(self, fn: Callable[[], Any], questions: int = 1) -> Any:
        """fn() on a worker thread, `questions` the work it holds; Busy at once when the pool does not admit it."""
        if not self.admits():
            self.refused += 1
            raise Busy(f"the server is busy ({self.admitted} requests running or waiting): retry in {RETRY_AFTER} s")
        weight = max(1, questions)
        self.admitted += 1
        self.questions += weight
        timed = _Timed(fn)
        try:
            return await asyncio.get_running_loop().run_in_executor(self.executor, timed)
        finally:
            self.admitted -= 1
            self.questions -= weight
            if timed.seconds is not None:
                each, m = timed.seconds / weight, self.mean_seconds
                self.mean_seconds = each if m is None else (1 - RECENT) * m + RECENT * each

    def call(self, fn: Callable[[], Any]) -> Any:
        """fn() on a worker thread, from outside the event loop (loading the first engine)."""
        return self.executor.submit(fn).result()


class _Timed:
    """fn, timed where it runs: a request's work, not its wait in the queue."""

    def __init__(self, fn: Callable[[], Any]):
        self.fn = fn
        self.seconds: float | None = None

    def __call__(self) -> Any:
        start = time.perf_counter()
        try:
            return self.fn()
        finally:
            self.seconds = time.perf_counter() - start


class Policy:
    """The connection policy's state: the connections held, oldest first, and what was done to which."""

    def __init__(self, bound: int | None = None, head_timeout: float = HEAD_TIMEOUT):
        self.bound = bound or connection_bound()
        self.head_timeout = head_timeout
        self.held: dict[Any, None] = {}  # insertion-ordered: the oldest connection first
        self.timed_out = 0  # closed for not sending a head in time
        self.evicted = 0  # closed, idle, to make room for a new one
        self.refused = 0  # new ones closed at once: every held connection had a request in flight
        self.accepted = 0

    def admit(self, connection: Any) -> bool:
        """Hold `connection`, making room by closing the longest-idle one if the bound is reached; False: refuse it."""
        if len(self.held) >= self.bound:
            idle = next((c for c in self.held if c.silent()), None)
            if idle is None:
                self.refused += 1
                return False
            self.evicted += 1
            idle.drop()
        self.held[connection] = None
        self.accepted += 1
        return True

    def release(self, connection: Any) -> None:
        self.held.pop(connection, None)

    def counts(self) -> dict[str, int]:
        return {
            "open": len(self.held),
            "bound": self.bound,
            "accepted": self.accepted,
            "timed_out": self.timed_out,
            "evicted": self.evicted,
            "refused": self.refused,
        }


def guarded(base: type, policy: Policy) -> type:
    """uvicorn's HTTP protocol class `base` under `policy`: the head timeout and the connection bound.

    Relies on two things both of uvicorn's HTTP protocols have: `cycle` (the request in
    flight, None before the first) and `on_response_complete` (called when a response is sent).
    """

    class Guarded(base):  # type: ignore[misc, valid-type]
        _timer: asyncio.TimerHandle | None = None
        _admitted = False

        def connection_made(self, transport: Any) -> None:
            self.transport = transport
            if not policy.admit(self):
                transport.abort()
                return
            self._admitted = True
            super().connection_made(transport)
            self._arm()

        def connection_lost(self, exc: Exception | None) -> None:
            policy.release(self)
            self._disarm()
            if self._admitted:  # not a connection refused at once
                super().connection_lost(exc)

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if self.idle():  # not a pipelined request already started
                self._arm()

        def idle(self) -> bool:
            """No request in flight: before the first head, or between a response and the next head."""
            return self.cycle is None or self.cycle.response_complete

        def silent(self) -> bool:
            """Idle, and nothing the client sent is waiting to be read: safe to close for a newcomer."""
            if not self.idle() or self.transport.is_closing():
                return False
            sock = self.transport.get_extra_info("socket")
            try:
                waiting = fcntl.ioctl(sock.fileno(), termios.FIONREAD, b"\0\0\0\0")
            except (OSError, AttributeError, ValueError):
                return True
            return int.from_bytes(waiting, sys.byteorder) == 0

        def drop(self) -> None:
            self._disarm()
            policy.release(self)
            self.transport.abort()

        def _arm(self) -> None:
            self._disarm()
            self._timer = asyncio.get_running_loop().call_later(policy.head_timeout, self._expire)

        def _disarm(self) -> None:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None

        def _expire(self) -> None:
            self._timer = None
            if self.idle() and not self.transport.is_closing():
                policy.timed_out += 1
                policy.release(self)
                self.transport.abort()

    return Guarded


def loop_errors(note: Callable[[str], None], every: float = LOOP_NOTE_EVERY) -> Callable[[Any, dict[str, Any]], None]:
    """An event-loop exception handler: one line per kind of error at most every `every` seconds, with how many
    were not shown, and no traceback (asyncio's default prints one per failed accept: 47 MB in 12 s at EMFILE)."""
    last: dict[str, tuple[float, int]] = {}
    lock = threading.Lock()

    def handle(loop: Any, context: dict[str, Any]) -> None:
        from ragline.records import one_line, printable

        err = context.get("exception")
        message = str(context.get("message") or "event loop error")
        what = f"{message}: {err.strerror if isinstance(err, OSError) and err.strerror else err}" if err else message
        now = time.monotonic()
        with lock:
            when, hidden = last.get(message, (-float("inf"), 0))
            if now - when < every:
                last[message] = (when, hidden + 1)
                return
            last[message] = (now, 0)
        more = f" ({hidden} more like it not shown)" if hidden else ""
        note(f"rag-serve: {printable(one_line(what))}{more}")

    return handle
