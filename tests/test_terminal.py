"""The human views fit the terminal: rag-search and rag-answer on a real pseudo-terminal of 80 columns."""

from __future__ import annotations

import re
from pathlib import Path

import orjson
import pytest
from corpora import TINY, build_index
from stagecli import command, on_a_terminal, run, stage_env

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


@pytest.mark.battery
@pytest.mark.parametrize("stage", ["rag-search", "rag-answer"])
def test_every_line_fits_an_80_column_terminal(index: Path, stage: str) -> None:
    lines = on_terminal(80, stage, "--index", index, QUESTION)
    assert max(len(line) for line in lines) <= 80, "\n".join(line for line in lines if len(line) > 80)
    assert sum(len(line) > 60 for line in lines) > 1  # the view uses the width it has, it is not cut to nothing
    whole = orjson.loads(run(stage, "--index", index, "--json", QUESTION).stdout.splitlines()[0])
    headings = whole["hits"][0]["headings"] if stage == "rag-search" else whole["citations"][0]["headings"]
    assert len(" > ".join(headings)) > 80  # the JSON keeps what the terminal could not show on one line


@pytest.mark.battery
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
    assert lines[3].endswith("c" * 30) and max(map(len, lines)) <= 70
    assert lines[4].strip().startswith(".../p/") and lines[4].endswith("/x.md:1-2")  # shortened from the left, the lines whole


# --------------------------------------------------------------------------- file:lines whole, and --text (issue 31)

DEEP = "handbooks/engineering/platform-group/standards/operations/incident-management"


@pytest.fixture(scope="module")
def deep_index(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An index whose files lie six folders down, so that `file:lines` is wider than a footnote's room."""
    root = tmp_path_factory.mktemp("deep")
    corpus = root / DEEP
    corpus.mkdir(parents=True)
    for name, text in LONG.items():
        (corpus / f"{name}-and-its-procedures.md").write_text(text)
    chunks = run("rag-chunk", root / "handbooks").stdout
    embedded = run("rag-embed", "--model", "hash", stdin=chunks).stdout
    assert run("rag-index", "--out", root / "idx", stdin=embedded).returncode == 0
    return root / "idx"


PLACE = re.compile(r"([^\s(]+\.md):(\d+)-(\d+)\)?$")


@pytest.mark.battery
@pytest.mark.parametrize("stage", ["rag-answer", "rag-search"])
def test_file_and_lines_stay_whole_on_an_80_column_terminal(deep_index: Path, stage: str) -> None:
    lines = on_terminal(80, stage, "--index", deep_index, QUESTION)
    assert max(len(line) for line in lines) <= 80, "\n".join(line for line in lines if len(line) > 80)
    places = [m for line in lines if (m := PLACE.search(line))]
    assert places, "\n".join(lines)
    for m in places:  # the file's name and its lines whole: the path lost folders from the left, not characters
        assert m.group(1).startswith(".../") and m.group(1).endswith("-and-its-procedures.md"), m.group()
    whole = orjson.loads(run(stage, "--index", deep_index, "--json", QUESTION).stdout.splitlines()[0])
    first = whole["citations"][0] if stage == "rag-answer" else whole["hits"][0]
    assert f"{first['start_line']}-{first['end_line']}" in places[0].group()


@pytest.mark.battery
@pytest.mark.parametrize("stage", ["rag-answer", "rag-search"])
def test_text_writes_the_terminal_s_view_to_a_pipe(index: Path, stage: str) -> None:
    piped = run(stage, "--index", index, "--text", QUESTION, env=stage_env(COLUMNS="80"))
    assert piped.returncode == 0, piped.stderr
    untimed = [re.sub(r"\d+ ms$", "N ms", line) for line in piped.stdout.decode().split("\n")]
    assert untimed == [re.sub(r"\d+ ms$", "N ms", line) for line in on_terminal(80, stage, "--index", index, QUESTION)]
    assert not piped.stdout.startswith(b"{") and re.search(rb"corpus/\S+\.md:\d+-\d+", piped.stdout)
    both = run(stage, "--index", index, "--text", "--json", QUESTION)
    assert both.returncode == 2 and b"--json and --text" in both.stderr


def test_place_shortens_the_path_from_the_left_and_never_the_lines() -> None:
    assert terminal.place("corpus/05-settlement.md", 12, 30, 80) == "corpus/05-settlement.md:12-30"
    assert terminal.place(str(Path.cwd() / "corpus" / "a.md"), 1, 9, 80) == "corpus/a.md:1-9"  # under the working directory: relative
    assert terminal.place("/elsewhere/a.md", 1, 9, 80) == "/elsewhere/a.md:1-9"
    assert terminal.place("a/b/c/d/e/standards/on-call.md", 12, 30, 31) == ".../standards/on-call.md:12-30"
    long_name = terminal.place("docs/" + "x" * 60 + ".md", 1, 2, 30)
    assert len(long_name) == 30 and long_name.startswith("...") and long_name.endswith("x.md:1-2")


@pytest.mark.battery
def test_text_piped_fits_the_terminal_its_stderr_is_on(index: Path) -> None:
    """`rag-answer --text ... | less`: stdout is a pipe, the terminal less shows on is stderr's."""
    import fcntl
    import os
    import pty
    import struct
    import subprocess
    import termios

    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 50, 0, 0))
    env = {k: v for k, v in stage_env().items() if k not in ("COLUMNS", "LINES")}
    try:
        done = subprocess.run(
            [*command("rag-answer"), "--index", str(index), "--text", QUESTION],
            stdout=subprocess.PIPE,
            stderr=follower,
            env=env,
            timeout=60,
        )
    finally:
        os.close(follower)
        os.close(leader)
    lines = done.stdout.decode().split("\n")
    assert done.returncode == 0 and max(map(len, lines)) <= 50 and max(map(len, lines)) > 40
