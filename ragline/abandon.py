"""abandon: work that nobody waits for any more, stopped at its next step.

rag-serve runs a request's model work on a worker thread (`ragline.serving.Pool`, the MCP
server's worker). When the client leaves while that work runs (its HTTP connection closes, its
MCP request is cancelled), the event loop sets the work's event (`submit`); the local model checks
it before each decode step (`ragline.answer.local.Budget.spend`) and stops there, as past its
deadline: the question falls back to the extractive answer or is refused, and nobody reads the
result. Work that does not check (a search, the extractive reader) is short and finishes.

    >>> abandoned()
    False
"""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Callable
from concurrent.futures import Executor, Future
from typing import Any

ABANDONED: contextvars.ContextVar[threading.Event | None] = contextvars.ContextVar("ragline_abandoned", default=None)
"""The event of the work running in this context: set when its client has gone."""


def abandoned() -> bool:
    """Has the client of the work running in this context gone?"""
    event = ABANDONED.get()
    return event is not None and event.is_set()


def submit(executor: Executor, fn: Callable[..., Any], *args: Any) -> tuple[Future[Any], threading.Event]:
    """fn(*args) on `executor`, in a copy of this context whose ABANDONED is a fresh event, and that
    event: set it to stop the work at its next step."""
    event = threading.Event()
    context = contextvars.copy_context()
    context.run(ABANDONED.set, event)
    return executor.submit(context.run, fn, *args), event
