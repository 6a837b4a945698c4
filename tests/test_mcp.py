"""rag-serve --mcp: the tools over stdio, through the official MCP SDK's own client (`mcp.client.stdio`).

Each test starts `rag-serve --mcp` as a subprocess the way an MCP host does, and compares what
the tools return with the records the CLI writes for the same question.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
from corpora import TINY, build_index
from stagecli import command, run, stage_env

pytest.importorskip("mcp", reason="rag-serve --mcp's tests need the mcp extra: pip install -e '.[mcp]'")
import anyio
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from ragline import api

pytestmark = pytest.mark.serve

SWEEP = "When does the nightly sweep run?"
UNCOVERED = "Can customers pay with Apple Pay?"


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_index(tmp_path_factory.mktemp("mcp"))


def with_session(index: Path, body: Callable[[ClientSession], Awaitable[Any]], *flags: str, env: dict[str, str] | None = None) -> Any:
    """Start `rag-serve --mcp --index INDEX FLAGS` through the SDK's stdio client, initialise, run `body`."""
    cmd = command("rag-serve")
    params = StdioServerParameters(command=cmd[0], args=[*cmd[1:], "--mcp", "--index", str(index), *flags], env=env or stage_env())
    result: list[Any] = []

    async def main() -> None:
        with open(index.parent / "mcp-stderr.log", "a") as errlog:
            async with stdio_client(params, errlog=errlog) as (read, write), ClientSession(read, write) as session:
                await session.initialize()
                result.append(await body(session))

    anyio.run(main)
    return result[0]


def without_timing(record: dict) -> dict:
    return {k: v for k, v in record.items() if k not in ("ms", "answer_ms")}


def cli(stage: str, index: Path, *args: str) -> list[dict]:
    done = run(stage, "--index", index, "--json", *args)
    assert done.returncode == 0, done.stderr
    return [orjson.loads(line) for line in done.stdout.splitlines()]


def record_of(result: Any) -> dict:
    """The record a tool returned: its text content is the JSON line, its structured content the same object."""
    assert not result.is_error, result.content
    (text,) = result.content
    assert "\n" not in text.text
    assert json.loads(text.text) == result.structured_content
    return result.structured_content


# --------------------------------------------------------------------------- the tools


def test_the_tools_take_the_http_services_parameters(index: Path) -> None:

    tools = {t.name: t for t in with_session(index, lambda s: s.list_tools()).tools}
    assert set(tools) == {"search", "answer", "explain"}
    search, answer = tools["search"].input_schema, tools["answer"].input_schema
    assert search["required"] == ["question"] and answer["required"] == ["question"]
    assert set(search["properties"]) == {"question", *api.RETRIEVAL}
    assert set(answer["properties"]) == {"question", "threshold", "context", *api.RETRIEVAL}
    assert search == api.SearchTool.model_json_schema()  # the one declaration, as HTTP uses it
    http = api.Options.model_json_schema()["properties"]
    assert all(search["properties"][name] == http[name] for name in api.RETRIEVAL)
    assert set(tools["explain"].input_schema["required"]) == {"question", "chunk_id"}


def test_each_tool_returns_the_record_the_cli_writes(index: Path) -> None:
    async def calls(s: ClientSession) -> list[Any]:
        return [
            await s.call_tool("search", {"question": "NW-4021", "k": 2}),
            await s.call_tool("search", {"question": SWEEP, "sparse": False, "fusion": "rrf", "k": 3}),
            await s.call_tool("answer", {"question": SWEEP}),
            await s.call_tool("answer", {"question": UNCOVERED}),
            await s.call_tool("answer", {"question": SWEEP, "threshold": 1.0}),
            await s.call_tool("explain", {"question": "NW-4021 capture", "chunk_id": "errors#client-errors"}),
        ]

    hits, fused, answered, refused, strict, explained = (record_of(r) for r in with_session(index, calls))
    assert without_timing(hits) == without_timing(cli("rag-search", index, "--k", "2", "NW-4021")[0])
    assert without_timing(fused) == without_timing(cli("rag-search", index, "--k", "3", "--no-sparse", "--fusion", "rrf", SWEEP)[0])
    want = [cli("rag-answer", index, q)[0] for q in (SWEEP, UNCOVERED)]  # one question a call: each is q1
    assert [without_timing(answered), without_timing(refused)] == [without_timing(r) for r in want]
    assert answered["citations"][0]["chunk_id"] == "settlement#the-nightly-sweep" and refused["refused"] is True
    assert strict["refused"] and strict["generator"]["threshold"] == 1.0
    assert explained["chunk_id"] == "errors#client-errors" and explained["total"] > 0 and "dense" in explained


BAD_CALLS = [
    ("search", {"question": SWEEP, "k": 0}, "k: Input should be greater than or equal to 1"),
    ("search", {"question": "   "}, "question: String should match pattern"),
    ("search", {"k": 3}, "question: Field required"),
    ("search", {"question": SWEEP, "bogus": 1}, "bogus: Extra inputs are not permitted"),
    ("answer", {"question": SWEEP, "context": 51}, "context: Input should be less than or equal to 50"),
    ("search", {"question": SWEEP, "dense": False, "sparse": False}, "both retrievers are off"),
    ("explain", {"question": SWEEP, "chunk_id": "nope#none"}, "no chunk 'nope#none' in the index"),
    ("delete", {}, "no tool 'delete' (tools: search, answer, explain)"),
]


def test_a_bad_call_is_a_tool_error_of_one_line_and_the_server_goes_on(index: Path) -> None:
    async def calls(s: ClientSession) -> list[tuple[Any, Any]]:
        return [(await s.call_tool(tool, arguments), await s.call_tool("search", {"question": SWEEP})) for tool, arguments, _ in BAD_CALLS]

    for (bad, good), (tool, arguments, message) in zip(with_session(index, calls), BAD_CALLS, strict=True):
        assert bad.is_error and len(bad.content) == 1, (tool, arguments)
        text = bad.content[0].text
        assert message in text and "\n" not in text and "Traceback" not in text, (tool, arguments, text)
        assert record_of(good)["schema"] == "hits/1"
    assert "Traceback" not in (index.parent / "mcp-stderr.log").read_text()


def test_a_missing_index_is_one_line_on_stderr_and_nothing_on_stdout(tmp_path: Path) -> None:
    missing = tmp_path / "missing"
    done = run("rag-serve", "--mcp", "--index", missing, timeout=60)
    assert done.returncode == 1 and done.stdout == b""
    assert done.stderr.decode() == f"rag-serve: {missing}: no index here (run rag-index --out first)\n"
    with pytest.raises(Exception) as failed:  # the SDK's client: the server is gone before it says anything
        with_session(missing, lambda s: s.list_tools())
    assert "Traceback" not in str(failed.value)


@pytest.mark.parametrize("flags", [["--port", "8000"], ["--token", "t"], ["--quiet"]], ids=["port", "token", "quiet"])
def test_http_options_with_mcp_are_a_usage_error(index: Path, flags: list[str]) -> None:
    done = run("rag-serve", "--mcp", "--index", index, *flags, timeout=60)
    assert done.returncode == 2 and done.stdout == b"" and b"HTTP options; --mcp serves stdio" in done.stderr


def test_without_the_extra_says_how_to_get_it(index: Path) -> None:
    code = "import sys; sys.modules['mcp'] = None; sys.argv = ['rag-serve', '--mcp', '--index', sys.argv[1]]; import ragline; ragline.rag_serve()"
    done = subprocess.run([sys.executable, "-c", code, str(index)], capture_output=True, env=stage_env(), timeout=60)
    assert done.returncode == 1 and done.stdout == b""
    assert done.stderr.decode().endswith(
        "rag-serve: rag-serve --mcp needs the mcp extra: pip install 'ragline[mcp]' (the official MCP SDK)\n"
    )


def test_a_rebuilt_index_is_served_without_a_restart(tmp_path: Path) -> None:
    from serving import rebuild

    index = build_index(tmp_path)

    async def calls(s: ClientSession) -> tuple[dict, dict]:
        before = record_of(await s.call_tool("answer", {"question": SWEEP}))
        (tmp_path / "corpus" / "settlement.md").write_text(TINY["settlement"].replace("23:40", "22:15"))
        await anyio.to_thread.run_sync(rebuild, tmp_path / "corpus", index)
        return before, record_of(await s.call_tool("answer", {"question": SWEEP}))

    before, after = with_session(index, calls)
    assert "23:40" in before["answer"] and "22:15" in after["answer"] and "23:40" not in after["answer"]
    log = (tmp_path / "mcp-stderr.log").read_text()
    assert f"now serving generation {(index / 'CURRENT').read_text().strip()}" in log


def test_the_handbook_documents_are_resources(index: Path) -> None:
    import rag_index

    async def calls(s: ClientSession) -> tuple[Any, Any, Any]:
        listed = await s.list_resources()
        read = await s.read_resource(next(r.uri for r in listed.resources if r.name == "errors"))
        try:
            await s.read_resource("ragline://doc/nothing")
        except Exception as err:  # the SDK raises the server's error
            missing = err
        else:
            missing = None
        return listed, read, missing

    listed, read, missing = with_session(index, calls)
    docs = {c["doc"] for c in rag_index.load(index).chunks}
    assert {r.name for r in listed.resources} == docs and all(str(r.uri).startswith("ragline://doc/") for r in listed.resources)
    (content,) = read.contents
    chunks = sorted((c for c in rag_index.load(index).chunks if c["doc"] == "errors"), key=lambda c: c["start_line"])
    assert content.text == "\n\n".join(c["text"] for c in chunks) and "NW-4021" in content.text and content.mime_type == "text/markdown"
    assert missing is not None and "no document ragline://doc/nothing in the index" in str(missing)
