"""mcpserver: tools over the Model Context Protocol, on stdio, for `rag-serve --mcp`.

    rag-serve --mcp --index build/idx      # what an MCP host starts (its configuration names this command)

An MCP host (a coding agent, a chat client) starts the server as a subprocess and speaks
JSON-RPC with it over stdin and stdout. Each `Tool` is one MCP tool: its input schema is
its pydantic arguments model's JSON schema (rag_serve declares those once, for HTTP and
here), and a call returns the tool's record twice, as text content holding the JSON line
and as structured content. The handbook's documents are resources (`Documents`). A call that cannot be answered (arguments out of range, a
blank question, an unknown chunk id, a reload that failed) is an MCP tool error whose
text is the one-line message; a bug is one too, its traceback on stderr. Nothing but
protocol goes to stdout: while serving, file descriptor 1 points at stderr and the
protocol is written through a private duplicate (as the SDK's own stdio transport does).

The transport (`_stdio`) is ragline's, not the SDK's `stdio_server`, which read a line
whole whatever its size (one of 200 MB took the process from 82 to 828 MB), dropped a
line it could not parse without a word (no -32700; a request holding a lone surrogate
never got a reply) and, when the host closed stdin, cancelled the calls in flight. Here a
message is at most MAX_MESSAGE bytes (a longer one is refused unread, in bounded memory);
a line that is not JSON gets -32700 and one that is JSON but no JSON-RPC message -32600,
with its id when it has one; and at the end of stdin the calls in flight get DRAIN
seconds to finish and be answered before the server stops.

The official SDK (`mcp` on PyPI, the `mcp` extra; its v2 low-level server) is imported
in `serve_stdio` and `_stdio` only, and nothing else in ragline imports it.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import sys
import traceback
from collections.abc import AsyncIterator, Callable, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import IO, Any

import orjson

import ragline.abandon
import ragline.records

EXTRA = "rag-serve --mcp needs the mcp extra: pip install 'ragline[mcp]' (the official MCP SDK)"
MAX_MESSAGE = 1 << 20  # bytes of one message from the host (a line); a longer one is refused unread
DRAIN = 30.0  # seconds the calls in flight get to finish and be answered once the host closes stdin
PARSE_ERROR, INVALID_REQUEST, INTERNAL_ERROR = -32700, -32600, -32603  # JSON-RPC 2.0's codes


@dataclass(frozen=True)
class Document:
    """One MCP resource: a handbook document, by URI."""

    uri: str
    name: str
    description: str


@dataclass(frozen=True)
class Documents:
    """The handbook's documents as resources: `listing()` lists them and `read(uri)` gives one's
    markdown, None for a URI that names none (both run on the worker, on the index of the moment)."""

    listing: Callable[[], list[Document]]
    read: Callable[[str], str | None]


NOT_FOUND = -32002  # the MCP error code for a resource that does not exist


@dataclass(frozen=True)
class Tool:
    """One MCP tool: a name, what it does, its arguments (a pydantic model: the input schema
    and the validation) and `call`, the validated arguments to a record (run on the worker)."""

    name: str
    description: str
    arguments: Any
    call: Callable[[Any], dict[str, Any]]


def serve_stdio(
    tools: Sequence[Tool],
    worker: Executor,
    name: str,
    version: str,
    instructions: str,
    expected: tuple[type[BaseException], ...],
    invalid: Callable[[list[Any]], str],
    documents: Documents | None = None,
) -> None:
    """Serve `tools` (and `documents` as resources) over stdio until the host closes stdin.

    Calls run one at a time on `worker` (the thread that owns the index and the vector
    cache). `expected` are the exceptions that mean the request cannot be answered: their
    message is the tool error's text. `invalid` makes one line of pydantic's validation errors.
    """
    try:
        import anyio
        import mcp.types as types
        from mcp.server.lowlevel import Server
        from mcp.shared.exceptions import MCPError
    except ImportError:
        raise ragline.records.StageError(EXTRA) from None
    from pydantic import ValidationError

    by_name = {t.name: t for t in tools}
    listed = types.ListToolsResult(
        tools=[
            types.Tool(
                name=t.name,
                description=t.description,
                input_schema=t.arguments.model_json_schema(),
                annotations=types.ToolAnnotations(read_only_hint=True, open_world_hint=False),
            )
            for t in tools
        ]
    )

    async def on_worker(fn: Callable[..., Any], *args: Any) -> Any:
        return await run_on(worker, fn, *args)

    def failed(message: str) -> Any:
        return types.CallToolResult(content=[types.TextContent(text=ragline.records.one_line(message))], is_error=True)

    async def list_tools(ctx: Any, params: Any) -> Any:
        return listed

    async def call_tool(ctx: Any, params: Any) -> Any:
        tool = by_name.get(params.name)
        if tool is None:
            return failed(f"no tool '{params.name}' (tools: {', '.join(by_name)})")
        try:
            arguments = tool.arguments.model_validate(params.arguments or {})
        except ValidationError as err:
            return failed(invalid(err.errors()))
        try:
            record = await on_worker(tool.call, arguments)
        except expected as err:
            return failed(str(getattr(err, "message", err)))
        except Exception as err:  # a bug: its traceback goes to stderr, the host gets one line
            traceback.print_exc(file=sys.stderr)
            return failed(f"internal error in {tool.name}: {type(err).__name__}: {err}")
        line = ragline.records.dumps(record)
        return types.CallToolResult(content=[types.TextContent(text=line.decode().rstrip("\n"))], structured_content=orjson.loads(line))

    async def list_resources(ctx: Any, params: Any) -> Any:
        assert documents is not None
        found = await on_worker(documents.listing)
        return types.ListResourcesResult(
            resources=[types.Resource(uri=d.uri, name=d.name, description=d.description, mime_type="text/markdown") for d in found]
        )

    async def read_resource(ctx: Any, params: Any) -> Any:
        assert documents is not None
        uri = str(params.uri)
        text = await on_worker(documents.read, uri)
        if text is None:
            raise MCPError(NOT_FOUND, f"no document {uri} in the index")
        return types.ReadResourceResult(contents=[types.TextResourceContents(uri=uri, mime_type="text/markdown", text=text)])

    handlers: dict[str, Any] = {"on_list_tools": list_tools, "on_call_tool": call_tool}
    if documents is not None:
        handlers |= {"on_list_resources": list_resources, "on_read_resource": read_resource}
    server = Server(name, version=version, instructions=instructions, **handlers)

    async def run() -> None:
        async with _stdio() as (read_stream, write_stream):
            await server.run(read_stream, write_stream, server.create_initialization_options())

    anyio.run(run)


async def run_on(worker: Executor, fn: Callable[..., Any], *args: Any) -> Any:
    """fn(*args) on `worker`, awaited. When the request is cancelled (the host's
    `notifications/cancelled`, or stdin closing) before it starts, it never runs; while it runs,
    it is abandoned (`ragline.abandon`): the local model stops at its next decode step, so the
    worker is free for the next call and the process can exit."""
    import anyio

    future, abandon = ragline.abandon.submit(worker, fn, *args)
    try:
        return await anyio.to_thread.run_sync(future.result, abandon_on_cancel=True)
    except anyio.get_cancelled_exc_class():
        if not future.cancel():
            abandon.set()
        raise


TOO_LONG = object()  # what `_read_line` gives for a line over the bound


def _read_line(reader: IO[bytes], limit: int) -> bytes | object | None:
    """The next line of `reader` (None at its end), or TOO_LONG for one over `limit` bytes, which is
    read past in pieces of 64 KiB, never held."""
    line = reader.readline(limit + 1)
    if not line:
        return None
    if len(line) > limit and not line.endswith(b"\n"):
        while (rest := reader.readline(1 << 16)) and not rest.endswith(b"\n"):
            pass
        return TOO_LONG
    return line


def _refusal(line: bytes, problem: str) -> tuple[Any, int, str] | None:
    """The JSON-RPC error a line that is not a message gets: (id, code, message); None for a notification (no reply).

    A line that does not parse (or is not UTF-8) is -32700 with a null id. One that parses (Python's parser,
    which takes a lone surrogate's escape where the SDK's does not) but is no JSON-RPC message is -32600, with
    its id when it has one: a request must get a reply whatever it holds."""
    try:
        data = json.loads(line.decode("utf-8"))
    except UnicodeDecodeError as err:
        return None, PARSE_ERROR, f"Parse error: not UTF-8 (byte 0x{line[err.start]:02x} at column {err.start + 1})"
    except (ValueError, RecursionError) as err:
        return None, PARSE_ERROR, f"Parse error: {ragline.records.one_line(str(err), 120)}"
    ident = data.get("id") if isinstance(data, dict) else None
    if isinstance(data, dict) and "method" in data and "id" not in data:
        return None  # a notification: JSON-RPC answers none
    if isinstance(ident, bool) or not isinstance(ident, (str, int)):
        ident = None
    try:
        json.dumps(data, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError as err:
        return ident, INVALID_REQUEST, f"Invalid request: it holds a lone surrogate ({err.object[err.start]!a}), not Unicode text"
    return ident, INVALID_REQUEST, f"Invalid request: {ragline.records.one_line(problem, 200)}"


def _bad_id(line: bytes) -> str | None:
    """The Invalid Request message for a line that the SDK took for a notification though it holds an "id"
    (null, a fraction, an object, true: not a string or an integer), None when it holds none.

    JSON-RPC 2.0 answers a request whose id cannot be read with an error whose id is null; the SDK's
    models read such a line as a notification (no reply), so it is looked at here."""
    data = json.loads(line)
    if not isinstance(data, dict) or "id" not in data:
        return None
    shown = ragline.records.one_line(json.dumps(data["id"]), 40)
    return f"Invalid request: the id {shown} is not a string or an integer"


@contextlib.asynccontextmanager
async def _stdio(max_message: int = MAX_MESSAGE, drain: float = DRAIN) -> AsyncIterator[tuple[Any, Any]]:
    """The streams `Server.run` reads and writes, over this process's stdin and stdout (see the module's docstring).

    While it runs, descriptor 0 reads /dev/null and 1 writes to stderr, so nothing else in the
    process reads the protocol or writes into it; both are put back at the end."""
    import anyio
    import mcp.types as types
    from mcp.shared.message import SessionMessage
    from pydantic import ValidationError

    wire_in, wire_out = fcntl.fcntl(0, fcntl.F_DUPFD_CLOEXEC, 3), fcntl.fcntl(1, fcntl.F_DUPFD_CLOEXEC, 3)
    null = os.open(os.devnull, os.O_RDONLY)
    sys.stdout.flush()
    os.dup2(null, 0)
    os.dup2(2, 1)
    os.close(null)
    reader = os.fdopen(wire_in, "rb", buffering=1 << 16)
    to_server, from_host = anyio.create_memory_object_stream[Any](0)
    to_host, from_server = anyio.create_memory_object_stream[Any](0)
    inflight: set[str] = set()  # ids of the requests passed on and not yet answered
    lock = anyio.Lock()
    gone = [False]  # the host closed our stdout: nothing more can reach it

    def write_all(data: bytes) -> None:
        while data:
            data = data[os.write(wire_out, data) :]

    async def write(data: bytes) -> None:
        async with lock:
            if gone[0]:
                return
            try:
                await anyio.to_thread.run_sync(write_all, data)
            except OSError:  # EPIPE: the host has gone
                gone[0] = True

    async def refuse(ident: Any, code: int, message: str) -> None:
        await write(orjson.dumps({"jsonrpc": "2.0", "id": ident, "error": {"code": code, "message": message}}) + b"\n")

    async def read_host() -> None:
        async with to_server:
            while (line := await anyio.to_thread.run_sync(_read_line, reader, max_message, abandon_on_cancel=True)) is not None:
                if line is TOO_LONG:
                    await refuse(None, INVALID_REQUEST, f"Invalid request: a message of over {max_message} bytes, refused unread")
                    continue
                assert isinstance(line, bytes)
                if not line.strip():
                    continue
                try:
                    message = types.jsonrpc_message_adapter.validate_json(line, by_name=False)
                except ValidationError as err:
                    if (reply := _refusal(line, str(err.errors()[0].get("msg", err)) if err.errors() else str(err))) is not None:
                        await refuse(*reply)
                    continue
                if isinstance(message, types.JSONRPCNotification) and (bad := _bad_id(line)) is not None:
                    await refuse(None, INVALID_REQUEST, bad)  # an id the SDK ignores: a request all the same
                    continue
                if isinstance(message, types.JSONRPCRequest):
                    inflight.add(str(message.id))
                elif isinstance(message, types.JSONRPCNotification) and message.method == "notifications/cancelled":
                    inflight.discard(str((message.params or {}).get("requestId")))  # the host expects no answer now
                await to_server.send(SessionMessage(message))
            with anyio.move_on_after(drain):  # the host closed stdin: the calls in flight finish and are answered
                while inflight and not gone[0]:
                    await anyio.sleep(0.05)

    async def write_host() -> None:
        async with from_server:
            async for item in from_server:
                message = item.message
                answer = isinstance(message, (types.JSONRPCResponse, types.JSONRPCError))
                try:
                    data = message.model_dump_json(by_alias=True, exclude_unset=True).encode("utf-8")
                except (UnicodeEncodeError, ValueError) as err:  # a reply that is not Unicode text: an error still answers
                    if answer:
                        await refuse(message.id, INTERNAL_ERROR, f"Internal error: the reply cannot be written ({type(err).__name__})")
                        inflight.discard(str(message.id))
                    continue
                await write(data + b"\n")
                if answer:
                    inflight.discard(str(message.id))

    try:
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(read_host)
            tasks.start_soon(write_host)
            yield from_host, to_host
    finally:
        sys.stdout.flush()
        os.dup2(wire_out, 1)
        os.dup2(wire_in, 0)
        os.close(wire_out)
        reader.close()
