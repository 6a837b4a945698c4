"""prefork: one server in several processes that share a listening socket.

A library, not a stage (rag_serve uses it for --workers). The parent has bound the address;
`run` forks `workers` children, each of which runs `child(report)` on its own (rag-serve:
load the index and the model, then uvicorn on a listening socket of its own, bound to the
parent's address with SO_REUSEPORT) and whose return value is its exit status. The kernel
hands each new connection to one child's socket, so the interpreters, each with its own
lock, answer on as many cores as there are workers.
The children start one after another, each once the one before has said it is ready: a
child that cannot start (a broken index) is the only one to say why, and the next start
does not compete with the last for the cores.

    def child(report):
        report("ready", "generation 7, 103 chunks")   # once it can answer
        ...                                           # serve until SIGTERM
        report("done", "120")                         # what the parent sums at the end
        return 0

    code, stopped_by = prefork.run(2, child, on_report=lambda kind, pid, text: ...)

The parent loads nothing and starts no thread before it forks (a fork copies only the
calling thread: onnxruntime's pools would not survive it). Each child is put in a process
group of its own, so a Ctrl-C at the terminal reaches the parent alone, which passes
SIGTERM and SIGINT on to every child once (a second SIGINT would make uvicorn drop the
requests in flight); each child then finishes its requests and exits. A child that finds
its parent gone (killed without a word) stops itself the same way.

A child that dies once it has been ready (killed, a crash) is named on `note` and started
again, after RESTART_DELAY seconds doubled for each death in the last RESTART_WINDOW (at
most RESTART_MAX), while the others serve on: a server that lost a worker to the OOM killer
or a `kill -9` keeps serving. A ready child reports BEAT every BEAT_EVERY seconds from its
event loop (`serving.serve` does); one that has not for STALL seconds (stopped by SIGSTOP, a
loop blocked) is killed and started again, since its listening socket would go on taking
its share of the new connections with nobody to accept them. A child that exits before it
is ready (a broken index: it has said why) stops the server with its status, at the first
start or at a restart, so a worker that cannot start is not started again for ever.

Children report to the parent over one pipe, a line each (`kind pid text`, shorter than
PIPE_BUF, so lines from several children never interleave). The pipe does not block: a
line that finds it full (a parent that stopped reading) is dropped rather than stopping
the child's event loop.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

Report = Callable[[str, str], None]  # a child's: (kind, text)
OnReport = Callable[[str, int, str], None]  # the parent's: (kind, the child's pid, text)
ORPHAN_POLL = 1.0  # seconds between a child's checks that its parent is alive
BEAT = "beat"  # the report a ready child makes every BEAT_EVERY seconds: it is answering
BEAT_EVERY = 1.0  # seconds between two beats of a child
STALL = 10.0  # seconds without a beat after which a ready child is taken for stopped, killed and started again
RESTART_DELAY = 0.5  # seconds before a dead worker is started again, doubled for each death in RESTART_WINDOW
RESTART_WINDOW = 60.0  # seconds over which deaths count towards the delay
RESTART_MAX = 30.0  # seconds before a restart, at most


def run(
    workers: int,
    child: Callable[[Report], int],
    on_report: OnReport,
    note: Callable[[str], None] = lambda message: None,
    listening: socket.socket | None = None,
) -> tuple[int, str | None]:
    """Fork `workers` children running `child`, one after another (the next once the last has
    reported "ready"); keep that many running (a dead or stalled one started again), calling
    `on_report(kind, pid, text)` in the parent for each line a child reports but its beats,
    and `note` for a child that died, stalled or is started again.

    Returns (exit status: 0, or that of the child that could not start, or the first that
    failed at shutdown; what stopped the server: the name of the signal the parent got,
    "worker PID's exit", or None when the children ended on their own). `listening`, the
    socket the children serve (and a restarted one binds beside), is closed in the parent at
    the first signal: else the kernel would still queue connections for the parent, which
    never accepts them, after the children have stopped listening.
    """
    if workers < 1:
        raise ValueError(f"workers must be at least 1, got {workers}")
    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)  # a child's report never waits for the parent
    parent = os.getpid()

    def start() -> int:
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:  # the child: never returns
            os.close(read_end)
            _child(child, write_end, parent)
        return pid

    try:
        return _supervise(workers, start, read_end, on_report, note, listening)
    finally:
        if listening is not None:
            listening.close()
        os.close(write_end)
        os.close(read_end)


def _child(child: Callable[[Report], int], write_end: int, parent: int) -> None:
    code = 1
    try:
        os.setpgid(0, 0)
        # until the child's server sets its own: either signal is an interrupt, as in a stage's start
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, _interrupt)
        _watch_parent(parent)
        pid = os.getpid()

        def report(kind: str, text: str) -> None:
            line = f"{kind} {pid} {' '.join(text.split())}"[: select.PIPE_BUF - 1] + "\n"
            with contextlib.suppress(BlockingIOError):  # the pipe is full: the parent is not reading
                os.write(write_end, line.encode("utf-8", "replace"))

        code = child(report)
    except SystemExit as exit:
        code = exit.code if isinstance(exit.code, int) else 1
    except BaseException:  # a bug: its traceback, then the child's exit
        import traceback

        traceback.print_exc()
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def _watch_parent(parent: int) -> None:
    """A daemon thread that sends this process SIGTERM when its parent is gone (it was re-parented)."""

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(ORPHAN_POLL)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="prefork-orphan", daemon=True).start()


@dataclass
class _Worker:
    """A child as the parent sees it."""

    ready: bool = False  # it has reported "ready" (a death now is a restart, not a failed start)
    beat: float = 0.0  # monotonic time of its last beat (or of its start, or its "ready")
    killed: bool = False  # the parent killed it for stalling
    restart: bool = False  # it replaces one that died


def _supervise(
    workers: int,
    start: Callable[[], int],
    read_end: int,
    on_report: OnReport,
    note: Callable[[str], None],
    listening: socket.socket | None,
) -> tuple[int, str | None]:
    """Start the children one by one, keep them running, pass the first SIGTERM or SIGINT on to them."""
    alive: dict[int, _Worker] = {}
    state: dict[str, str | None] = {"stopped_by": None}
    pending = b""
    due: list[float] = []  # monotonic times at which a replacement is to be started
    deaths: list[float] = []  # when ready workers died, for the restart delay
    first = [1]  # children of the first start so far: the next one when the one before is ready

    def stop(why: str) -> None:
        if state["stopped_by"] is not None:
            return
        state["stopped_by"] = why
        if listening is not None:
            listening.close()
        for pid in alive:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)

    def on_signal(signum: int, frame: object) -> None:
        stop(signal.Signals(signum).name)

    def launch(restart: bool = False) -> None:
        alive[start()] = _Worker(beat=time.monotonic(), restart=restart)

    def read(timeout: float) -> bool:
        """Hand on the lines the children have written; start the next child on a "ready"."""
        nonlocal pending
        if not select.select([read_end], [], [], timeout)[0]:
            return False
        *lines, pending = (pending + os.read(read_end, 65536)).split(b"\n")
        for line in lines:
            kind, _, rest = line.decode("utf-8", "replace").partition(" ")
            pid, _, text = rest.partition(" ")
            if not pid.isdigit():
                continue
            worker = alive.get(int(pid))
            if worker is not None and kind in ("ready", BEAT):
                worker.beat = time.monotonic()
            if kind == BEAT:
                continue
            on_report(kind, int(pid), text)
            if kind == "ready" and worker is not None:
                worker.ready = True
                if worker.restart:
                    note(f"worker {pid} is serving in place of the one that died")
                elif first[0] < workers and state["stopped_by"] is None:
                    launch()
                    first[0] += 1
        return True

    def died(pid: int, worker: _Worker, status: int) -> int:
        """What a child's exit means: its status for the server's (0: none), or a restart scheduled, or the server stopped."""
        how = f"was killed by {signal.Signals(-status).name}" if status < 0 else f"exited with status {status}"
        code = status if status > 0 else 128 - status if status < 0 else 0  # killed by a signal: the shell's number
        if state["stopped_by"] is not None or not worker.ready:
            if status < 0:
                note(f"worker {pid} {how}")
            if not worker.ready:  # it could not start (and has said why): no server without it
                stop(f"worker {pid}'s exit")
                return code or 1
            return code
        now = time.monotonic()
        deaths[:] = [t for t in deaths if now - t < RESTART_WINDOW] + [now]
        delay = min(RESTART_MAX, RESTART_DELAY * 2 ** (len(deaths) - 1))
        note(f"worker {pid} {'stalled and ' if worker.killed else ''}{how}; starting another in {delay:g} s")
        due.append(now + delay)
        return 0

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
    code = 0
    try:
        launch()
        while alive or (due and state["stopped_by"] is None):
            read(0.2)
            while alive:
                pid, status = os.waitpid(-1, os.WNOHANG)
                if pid == 0:
                    break
                code = died(pid, alive.pop(pid), os.waitstatus_to_exitcode(status)) or code
            now = time.monotonic()
            for pid, worker in alive.items():
                if worker.ready and not worker.killed and now - worker.beat > STALL:
                    note(f"worker {pid} has not answered for {STALL:g} s (stopped?): killing it")
                    worker.killed = True
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
            if due and state["stopped_by"] is None and all(w.ready for w in alive.values()) and min(due) <= now:
                due.remove(min(due))
                launch(restart=True)
        while read(0):  # what the last children wrote before they exited
            pass
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return code, state["stopped_by"]
