"""serving: how rag-serve holds up against clients: the connection policy, the bounded work pool, the budget of one request.

rag-serve's routes are thin; what keeps one client (careless or hostile) from taking the
service from everyone else lives here, so each rule is written once and tested alone:

- **Connections** (`Policy`, `guarded`). A connection has the policy's head timeout (rag-serve's
  --head-timeout, HEAD_TIMEOUT seconds by default) from its opening, or from the end of its last
  response, to send a whole request head; one that
  has not is closed (a socket that never speaks, a head sent a byte at a time). At most
  `connection_bound()` connections are held: a new one past the bound closes the connection
  that has waited longest without a request in flight and with nothing in its receive buffer
  (FIONREAD: a client whose head has arrived but is not read yet, in a burst of accepts, is
  kept), so a flood of idle sockets cannot keep a real client (an orchestrator's `/health`)
  out; when none is idle, it closes the one whose request has been in flight longest among
  those stalled on their client (a body still to come, a response it does not read), so
  connections holding back their bodies cannot either; only when every held connection waits
  for the server's own work (which the pool bounds) is the new one closed. A response the client
  does not read (the transport over its high-water mark) that takes no byte for the write timeout
  (--write-timeout, WRITE_TIMEOUT by default) closes its connection. The bound stays below the process's
  open-file limit, and connections are accepted ACCEPT_BATCH at a time (asyncio accepts as
  many as uvicorn's backlog says in one go, before the policy sees any: 2,048 by default,
  which a burst past the bound turned into EMFILE and a second without accepting), so
  accepting does not run out of descriptors; if it does anyway (another part of the process
  holds them), `loop_errors` says so in one line a minute, never a traceback per failed accept.
- **Work** (`Pool`). Search and answer run on WORKERS threads (one: the embedding cache's
  sqlite connection belongs to the thread that opened it, and the work is Python under the
  interpreter's lock anyway). A request waits for them while the work ahead of it is expected
  to end within MAX_WAIT seconds (the questions in, times the mean time of one question of their
  kind lately, less what the running one has done; a kind never run is unknown: `Pool.warm`), and while the questions in, its own included, fit in
  WORKERS + QUEUE (a batch of 64 takes 64 of that room, so nine such batches are not all let
  in); past that, or past QUEUE_MAX requests in, a request is refused at once with 429 and
  `Retry-After`, rather than waiting behind the others. A request with nothing ahead always
  runs. The wait bound is per client (`CLIENT`, the peer's address, set by the Gate): a request whose
  client has nothing else in is let in unless everyone's work in passes MAX_BACKLOG, so one client's
  flood is refused while a team's searches are not. So sixteen clients of searches are all served, and
  one agent's sixteen searches, while eight slow answers from one client fill its queue. Work whose client has closed its connection before the work began is dropped
  (the Gate's DEPARTED event; 499 in the log); work that had begun is abandoned, the local model
  stopping at its next decode step (`ragline.abandon`; a 499 too). `/health` never enters the pool.
- **A request's budget** (`check_budget`). Questions x hits (the larger of k and the candidate
  lists) at most MAX_HITS, question characters at most MAX_CHARS: a bigger request is a 413
  saying which bound and by how much, so no single request holds the worker for long.
  The body of a request must arrive within the body timeout (--body-timeout, BODY_TIMEOUT seconds by
  default; `Gate`, in rag_serve).

Nothing here imports a stage; uvicorn's protocol class is passed in.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import errno
import fcntl
import hmac
import ipaddress
import resource
import signal
import socket
import sys
import termios
import threading
import time
import unicodedata
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import orjson

import ragline.abandon
import ragline.options
import ragline.records
from ragline.records import StageError

# the defaults of rag-serve's --head-timeout, --body-timeout, --write-timeout (`Policy` holds a server's own)
HEAD_TIMEOUT: float = ragline.options.default("head_timeout")  # seconds a connection has to send a whole request head
BODY_TIMEOUT: float = ragline.options.default("body_timeout")  # seconds a request has to send its whole body
WRITE_TIMEOUT: float = ragline.options.default("write_timeout")  # seconds a response may go unread before its connection is closed
MAX_CONNECTIONS = 1000  # connections held at once, at most (less when the open-file limit is lower)
FD_RESERVE = 64  # descriptors kept for everything but connections: the index, the model, logs, the reload
WORKERS = 1  # threads running search and answer
QUEUE = 8  # questions that may always wait for a worker (a request counts its questions)
MAX_WAIT = 4.0  # seconds of work ahead a client's request may wait behind once it has work in; past it (and QUEUE), 429
MAX_BACKLOG = 30.0  # seconds of everyone's work in, past which even a client with nothing in is refused (GRACE: it can finish)
QUEUE_MAX = 256  # requests running or waiting, at most, however quick they are
RECENT = 0.2  # the weight of the latest request's time in the running mean
WORK = "work"  # the kind of work a request is when it names none: each kind (rag-serve's search, answer) has its own mean
MAX_HITS = 6400  # questions x max(k, candidates) in one request (64 questions of 100 hits)
MAX_CHARS = 16_384  # characters of all the questions of one request
RETRY_AFTER = 1  # seconds, in a 429's Retry-After
LOOP_NOTE_EVERY = 60.0  # seconds between two notes of one event-loop error
GRACE = 30  # seconds the requests in flight get to finish at SIGTERM
LISTEN_BACKLOG = 2048  # connections the kernel queues for accept, per listening socket
ACCEPT_BATCH = FD_RESERVE // 4  # connections accepted in one turn of the event loop (asyncio's accept loop takes uvicorn's backlog)
STAGE = "rag-serve"  # the access log's and the notes' prefix
REFUSED = "ragline.refused"  # a request's scope key: (status, message) when its body cannot be read (`guarded`)


def connection_bound(limit: int = MAX_CONNECTIONS) -> int:
    """Connections held at once: `limit`, or the open-file limit less FD_RESERVE if that is lower (at least 8)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return limit
    return max(8, min(limit, soft - FD_RESERVE))


class Busy(Exception):
    """The pool's queue is full: answer 429 now."""


CLIENT: contextvars.ContextVar[str | None] = contextvars.ContextVar("ragline_client", default=None)
"""Set by the Gate for the request being handled: its client (the peer's address), whose work the pool counts apart."""

DEPARTED: contextvars.ContextVar[asyncio.Event | None] = contextvars.ContextVar("ragline_departed", default=None)
"""Set by the Gate for the request being handled: an event set when its client closes the connection."""


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
    is expected to take at most MAX_WAIT seconds, or while the questions in, its own included,
    are at most `workers + queue`, never more than QUEUE_MAX requests.

    The work ahead is counted in questions (a batch request of 64 weighs 64 searches), at the
    running mean time of one question of the recent requests, less what a running request has
    done of it already: one heavy batch neither lets a flood of others in behind it nor shuts
    quick searches out after it. The room that is always there is counted in questions too, so
    nine batches of 64 are not all let in because nine requests fit (the first runs, the next
    waits only if its wait is short); a request with nothing ahead is always let in.

    A request whose client has gone (`DEPARTED`, set by the Gate when the connection closes)
    before its work started is dropped from the queue at once (`Gone`), its questions no longer
    counted; work already running is abandoned (`ragline.abandon`): the local model stops at its
    next decode step, and the request is a Gone too (499) once the worker is free."""

    def __init__(self, workers: int = WORKERS, queue: int = QUEUE, name: str = "rag-serve", max_wait: float = MAX_WAIT):
        self.executor = ThreadPoolExecutor(workers, thread_name_prefix=name)
        self.workers = workers
        self.capacity = workers + queue  # questions always admitted
        self.max_wait = max_wait
        self.means: dict[str, float] = {}  # of one question's work of each kind, recently; a kind absent until one has run
        self.admitted = 0  # requests running or waiting; touched on the event loop only
        self.questions = 0  # the questions they hold
        self.inflight: dict[_Timed, tuple[int, str]] = {}  # each request running or waiting: its questions and kind
        self.clients: dict[str | None, int] = {}  # each client's requests running or waiting
        self.refused = 0
        self.dropped = 0  # requests whose client left before their work began
        self.abandoned = 0  # requests whose client left while their work ran (stopped at the model's next step)

    def warm(self, kind: str, seconds: float) -> None:
        """What one question of `kind` takes, measured before any request (rag-serve times a search at
        start): a fresh server's first burst of searches is then judged by it, not refused for want of a
        mean past the room always kept (`just hostile` saw 7 of 208 refused)."""
        self.means.setdefault(kind, seconds)

    def expected_wait(self) -> float | None:
        """Seconds the work already in is expected to take (on `workers` threads), each request at the mean
        of its kind; None while a kind in has never run (its cost unknown: the room always kept is all
        that is let in)."""
        now, ahead = time.perf_counter(), 0.0
        for timed, (weight, kind) in self.inflight.items():
            if (mean := self.means.get(kind)) is None:
                return None
            expected = weight * mean
            ahead += expected if timed.started is None else max(0.0, expected - (now - timed.started))
        return ahead / self.workers

    def admits(self, questions: int = 1, client: str | None = None) -> bool:
        """Let a request of `questions` from `client` in? Always with nothing in; never past QUEUE_MAX requests;
        a client with nothing of its own in, unless the work in is past MAX_BACKLOG; else while the questions
        fit the room always kept or the work ahead is expected to end within `max_wait`."""
        if self.admitted == 0:
            return True
        if self.admitted >= QUEUE_MAX:
            return False
        wait = self.expected_wait()
        if not self.clients.get(client):
            return wait is None or wait <= MAX_BACKLOG
        if self.questions + max(1, questions) <= self.capacity:
            return True
        return wait is not None and wait <= self.max_wait

    async def run(self, fn: Callable[[], Any], questions: int = 1, client: str | None = None, kind: str = WORK) -> Any:
        """fn() on a worker thread, `questions` the work it holds, for `client` (default: CLIENT's); Busy at once
        when the pool does not admit it, Gone when the client leaves before it starts."""
        weight = max(1, questions)
        client = CLIENT.get() if client is None else client
        if not self.admits(weight, client):
            self.refused += 1
            raise Busy(f"the server is busy ({self.admitted} requests running or waiting): retry in {RETRY_AFTER} s")
        self.admitted += 1
        self.clients[client] = self.clients.get(client, 0) + 1
        self.questions += weight
        timed = _Timed(fn)
        self.inflight[timed] = (weight, kind)
        departed = DEPARTED.get()
        abandon = None
        try:
            future, abandon = ragline.abandon.submit(self.executor, timed)
            done = asyncio.wrap_future(future)
            if departed is not None:
                left = asyncio.ensure_future(departed.wait())
                try:
                    await asyncio.wait((done, left), return_when=asyncio.FIRST_COMPLETED)
                finally:
                    left.cancel()
                if not done.done() and future.cancel():  # not started: nobody is waiting for it
                    self.dropped += 1
                    raise Gone("the client closed the connection before its request ran")
                if not done.done():  # running: the local model stops at its next decode step
                    abandon.set()
                    self.abandoned += 1
                    with contextlib.suppress(Exception):
                        await done  # the worker is free again only once it has stopped
                    raise Gone("the client closed the connection while its request ran: its work was abandoned")
            return await done
        except asyncio.CancelledError:  # the server shuts down under this request: nobody will read it either
            if abandon is not None:
                abandon.set()
            raise
        finally:
            self.admitted -= 1
            self.questions -= weight
            if (left_in := self.clients.pop(client) - 1) > 0:
                self.clients[client] = left_in
            del self.inflight[timed]
            if timed.seconds is not None and not (abandon is not None and abandon.is_set()):  # work cut short teaches nothing
                each, m = timed.seconds / weight, self.means.get(kind)
                self.means[kind] = each if m is None else (1 - RECENT) * m + RECENT * each

    def call(self, fn: Callable[[], Any]) -> Any:
        """fn() on a worker thread, from outside the event loop (loading the first engine)."""
        return self.executor.submit(fn).result()


class _Timed:
    """fn, timed where it runs: a request's work, not its wait in the queue."""

    def __init__(self, fn: Callable[[], Any]):
        self.fn = fn
        self.started: float | None = None  # perf_counter when it began
        self.seconds: float | None = None

    def __call__(self) -> Any:
        self.started = time.perf_counter()
        try:
            return self.fn()
        finally:
            self.seconds = time.perf_counter() - self.started


class Policy:
    """The connection policy's state: the connections held, oldest first, and what was done to which."""

    def __init__(
        self,
        bound: int | None = None,
        head_timeout: float = HEAD_TIMEOUT,
        max_body: int | None = None,
        body_timeout: float = BODY_TIMEOUT,
        write_timeout: float = WRITE_TIMEOUT,
    ):
        self.bound = bound or connection_bound()
        self.head_timeout, self.body_timeout, self.write_timeout = head_timeout, body_timeout, write_timeout
        self.max_body = max_body  # bytes of a request body (the Gate's): a chunk declaring more is refused at once
        self.held: dict[Any, None] = {}  # insertion-ordered: the oldest connection first
        self.timed_out = 0  # closed for not sending a head in time
        self.write_timed_out = 0  # closed for not reading a response for write_timeout
        self.evicted = 0  # closed, idle, to make room for a new one
        self.evicted_busy = 0  # closed, its request stalled on the client, to make room for a new one
        self.refused = 0  # new ones closed at once: every held connection had a request the server was working on
        self.accepted = 0

    def admit(self, connection: Any) -> bool:
        """Hold `connection`, making room if the bound is reached (`room`); False: refuse it."""
        if len(self.held) >= self.bound and not self.room():
            self.refused += 1
            return False
        self.held[connection] = None
        self.accepted += 1
        return True

    def room(self) -> bool:
        """Close one held connection for a newcomer: the longest-idle silent one, else the one whose request has
        been in flight longest among those stalled on the client (a body still coming, a response it does not
        read). None of either: every held connection waits for the server's work, which the pool bounds."""
        idle = next((c for c in self.held if c.silent()), None)
        if idle is not None:
            self.evicted += 1
            idle.drop()
            return True
        stalled = [c for c in self.held if c.stalled()]
        if not stalled:
            return False
        self.evicted_busy += 1
        min(stalled, key=lambda c: c.since).drop()
        return True

    def release(self, connection: Any) -> None:
        self.held.pop(connection, None)

    def counts(self) -> dict[str, float]:
        """What was done to which connections, and the limits they are held to (the timeouts in seconds)."""
        return {
            "open": len(self.held),
            "bound": self.bound,
            "head_timeout_s": self.head_timeout,
            "body_timeout_s": self.body_timeout,
            "write_timeout_s": self.write_timeout,
            "accepted": self.accepted,
            "timed_out": self.timed_out,
            "write_timed_out": self.write_timed_out,
            "evicted": self.evicted,
            "evicted_busy": self.evicted_busy,
            "refused": self.refused,
        }


def guarded(base: type, policy: Policy) -> type:
    """uvicorn's HTTP protocol class `base` under `policy`: the head and write timeouts and the connection bound.

    Relies on what both of uvicorn's HTTP protocols have: `cycle` (the request in flight, None
    before the first: its `scope`, `message_event`, `response_started`), `on_response_complete`
    (called when a response is sent) and `send_400_response` (for a request that cannot be parsed).

    A request whose body cannot be read (a chunk size h11 refuses or one over 64 bits, 400; a chunk
    declaring more than the body limit, 413) is answered at once: through the Gate (`REFUSED`), in
    JSON, with `Connection: close`, where it waited BODY_TIMEOUT for bytes that could never be
    taken (408) or got uvicorn's plain-text 400. The chunk size is h11's reader's count of the bytes
    the current chunk has still to send (a private attribute: 0 where it is absent).
    """

    class Guarded(base):
        _admitted = False
        since = 0.0  # loop time the request in flight began (its head arrived)
        _unread = 0  # bytes waiting in the transport when the write timer was armed

        def connection_made(self, transport: Any) -> None:
            self.transport = transport
            self._timers: dict[str, asyncio.TimerHandle] = {}  # "head", "write": each pending at most once
            if not policy.admit(self):
                transport.abort()
                return
            self._admitted = True
            super().connection_made(transport)
            self._arm()

        def connection_lost(self, exc: Exception | None) -> None:
            policy.release(self)
            self._cancel()
            if self._admitted:  # not a connection refused at once
                super().connection_lost(exc)

        def on_response_complete(self) -> None:
            cycle = self.cycle
            super().on_response_complete()
            if self.cycle is not cycle:  # a pipelined request started
                self.since = asyncio.get_running_loop().time()
            if self.idle():  # not a pipelined request already started
                self._arm()

        def pause_writing(self) -> None:
            """The transport holds more than its high-water mark: the client is not reading; the write timeout from now."""
            super().pause_writing()
            self._unread = self.transport.get_write_buffer_size()
            self._later("write", policy.write_timeout, self._write_expire)

        def resume_writing(self) -> None:
            super().resume_writing()
            self._cancel("write")

        def _write_expire(self) -> None:
            """No progress means no byte taken since the timer was armed; some progress arms it again."""
            waiting = self.transport.get_write_buffer_size()
            if self.transport.is_closing() or not waiting:
                return
            if waiting < self._unread:
                self._unread = waiting
                self._later("write", policy.write_timeout, self._write_expire)
                return
            policy.write_timed_out += 1
            self.drop()

        def data_received(self, data: bytes) -> None:
            cycle = self.cycle
            super().data_received(data)
            if self.cycle is not cycle:  # a request head arrived
                self.since = asyncio.get_running_loop().time()
            chunk = getattr(getattr(getattr(self, "conn", None), "_reader", None), "_bytes_in_chunk", 0)
            if isinstance(chunk, int) and policy.max_body is not None and chunk > policy.max_body:
                self.refuse(
                    *((400, "a chunk size over 64 bits: malformed") if chunk >> 64 else (413, f"the body is over {policy.max_body} bytes"))
                )

        def send_400_response(self, msg: str) -> None:
            """uvicorn's answer to a request h11 cannot parse, as JSON; through the Gate when it waits for the body."""
            err = sys.exc_info()[1]  # called in uvicorn's `except h11.RemoteProtocolError:`
            why = f"the request is not valid HTTP/1.1 ({ragline.records.one_line(str(err or msg), 120)})"
            if self.cycle is not None and not self.cycle.response_started:
                self.refuse(400, why)
                return
            body = orjson.dumps({"error": why})
            head = f"HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\nconnection: close\r\n\r\n"
            self.transport.write(head.encode() + body)
            self.transport.close()

        def refuse(self, status: int, message: str) -> None:
            """Have the Gate answer the request in flight `status` at once, and close (its body is not read further)."""
            cycle = self.cycle
            if cycle is None or cycle.response_started or REFUSED in cycle.scope:
                if cycle is None or cycle.response_started:
                    self.transport.close()
                return
            cycle.scope[REFUSED] = (status, message)
            cycle.message_event.set()

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

        def stalled(self) -> bool:
            """A request in flight that waits for the client: its body still coming, or its response not being read."""
            cycle = self.cycle
            if self.idle() or self.transport.is_closing() or cycle is None:
                return False
            return bool(getattr(cycle, "more_body", False) or getattr(getattr(self, "flow", None), "write_paused", False))

        def drop(self) -> None:
            self._cancel()
            policy.release(self)
            self.transport.abort()

        def _later(self, name: str, delay: float, callback: Callable[[], None]) -> None:
            self._cancel(name)
            self._timers[name] = asyncio.get_running_loop().call_later(delay, callback)

        def _cancel(self, *names: str) -> None:
            """Cancel the named timers (all without a name)."""
            for name in names or tuple(self._timers):
                if (handle := self._timers.pop(name, None)) is not None:
                    handle.cancel()

        def _arm(self) -> None:
            self._later("head", policy.head_timeout, self._expire)

        def _expire(self) -> None:
            if self.idle() and not self.transport.is_closing():
                policy.timed_out += 1
                policy.release(self)
                self.transport.abort()

    return Guarded


def say(message: str) -> None:
    """One line on stderr: the notes of a server."""
    sys.stderr.write(message + "\n")


def loop_errors(note: Callable[[str], None], every: float = LOOP_NOTE_EVERY) -> Callable[[Any, dict[str, Any]], None]:
    """An event-loop exception handler: one line per kind of error at most every `every` seconds, with how many
    were not shown, and no traceback (asyncio's default prints one per failed accept: 47 MB in 12 s at EMFILE)."""
    last: dict[str, tuple[float, int]] = {}
    lock = threading.Lock()

    def handle(loop: Any, context: dict[str, Any]) -> None:
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
        note(f"{STAGE}: {ragline.records.printable(ragline.records.one_line(what))}{more}")

    return handle


# --------------------------------------------------------------------------- a request


class RequestError(Exception):
    """A request the server cannot answer: one line, and the HTTP status that says why."""

    def __init__(self, message: str, status: int = 400):
        super().__init__(message)
        self.message = ragline.records.one_line(message)
        self.status = status


class Gone(RequestError):
    """The client left before its request's work began: the work is dropped (499, as nginx logs it; nobody reads it)."""

    def __init__(self, message: str):
        super().__init__(message, 499)


def query_records(question: str | None, questions: list[str] | None, query_id: str | None = None) -> list[dict[str, Any]]:
    """The query records for one question or a batch (ids q1, q2, ... as for questions given as arguments)."""
    if (question is None) == (questions is None):
        raise RequestError("give 'question' (one) or 'questions' (a list), not both and not neither")
    for n, q in enumerate([question] if question is not None else questions or [], 1):
        if blank(q):
            raise RequestError("the question is blank" if question is not None else f"question {n} is blank", 422)
    if question is not None:
        return [{"id": query_id or "q1", "question": question}]
    if query_id is not None:
        raise RequestError("'id' goes with 'question'; a batch's ids are q1, q2, ...")
    return [{"id": f"q{n}", "question": q} for n, q in enumerate(questions or [], 1)]


def blank(question: str) -> bool:
    """No visible character: only spaces, control characters (NUL) and invisible format characters (zero-width ones)."""
    return all(c.isspace() or unicodedata.category(c) in ("Cc", "Cf", "Zs", "Zl", "Zp") for c in question)


# --------------------------------------------------------------------------- the address


def is_loopback(host: str) -> bool:
    """127.0.0.0/8, ::1 and localhost: addresses only this machine reaches."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


class Hosts:
    """The `Host:` values a server without a token answers: loopback names and addresses, and its own.

    DNS rebinding: a web page at http://attacker.example:PORT/ whose name the attacker then points
    at 127.0.0.1 makes the user's browser send it this server's answers (the handbook, /health's
    paths) as same-origin. The browser still says `Host: attacker.example:PORT`, so a server that
    answers only to `localhost`, loopback addresses and the address it was bound to (by name or
    number; any IP literal when bound to a wildcard address, which no DNS name can be) is out of
    its reach. The port is not compared. A token makes this moot (the page cannot know it)."""

    def __init__(self, host: str, bound: str):
        self.names = {"localhost", host.strip("[]").lower(), bound.lower()}
        self.any_address = ipaddress.ip_address(bound).is_unspecified

    def __call__(self, header: str) -> bool:
        name = header.strip().lower()
        name = name[1:].partition("]")[0] if name.startswith("[") else name.partition(":")[0] if name.count(":") == 1 else name
        name = name.rstrip(".")
        if name in self.names:
            return True
        try:
            address = ipaddress.ip_address(name)
        except ValueError:
            return False
        return address.is_loopback or self.any_address


def bind(host: str, port: int, *, shared: bool = False) -> socket.socket:
    """A listening socket, or a StageError naming the address when it is in use or not ours.

    `shared` (--workers N, where the system has SO_REUSEPORT): the socket is bound with
    SO_REUSEPORT and not listening, holding the address for the workers, each of which
    binds a listening socket of its own beside it (`worker_socket`): the kernel then hands
    each new connection to one worker's socket. Through one shared listening socket the
    worker that woke first took every connection waiting (a load generator's eight
    keep-alive connections all on one worker: the bench's finding), so the others sat idle.
    The address is first bound without SO_REUSEPORT and let go, so that a server already
    there (even another rag-serve --workers) is an error, not a silent partner.
    """
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as err:
        raise StageError(f"cannot bind {host}:{port}: {err.strerror}") from None
    family, kind, proto, _, address = infos[0]
    reuse_port = shared and hasattr(socket, "SO_REUSEPORT")
    try:
        sock = _bound(family, kind, proto, address, listen=not reuse_port)
        if reuse_port:  # the address is free: bind it again, with SO_REUSEPORT, on the port it got
            address = sock.getsockname()
            sock.close()
            sock = _bound(family, kind, proto, address, reuse_port=True)
    except OSError as err:
        why = "is in use (another server?)" if err.errno == errno.EADDRINUSE else f"cannot be bound: {err.strerror}"
        raise StageError(f"port {port} on {host} {why}") from None
    sock.set_inheritable(True)
    return sock


def worker_socket(held: socket.socket) -> socket.socket:
    """A worker's own listening socket on the address `held` (bound by `bind(shared=True)`), or
    `held` itself where it listens already (a system without SO_REUSEPORT: one shared socket)."""
    if held.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN):
        return held
    address = held.getsockname()
    try:
        own = _bound(held.family, held.type, held.proto, address, reuse_port=True, listen=True)
    except OSError as err:
        raise StageError(f"a worker cannot listen on port {address[1]}: {err.strerror}") from None
    held.close()  # the parent holds the address; this worker needs only its own socket
    return own


def _bound(family: int, kind: int, proto: int, address: Any, *, reuse_port: bool = False, listen: bool = False) -> socket.socket:
    """A socket bound to `address` with SO_REUSEADDR (and SO_REUSEPORT), listening if asked; closed
    again if any of that fails."""
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if reuse_port:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind(address)
        if listen:
            sock.listen(LISTEN_BACKLOG)
    except OSError:
        sock.close()
        raise
    return sock


# --------------------------------------------------------------------------- the gate and the runner


class Gate:
    """The outermost ASGI layer: the bearer token, the body limit, the Host, and one access-log line per request.

    A body is read whole here (at most `max_body` bytes, whatever Content-Length says, within
    `body_timeout` seconds) and handed on, so an oversized one is a 413 and a slow one a
    408 before any route sees it. The scheme of `Authorization` is matched without regard to
    case (RFC 6750), the token exactly. Every response says `X-Content-Type-Options: nosniff`,
    and every JSON one `Cache-Control: no-store`. The access log escapes control characters
    (`ragline.records.printable`): a path holding a newline or an escape sequence cannot forge
    a line or reach the operator's terminal. With `hosts` (a server without a token: `Hosts`), a
    request for one of the app's routes whose `Host:` is not this server's is a 421, after its body
    (an unknown path stays a 404, naming nothing).
    """

    def __init__(
        self,
        app: Any,
        token: str | None,
        max_body: int,
        log: Callable[[str], None] | None,
        cors: bool = False,
        hosts: Callable[[str], bool] | None = None,
        body_timeout: float = BODY_TIMEOUT,
    ):
        self.app, self.token, self.max_body, self.log, self.cors, self.hosts = app, token, max_body, log, cors, hosts
        self.body_timeout = body_timeout
        self.routes = {path for route in getattr(app, "routes", ()) if isinstance(path := getattr(route, "path", None), str)}

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = [0]

        async def sending(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
                headers = list(message.get("headers", []))
                names = {k.lower() for k, _ in headers}
                extra = [(b"x-content-type-options", b"nosniff")] if b"x-content-type-options" not in names else []
                if (b"content-type", b"application/json") in [(k.lower(), v) for k, v in headers] and b"cache-control" not in names:
                    extra.append((b"cache-control", b"no-store"))
                message = message | {"headers": headers + extra}
            await send(message)

        try:
            await self._handle(scope, receive, sending)
        finally:
            if self.log:
                ms = (time.perf_counter() - start) * 1000
                shown = ragline.records.printable(f"{scope['method']} {scope['path']}")
                self.log(f"{STAGE}: {shown} {status[0] or '-'} {ms:.1f} ms")

    async def _handle(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        if self.token and scope["path"] != "/" and not (self.cors and scope["method"] == "OPTIONS"):
            scheme, _, given = headers.get("authorization", "").partition(" ")
            if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip(" ").encode("latin-1"), self.token.encode("latin-1")):
                await _reply(send, 401, "this server needs 'Authorization: Bearer TOKEN'", [(b"www-authenticate", b"Bearer")])
                return
        declared = headers.get("content-length", "")
        if declared.isdigit() and int(declared) > self.max_body:
            await _reply(send, 413, f"the body is over {self.max_body} bytes")
            return
        body = bytearray()
        more = scope["method"] in ("POST", "PUT", "PATCH", "DELETE")
        deadline = asyncio.get_running_loop().time() + self.body_timeout
        while more:
            try:
                message = await asyncio.wait_for(receive(), max(0.0, deadline - asyncio.get_running_loop().time()))
            except TimeoutError:
                await _reply(send, 408, f"the body did not arrive within {self.body_timeout:g} s", [(b"connection", b"close")])
                return
            if REFUSED in scope:  # the protocol found the body unreadable (`guarded`)
                status, why = scope[REFUSED]
                await _reply(send, status, why, [(b"connection", b"close")])
                return
            if message["type"] == "http.disconnect":
                return
            body += message.get("body", b"")
            more = message.get("more_body", False)
            if len(body) > self.max_body:
                await _reply(send, 413, f"the body is over {self.max_body} bytes")
                return
        if self.hosts is not None and scope["path"] in self.routes and "host" in headers and not self.hosts(headers["host"]):
            shown = ragline.records.printable(ragline.records.one_line(headers["host"], 80))
            await _reply(send, 421, f"Host '{shown}' is not this server: without a token it answers only to localhost and its own address")
            return
        sent = False
        departed = asyncio.Event()

        async def watch() -> dict[str, Any]:
            """http.disconnect, once the client leaves (or the response is done): what comes after the body."""
            while (message := await receive())["type"] != "http.disconnect":
                pass  # a GET's empty body, not read above
            departed.set()
            return dict(message)

        watching = asyncio.ensure_future(watch())

        async def replay() -> dict[str, Any]:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": bytes(body), "more_body": False}
            return await asyncio.shield(watching)

        token, peer = DEPARTED.set(departed), CLIENT.set((scope.get("client") or ("",))[0] or None)
        try:
            await self.app(scope, replay, send)
        finally:
            DEPARTED.reset(token)
            CLIENT.reset(peer)
            watching.cancel()


async def _reply(send: Any, status: int, message: str, headers: list[tuple[bytes, bytes]] = ()) -> None:  # type: ignore[assignment]
    body = orjson.dumps({"error": message})
    head = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()), *headers]
    await send({"type": "http.response.start", "status": status, "headers": head})
    await send({"type": "http.response.body", "body": body})


def serve(
    app: Any,
    sock: socket.socket,
    policy: Policy,
    note: Callable[[str], None] | None = None,
    beat: tuple[Callable[[], None], float] | None = None,
) -> str | None:
    """Run uvicorn on `sock` until SIGTERM or Ctrl-C; the requests in flight finish (GRACE s at most).

    Connections follow `policy` (guarded: the head and write timeouts, the bound), and errors of
    the event loop (a failed accept) are one line each to `note`, at most one a minute.
    `beat` (a worker's: `prefork.BEAT`) is (a call, seconds): made that often from the event
    loop while it serves, so whoever hears it knows the loop turns. Returns the name of the
    signal that stopped it. uvicorn's own habit of re-raising that signal after a graceful
    shutdown (which would end the process with it) is left out.
    """
    import uvicorn
    from uvicorn.protocols.http.h11_impl import H11Protocol

    say_line = note or say

    class Server(uvicorn.Server):
        stopped_by: str | None = None

        async def startup(self, sockets: list[socket.socket] | None = None) -> None:
            loop = asyncio.get_running_loop()
            loop.set_exception_handler(loop_errors(say_line))
            await super().startup(sockets)
            for listening in sockets or ():  # asyncio listened with the accept batch: the kernel's queue stays long
                listening.listen(LISTEN_BACKLOG)
            if beat is not None:
                call, every = beat

                def tick() -> None:
                    call()
                    loop.call_later(every, tick)

                tick()

        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            def stop(signum: int, frame: Any) -> None:
                self.stopped_by = signal.Signals(signum).name
                self.handle_exit(signum, frame)

            if threading.current_thread() is not threading.main_thread():
                yield
                return
            previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM)}
            try:
                yield
            finally:
                for sig, handler in previous.items():
                    signal.signal(sig, handler)

    config = uvicorn.Config(
        app,
        http=guarded(H11Protocol, policy),
        log_config=None,
        log_level="warning",
        access_log=False,
        timeout_graceful_shutdown=GRACE,
        lifespan="off",
        backlog=ACCEPT_BATCH,
    )
    server = Server(config)
    server.run(sockets=[sock])
    return server.stopped_by


def serve_workers(
    workers: int,
    sock: socket.socket,
    start: Callable[[], tuple[Any, Policy, str, Callable[[], int]]],
    say: Callable[[str], None],
    what: str,
) -> None:
    """`--workers N`: N processes (`ragline.prefork`) on the one address `sock` holds, each with a
    listening socket of its own there (`worker_socket`). Each runs `start()`, which loads what it
    serves (the index and the model: its own hot swap, its own /health counts) and gives (the
    ASGI app, the connection policy it is served under, one line of what it serves, the count of
    requests it has served).
    One line when all are serving, one when all have stopped; a worker that dies or stalls is
    started again (`prefork`); a worker that cannot start has said why on stderr, and the others
    are stopped with its exit status."""
    from ragline import prefork

    where = sock.getsockname()
    shown = f"[{where[0]}]" if ":" in where[0] else where[0]

    def child(report: prefork.Report) -> int:
        with ragline.records.stage(STAGE):  # a load that fails: its one line, and SystemExit(1) ends the worker
            app, policy, summary, served = start()
            own = worker_socket(sock)
            report("ready", summary)
            serve(app, own, policy, beat=(lambda: report(prefork.BEAT, ""), prefork.BEAT_EVERY))
            report("done", str(served()))
        return 0

    ready: list[str] = []
    served: list[int] = []

    def on_report(kind: str, pid: int, text: str) -> None:
        if kind == "ready":
            ready.append(text)
            if len(ready) == workers:
                say(f"{STAGE}: {what} ({ready[0]}) at http://{shown}:{where[1]}/ with {workers} workers")
        elif kind == "done" and text.isdigit():
            served.append(int(text))

    code, stopped = prefork.run(workers, child, on_report, note=lambda message: say(f"{STAGE}: {message}"), listening=sock)
    if code:
        raise SystemExit(code)
    say(f"{STAGE}: stopped{f' by {stopped}' if stopped else ''} after {sum(served)} requests")
