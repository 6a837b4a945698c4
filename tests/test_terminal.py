"""The human views fit the terminal: rag-search and rag-answer on a real pseudo-terminal of 80 columns."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from corpora import TINY, build_index
from stagecli import command, on_a_terminal, run

import rag_answer
import rag_search
from ragline import terminal

LONG = {
    **TINY,
    "policies": """# Operational policies and procedures for the settlement platform, its partners and its auditors

## Exceptions to the nightly settlement sweep schedule during regional banking holidays and quarter-end closes

During a regional banking holiday the settlement sweep still runs at 23:40 IST, but the acquirer files are held until the next working day and the reconciliation report that finance reads every morning marks each held batch with the holiday's name and the date it will be released.
""",
}
QUESTION = "What happens to the settlement sweep during a regional banking holiday?"


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_index(tmp_path_factory.mktemp("terminal"), LONG)


def on_terminal(columns: int, *args: str | Path) -> list[str]:
    """Run a stage with stdout on a pseudo-terminal `columns` wide; its lines as the terminal got them."""
    out = on_a_terminal([*command(str(args[0])), *map(str, args[1:])], columns)
    return out.decode().replace("\r\n", "\n").split("\n")


@pytest.mark.parametrize("stage", ["rag-search", "rag-answer"])
def test_every_line_fits_an_80_column_terminal(index: Path, stage: str) -> None:
    lines = on_terminal(80, stage, "--index", index, QUESTION)
    assert max(len(line) for line in lines) <= 80, "\n".join(line for line in lines if len(line) > 80)
    assert sum(len(line) > 60 for line in lines) > 1  # the view uses the width it has, it is not cut to nothing
    whole = orjson.loads(run(stage, "--index", index, "--json", QUESTION).stdout.splitlines()[0])
    headings = whole["hits"][0]["headings"] if stage == "rag-search" else whole["citations"][0]["headings"]
    assert len(" > ".join(headings)) > 80  # the JSON keeps what the terminal could not show on one line


def test_a_wider_terminal_gets_longer_lines(index: Path) -> None:
    narrow, wide = on_terminal(60, "rag-answer", "--index", index, QUESTION), on_terminal(200, "rag-answer", "--index", index, QUESTION)
    assert max(map(len, narrow)) <= 60 < max(map(len, wide))


def test_cut_and_wrap() -> None:
    assert terminal.cut("a" * 30, 25) == "a" * 22 + "..."
    assert terminal.cut("short", 25) == "short"
    assert terminal.wrap("one two three four five six seven", 20, indent="  ") == ["  one two three four", "  five six seven"]
    assert terminal.wrap("", 20) == [""]
    assert all(len(line) <= 20 for line in terminal.wrap("x" * 50, 20))  # a word longer than a line is broken


def test_render_keeps_code_lines_whole_but_cut_and_leaves_width_none_alone() -> None:
    record = {
        "answer": "Run this:\n```bash\ncurl -X POST https://api.example/v2/charges -H 'NW-Idempotency-Key: abc' -d amount=100\n```\n[1]",
        "refused": False,
        "reason": None,
        "citations": [{"n": 1, "doc": "runbook", "headings": ["Runbook", "Example"], "path": "runbook.md", "start_line": 1, "end_line": 9}],
    }
    fitted = rag_answer.render(record, 40).split("\n")
    assert "```bash" in fitted and any(line.startswith("curl -X POST") and line.endswith("...") for line in fitted)
    assert max(map(len, fitted)) <= 40
    assert rag_answer.render(record) == record["answer"] + "\n\n[1] runbook :: Runbook > Example (runbook.md:1-9)\n"


def test_search_render_puts_a_long_path_on_its_own_line() -> None:
    hit = {
        "rank": 1,
        "score": 0.5,
        "chunk_id": "c" * 30,
        "path": "p/" * 30 + "x.md",
        "start_line": 1,
        "end_line": 2,
        "headings": ["H"],
        "text": "t",
    }
    record = {
        "question": "q",
        "confidence": 0.5,
        "ms": 1.0,
        "hits": [hit],
        "retrieval": {"dense": True, "sparse": True, "rerank": "none", "model": "hash"},
    }
    lines = rag_search.render(record, 70).split("\n")
    assert lines[3].endswith("c" * 30) and lines[4].strip().startswith("p/p/") and max(map(len, lines)) <= 70
