"""A stale index says so: the source files' facts from rag-chunk to the manifest, the check that stats
first and hashes only what moved, and the one line rag-search, rag-answer and rag-serve's /health give."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import orjson
import pytest
from corpora import TINY, build_index
from jsonl import parse
from stagecli import run

import rag_index
from rag_chunk import Selection
from rag_chunk import main as chunk_main
from ragline import sources
from ragline.models import sha256_file
from ragline.records import StageError

SWEEP = "When does the nightly sweep run?"


def corpus(root: Path) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for name, text in TINY.items():
        (root / f"{name}.md").write_text(text)
    return root


def watch_of(folder: Path, index: Path) -> sources.Watch:
    """The Watch an index at `index` built from `folder` would have."""
    gathered = {str(p): sources.facts(str(folder), sha256_file(p), os.stat(p)) for p in sorted(folder.glob("*.md"))}
    return sources.Watch(sources.anchor(gathered, index), index)


def later(path: Path) -> None:
    """Move a file's mtime a second on, its bytes unchanged (a checkout, a `touch`)."""
    stamp = os.stat(path).st_mtime_ns + 1_000_000_000
    os.utime(path, ns=(stamp, stamp))


@pytest.fixture
def hashed(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every file the check hashes, in order."""
    calls: list[str] = []
    real = sources.sha256_file

    def counting(path: str) -> str:
        calls.append(str(path))
        return real(path)

    monkeypatch.setattr(sources, "sha256_file", counting)
    return calls


def test_the_check_stats_first_and_hashes_only_what_moved(tmp_path: Path, hashed: list[str]) -> None:
    folder = corpus(tmp_path / "c")
    watch = watch_of(folder, tmp_path / "idx")
    assert watch.check() == sources.Report(3, (), ())
    assert hashed == []  # nothing moved: nothing hashed
    later(folder / "errors.md")
    assert watch.check() == sources.Report(3, (), ())  # touched, same bytes: not a change
    assert watch.check() == sources.Report(3, (), ())
    assert hashed == [str(folder / "errors.md")]  # hashed once for that move, then known by its new mtime
    (folder / "runbook.md").write_text(TINY["runbook"] + "One more line.\n")  # another size: changed, no hash needed
    same_size = TINY["settlement"].replace("23:40", "00:15")
    (folder / "settlement.md").write_text(same_size)
    later(folder / "settlement.md")
    (folder / "errors.md").unlink()
    report = watch.check()
    assert report == sources.Report(3, (str(folder / "runbook.md"), str(folder / "settlement.md")), (str(folder / "errors.md"),))
    assert hashed == [str(folder / "errors.md"), str(folder / "settlement.md")]
    assert report.stale


def test_the_notice_is_one_line_naming_what_moved_and_how_to_rebuild() -> None:
    assert sources.notice(sources.Report(12, (), ()), "x") is None
    line = sources.notice(sources.Report(12, ("a.md",), ()), "rag-chunk c | rag-embed | rag-index --out i")
    assert line == "a.md changed since the index was built (1 of 12 sources); rebuild it: rag-chunk c | rag-embed | rag-index --out i"
    many = sources.notice(sources.Report(12, ("a.md", "b.md", "c.md", "d.md", "e.md"), ("f.md",)), "R")
    assert many == "a.md, b.md, c.md and 2 more changed; f.md vanished since the index was built (6 of 12 sources); rebuild it: R"


def test_rag_chunk_records_each_file_s_facts_and_rag_index_keeps_them(runner, tmp_path: Path) -> None:
    folder = corpus(tmp_path / "c")
    result = runner.invoke(chunk_main, [str(folder)])
    recs = parse(result.stdout_bytes)
    settlement = folder / "settlement.md"
    assert recs[-1]["path"] == str(settlement)
    assert recs[-1]["source"] == {
        "root": str(folder),
        "size": settlement.stat().st_size,
        "mtime_ns": settlement.stat().st_mtime_ns,
        "sha256": sha256_file(settlement),
    }
    stdin = runner.invoke(chunk_main, ["--doc", "x"], input="# X\n\nText.\n")
    assert "source" not in parse(stdin.stdout_bytes)[0]  # nothing to watch on stdin
    (tmp_path / "i").mkdir()
    index = build_index(tmp_path / "i")
    manifest = rag_index.load(index).manifest
    assert sorted(manifest["sources"]) == sorted(str(tmp_path / "i" / "corpus" / f"{n}.md") for n in TINY)
    entry = manifest["sources"][str(tmp_path / "i" / "corpus" / "settlement.md")]
    assert (entry["file"], entry["root"]) == ("../corpus/settlement.md", "../corpus")  # relative to the index: it moves with its handbook
    assert all("source" not in c for c in rag_index.load(index).chunks)  # once in the manifest, not on every chunk


def test_rag_index_refuses_sources_that_disagree() -> None:
    files: dict[str, dict] = {}
    fact = {"root": "/h", "size": 10, "mtime_ns": 1, "sha256": "ab"}
    sources.gather(files, "a.md", fact, "<stdin>:1")
    sources.gather(files, "a.md", dict(fact), "<stdin>:2")
    with pytest.raises(StageError, match=r"the chunks of a.md come from two versions of it"):
        sources.gather(files, "a.md", fact | {"size": 11}, "<stdin>:3")
    with pytest.raises(StageError, match=r"field 'source' must be"):
        sources.gather(files, "b.md", {"root": "/h"}, "<stdin>:4")
    with pytest.raises(StageError, match=r"field 'source' must be .* \(and lists of globs\)"):
        sources.gather(files, "c.md", fact | {"exclude": "drafts"}, "<stdin>:5")


@pytest.mark.battery  # eight stage processes
def test_rag_search_and_rag_answer_say_in_one_line_that_a_page_changed(tmp_path: Path) -> None:
    folder = corpus(tmp_path / "handbook")
    chunks = run("rag-chunk", folder, cwd=tmp_path).stdout
    embedded = run("rag-embed", "--model", "hash", stdin=chunks, cwd=tmp_path).stdout
    assert run("rag-index", "--out", "idx", stdin=embedded, cwd=tmp_path).returncode == 0
    fresh = run("rag-answer", "--index", "idx", "--json", SWEEP, cwd=tmp_path)
    assert fresh.returncode == 0 and fresh.stderr == b""
    later(folder / "errors.md")  # touched, not changed: still no word
    assert run("rag-search", "--index", "idx", "--json", SWEEP, cwd=tmp_path).stderr == b""
    (folder / "settlement.md").write_text(TINY["settlement"].replace("23:40", "00:15"))
    for stage in ("rag-answer", "rag-search"):
        done = run(stage, "--index", "idx", "--json", SWEEP, cwd=tmp_path)
        assert done.returncode == 0 and orjson.loads(done.stdout.splitlines()[0])["question"] == SWEEP
        assert done.stderr.decode() == (  # paths under the working directory as relative ones
            f"{stage}: idx: handbook/settlement.md changed since the index was built (1 of 3 sources); "
            "rebuild it: rag-chunk handbook | rag-embed --model hash | rag-index --out idx\n"
        )
    shutil.rmtree(folder)
    gone = run("rag-answer", "--index", "idx", "--json", SWEEP, cwd=tmp_path).stderr.decode()
    assert "vanished since the index was built (3 of 3 sources)" in gone and gone.count("\n") == 1


def test_the_rebuild_command_is_the_pipeline_that_built_the_index(tmp_path: Path) -> None:
    index = build_index(tmp_path, window=120, passages=False)
    command = rag_index.rebuild_command(rag_index.load(index))
    assert command == f"rag-chunk --words 120 {tmp_path / 'corpus'} | rag-embed --model hash --no-passages | rag-index --out {index}"


def test_the_rebuild_command_repeats_the_globs_that_chose_the_pages(tmp_path: Path) -> None:
    """Following the stale notice must not index what --exclude left out (issue 40, item 8)."""
    (tmp_path / "corpus" / "drafts").mkdir(parents=True)
    (tmp_path / "corpus" / "drafts" / "plan.md").write_text("# Plan\n\nNot for the index.\n")
    select = Selection.of(include=["*.md"], exclude=["drafts", "old *.md"])
    index = build_index(tmp_path, select=select)
    loaded = rag_index.load(index)
    assert not any(c["doc"].startswith("drafts") for c in loaded.chunks)
    command = rag_index.rebuild_command(loaded)
    assert command == (
        f"rag-chunk --include '*.md' --exclude drafts --exclude 'old *.md' {tmp_path / 'corpus'} "
        f"| rag-embed --model hash --no-passages | rag-index --out {index}"
    )


def test_roots_chunked_with_other_globs_are_rebuilt_apart(tmp_path: Path) -> None:
    """A review: two rag-chunk runs joined (`--include 'guide/**'` over one folder, nothing over the other)
    gave a rebuild command applying the first run's globs to both, leaving the second's pages out."""
    import types

    one, two = corpus(tmp_path / "one"), corpus(tmp_path / "two")
    gathered = {
        str(p): sources.facts(str(root), sha256_file(p), os.stat(p), chosen)
        for root, chosen in ((one, {"include": ["guide/**"]}), (two, None))
        for p in sorted(root.glob("*.md"))
    }
    manifest = {"model": "hash", "sources": sources.anchor(gathered, tmp_path / "idx"), "chunking": {"window": 180}}
    command = rag_index.rebuild_command(types.SimpleNamespace(manifest=manifest, path=tmp_path / "idx"))  # type: ignore[arg-type]
    assert command.startswith(f"{{ rag-chunk --include 'guide/**' {one}; rag-chunk {two}; }} | rag-embed --model hash"), command


@pytest.mark.battery  # five stage processes
def test_an_index_moved_with_its_handbook_is_not_stale(tmp_path: Path) -> None:
    """The manifest keeps its sources relative to the index: built in one folder, moved whole, still fresh."""
    first = tmp_path / "one"
    corpus(first / "handbook")
    chunks = run("rag-chunk", "handbook", cwd=first).stdout
    embedded = run("rag-embed", "--model", "hash", stdin=chunks, cwd=first).stdout
    assert run("rag-index", "--out", "idx", stdin=embedded, cwd=first).returncode == 0
    moved = shutil.move(first, tmp_path / "two")
    assert run("rag-answer", "--index", "idx", "--json", SWEEP, cwd=Path(moved)).stderr == b""
    assert run("rag-answer", "--index", Path(moved) / "idx", "--json", SWEEP, cwd=tmp_path).stderr == b""
