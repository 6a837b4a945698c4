"""mcpserver: tools over the Model Context Protocol, on stdio, for `rag-serve --mcp`.

    rag-serve --mcp --index build/idx      # what an MCP host starts (its configuration names this command)

An MCP host (a coding agent, a chat client) starts the server as a subprocess and speaks
JSON-RPC with it over stdin and stdout. Each `Tool` is one MCP tool: its input schema is
its pydantic arguments model's JSON schema (rag_serve declares those once, for HTTP and
here), and a call returns the tool's record twice, as text content holding the JSON line
and as structured content. The handbook's documents are resources (`Documents`). A call that cannot be answered (arguments out of range, a
blank question, an unknown chunk id, a reload that failed) is an MCP tool error whose
text is the one-line message; a bug is one too, its traceback on stderr. Nothing but
protocol goes to stdout: while serving, the SDK's stdio transport points file
descriptor 1 at stderr and writes the protocol through a private duplicate.

The official SDK (`mcp` on PyPI, the `mcp` extra; its v2 low-level server) is imported
in `serve_stdio` only, and nothing else in ragline imports it.
"""

from __future__ import annotations

import sys
import traceback
from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any

import orjson

import ragline.records

EXTRA = "rag-serve --mcp needs the mcp extra: pip install 'ragline[mcp]' (the official MCP SDK)"


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
        from mcp.server.stdio import stdio_server
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
        return await anyio.to_thread.run_sync(lambda: worker.submit(fn, *args).result())

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
        async with stdio_server() as (read_stream, write_stream):
            await server.run(read_stream, write_stream, server.create_initialization_options())

    anyio.run(run)
