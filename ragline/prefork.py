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
its parent gone (killed without a word) stops itself the same way. When a child exits
with a non-zero status, or is killed, before the parent was told to stop, the parent
stops the others and returns that status: a server short of the workers it was started
with is not the one asked for.

Children report to the parent over one pipe, a line each (`kind pid text`, shorter than
PIPE_BUF, so lines from several children never interleave).
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

Report = Callable[[str, str], None]  # a child's: (kind, text)
OnReport = Callable[[str, int, str], None]  # the parent's: (kind, the child's pid, text)
ORPHAN_POLL = 1.0  # seconds between a child's checks that its parent is alive


def run(
    workers: int,
    child: Callable[[Report], int],
    on_report: OnReport,
    note: Callable[[str], None] = lambda message: None,
    listening: socket.socket | None = None,
) -> tuple[int, str | None]:
    """Fork `workers` children running `child`, one after another (the next once the last has
    reported "ready"); wait for all of them, calling `on_report(kind, pid, text)` in the parent
    for each line a child reports, and `note` for a child killed by a signal.

    Returns (exit status: 0, or the first failing child's; what stopped the server: the name
    of the signal the parent got, "worker PID's exit", or None when the children ended on
    their own). `listening`, the socket the children serve, is closed in the parent once the
    last child has it, or at the first signal: else the kernel would still queue connections
    for the parent, which never accepts them, after the children have stopped listening.
    """
    if workers < 1:
        raise ValueError(f"workers must be at least 1, got {workers}")
    read_end, write_end = os.pipe()
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


def _supervise(
    workers: int,
    start: Callable[[], int],
    read_end: int,
    on_report: OnReport,
    note: Callable[[str], None],
    listening: socket.socket | None,
) -> tuple[int, str | None]:
    """Start the children one by one, wait for them, pass the first SIGTERM or SIGINT on to them."""
    alive: set[int] = set()
    state: dict[str, str | None] = {"stopped_by": None}
    pending = b""
    started = 1  # children started so far: the first now, each next one when the one before is ready

    def stop_all() -> None:
        if listening is not None:
            listening.close()
        for pid in alive:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)

    def on_signal(signum: int, frame: object) -> None:
        if state["stopped_by"] is None:
            state["stopped_by"] = signal.Signals(signum).name
            stop_all()

    def read(timeout: float) -> bool:
        """Hand on the lines the children have written; start the next child on a "ready"."""
        nonlocal pending, started
        if not select.select([read_end], [], [], timeout)[0]:
            return False
        *lines, pending = (pending + os.read(read_end, 65536)).split(b"\n")
        for line in lines:
            kind, _, rest = line.decode("utf-8", "replace").partition(" ")
            pid, _, text = rest.partition(" ")
            if not pid.isdigit():
                continue
            on_report(kind, int(pid), text)
            if kind == "ready" and started < workers and state["stopped_by"] is None:
                alive.add(start())
                started += 1
                if started == workers and listening is not None:
                    listening.close()
        return True

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
    code = 0
    try:
        alive.add(start())
        if workers == 1 and listening is not None:
            listening.close()
        while alive:
            read(0.2)
            while alive:
                pid, status = os.waitpid(-1, os.WNOHANG)
                if pid == 0:
                    break
                alive.discard(pid)
                status = os.waitstatus_to_exitcode(status)
                if status != 0 and code == 0:
                    code = status if status > 0 else 128 - status  # killed by a signal: the shell's number
                    if status < 0:
                        note(f"worker {pid} was killed by {signal.Signals(-status).name}")
                    if state["stopped_by"] is None:
                        state["stopped_by"] = f"worker {pid}'s exit"
                        stop_all()
                elif state["stopped_by"] is None and started < workers:  # ended before it was ready, yet with 0
                    state["stopped_by"] = f"worker {pid}'s exit"
                    stop_all()
        while read(0):  # what the last children wrote before they exited
            pass
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return code, state["stopped_by"]
