"""rag-chunk's walk: the page types it reads, every file it passes over named with why, the
symlinks it will not follow out of the tree, --include / --exclude and --list."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from jsonl import parse

import rag_chunk
import ragline.records
from rag_chunk import main
from ragline.globs import Glob


def handbook(root: Path) -> Path:
    """A handbook as real ones come: pages of four types, a drafts folder, files that are no pages,
    a hidden folder, and symlinks in and out of the tree."""
    (root / "docs").mkdir(parents=True)
    (root / "drafts").mkdir()
    (root / ".git").mkdir()
    (root / "a.md").write_text("# A\n\nAlpha.\n")
    (root / "docs" / "b.markdown").write_text("# B\n\nBeta.\n")
    (root / "docs" / "c.mdx").write_text("# C\n\nGamma.\n")
    (root / "docs" / "on-call.html.md.erb").write_text("# On call\n\nDelta.\n")
    (root / "drafts" / "d.md").write_text("# D\n\nDraft.\n")
    (root / "logo.png").write_bytes(b"\x89PNG\r\n\x00")
    (root / "Makefile").write_text("all:\n")
    (root / ".git" / "config").write_text("[core]\n")
    return root


def run(runner, *args: str | Path):
    result = runner.invoke(main, [str(a) for a in args])
    return result, result.stderr.splitlines()


def test_the_page_types_and_their_document_ids(runner, tmp_path: Path) -> None:
    root = handbook(tmp_path / "h")
    result, _ = run(runner, root)
    assert result.exit_code == 0, result.stderr
    assert [(r["doc"], Path(r["path"]).relative_to(root).as_posix()) for r in parse(result.stdout_bytes)] == [
        ("a", "a.md"),
        ("docs/b", "docs/b.markdown"),
        ("docs/c", "docs/c.mdx"),
        ("docs/on-call", "docs/on-call.html.md.erb"),
        ("drafts/d", "drafts/d.md"),
    ]
    named, _ = run(runner, root / "docs" / "on-call.html.md.erb")  # a file named on the command line: its id drops the type too
    assert parse(named.stdout_bytes)[0]["id"] == "on-call#on-call"
    assert rag_chunk.doc_name("v1.2-notes.md") == "v1.2-notes" and rag_chunk.doc_name("README.MD") == "README"


def test_every_file_passed_over_is_named_with_why(runner, tmp_path: Path) -> None:
    root = handbook(tmp_path / "h")
    (root / ".draft.md").write_text("# Hidden\n")
    os.mkfifo(root / "pipe.md")
    (tmp_path / "elsewhere").mkdir()
    (root / "linked").symlink_to(tmp_path / "elsewhere")
    (root / "gone.md").symlink_to(tmp_path / "removed.md")
    result, lines = run(runner, root)
    assert result.exit_code == 0, result.stderr
    assert lines == [
        f"rag-chunk: {root / '.git'}: skipped, a hidden folder",
        f"rag-chunk: {root / 'linked'}: skipped, a symlinked folder, not followed",
        f"rag-chunk: {root / '.draft.md'}: skipped, a hidden file",
        f"rag-chunk: {root / 'Makefile'}: skipped, not a page (no suffix)",
        f"rag-chunk: {root / 'gone.md'}: skipped, a symlink to nothing ({tmp_path / 'removed.md'})",
        f"rag-chunk: {root / 'logo.png'}: skipped, not a page (.png)",
        f"rag-chunk: {root / 'pipe.md'}: skipped, not a regular file",
    ]
    quiet, lines = run(runner, "--quiet", root)  # --quiet: only the page left out unasked
    assert quiet.stdout_bytes == result.stdout_bytes
    assert lines == [f"rag-chunk: {root / 'gone.md'}: skipped, a symlink to nothing ({tmp_path / 'removed.md'})"]


def test_a_file_symlinked_out_of_the_tree_is_not_read(runner, tmp_path: Path) -> None:
    """Issue 32, D6: a page that links to a file outside the folder walked is named and left out (it
    would be indexed, then served over HTTP and MCP); one that links within the tree is read."""
    root = tmp_path / "h"
    root.mkdir()
    (root / "a.md").write_text("# A\n\nAlpha.\n")
    (tmp_path / "secret.txt").write_text("# Keys\n\nThe signing key is hunter2.\n")
    (root / "key.md").symlink_to(tmp_path / "secret.txt")
    (root / "alias.md").symlink_to(root / "a.md")
    result, lines = run(runner, "--quiet", root)
    assert result.exit_code == 0, result.stderr
    assert [r["doc"] for r in parse(result.stdout_bytes)] == ["a", "alias"]
    assert b"hunter2" not in result.stdout_bytes
    assert lines == [f"rag-chunk: {root / 'key.md'}: skipped, a symlink out of the tree ({tmp_path / 'secret.txt'})"]
    named, _ = run(runner, root / "key.md")  # named on the command line, it is what was asked for
    assert b"hunter2" in named.stdout_bytes


def test_exclude_leaves_a_folder_out_in_one_line_and_include_narrows(runner, tmp_path: Path) -> None:
    root = handbook(tmp_path / "h")
    result, lines = run(runner, "--exclude", "drafts/**", root)
    assert [r["doc"] for r in parse(result.stdout_bytes)] == ["a", "docs/b", "docs/c", "docs/on-call"]
    assert f"rag-chunk: {root / 'drafts'}: skipped, excluded (--exclude 'drafts/**')" in lines
    assert not any("d.md" in line for line in lines)  # the folder, not each file in it
    result, lines = run(runner, "--exclude", "*.mdx", "--exclude", "/a.md", root)
    assert [r["doc"] for r in parse(result.stdout_bytes)] == ["docs/b", "docs/on-call", "drafts/d"]
    assert f"rag-chunk: {root / 'docs' / 'c.mdx'}: skipped, excluded (--exclude '*.mdx')" in lines
    result, lines = run(runner, "--include", "docs/", "--exclude", "*.mdx", root)
    assert [r["doc"] for r in parse(result.stdout_bytes)] == ["docs/b", "docs/on-call"]
    assert f"rag-chunk: {root / 'a.md'}: skipped, not included (no --include matches it)" in lines


def test_list_prints_what_would_be_read_and_chunks_nothing(runner, tmp_path: Path) -> None:
    root = handbook(tmp_path / "h")
    (root / "docs" / "broken.md").write_text("# Broken\n\n```\nnever closed\n")  # chunking it would fail
    result, lines = run(runner, "--list", "--exclude", "drafts", root)
    assert result.exit_code == 0, result.stderr
    assert result.stdout.splitlines() == [
        str(root / p) for p in ("a.md", "docs/b.markdown", "docs/broken.md", "docs/c.mdx", "docs/on-call.html.md.erb")
    ]
    assert f"rag-chunk: {root / 'drafts'}: skipped, excluded (--exclude 'drafts')" in lines
    assert runner.invoke(main, ["--list"], input="# x\n").exit_code == 2


def test_the_notices_stop_at_a_bound_and_count_the_rest(runner, tmp_path: Path) -> None:
    root = tmp_path / "h"
    (root / "img").mkdir(parents=True)
    (root / "a.md").write_text("# A\n\nAlpha.\n")
    for n in range(rag_chunk.SKIPS_SHOWN + 5):
        (root / "img" / f"{n:02d}.png").write_bytes(b"x")
    result, lines = run(runner, "--exclude", "img/0[0-2].png", root)
    assert result.exit_code == 0
    assert len(lines) == rag_chunk.SKIPS_SHOWN + 1
    assert lines[-1] == "rag-chunk: and 5 more skipped (5 not a page)"


def test_a_folder_with_no_page_is_one_line_naming_what_it_passed_over(runner, tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("x")
    (tmp_path / "todo.txt").write_text("y")
    result, lines = run(runner, tmp_path)
    assert (result.exit_code, result.stdout) == (1, "")
    assert lines == [
        f"rag-chunk: {tmp_path}: no pages (*.md, *.markdown, *.mdx, *.md.erb) in this directory; "
        "skipped notes.txt: not a page (.txt); todo.txt: not a page (.txt)"
    ]


@pytest.mark.parametrize(
    ("pattern", "path", "folder", "expected"),
    [
        ("drafts/**", "drafts/2024/plan.md", False, True),
        ("drafts/**", "docs/drafts/plan.md", False, False),  # anchored: it holds a `/`
        ("**/drafts/**", "docs/drafts/plan.md", False, True),
        ("drafts", "docs/drafts/plan.md", False, True),  # a name at any depth, and what its folder holds
        ("drafts/", "drafts", False, False),  # folders only
        ("drafts/", "drafts", True, True),
        ("*.md", "a/b/c.md", False, True),
        ("/*.md", "a/c.md", False, False),
        ("a/**/b.md", "a/b.md", False, True),
        ("a/**/b.md", "a/x/y/b.md", False, True),
        ("{wip,draft}-*", "notes/wip-1.md", False, True),
        ("[!a]*.md", "a.md", False, False),
        ("[!a]*.md", "b.md", False, True),
        ("\\*.md", "*.md", False, True),
        ("\\*.md", "x.md", False, False),
        ("doc?.md", "docs.md", False, True),
        ("doc?.md", "doc/.md", False, False),
    ],
)
def test_globs_read_as_gitignore_lines(pattern: str, path: str, folder: bool, expected: bool) -> None:
    assert Glob(pattern).matches(path, folder) is expected


def test_a_glob_covers_a_folder_only_when_it_takes_all_it_holds() -> None:
    assert Glob("drafts/**").covers("drafts") and Glob("drafts").covers("docs/drafts")
    assert not Glob("drafts/*.md").covers("drafts")


@pytest.mark.parametrize(
    ("pattern", "path"),
    [
        ("a*a*a*a*a*b", "a" * 200),  # 12.6 s with the `re` translation (issue 40, item 11)
        ("**/" * 8 + "x.md", "/".join(["d"] * 24) + "/y.md"),  # 31.8 s for one file
        ("{a,*}{a,*}{a,*}{a,*}{a,*}b", "a" * 200),
    ],
)
def test_a_glob_reads_a_path_in_steps_linear_in_its_length(pattern: str, path: str) -> None:
    glob = Glob(pattern)
    states = len(glob._auto.reads)
    assert not glob.matches(path)
    assert glob.steps(path) <= 2 * (len(path) + 1) * states
    # and twice the path costs twice the steps, not four times
    assert glob.steps(path * 2) < 3 * glob.steps(path)


def test_runs_of_double_stars_are_one() -> None:
    assert len(Glob("**/" * 8 + "x.md")._auto.reads) == len(Glob("**/x.md")._auto.reads)
    assert Glob("**/" * 8 + "x.md").matches("/".join(["d"] * 24) + "/x.md")
    assert Glob("a/**/**/b").matches("a/b") and Glob("a/**/**/b").matches("a/x/y/b")


def test_a_bad_pattern_is_one_line_naming_the_stage(runner, tmp_path: Path) -> None:
    root = handbook(tmp_path / "h")
    result, lines = run(runner, "--exclude", "[z-a].md", root)
    assert result.exit_code == 2, result.output
    assert lines == ["rag-chunk: --exclude '[z-a].md': the range z-a is out of order"]
    assert result.stdout == ""


def test_a_name_with_a_control_character_is_skipped_and_shown_escaped(runner, tmp_path: Path) -> None:
    """`dir\\nnl/p.md` stopped the whole build in rag-index, and `x\\x1b[2J.md` cleared the screen
    in rag-chunk's notices (issue 40, item 9)."""
    root = tmp_path / "h"
    (root / "dir\nnl").mkdir(parents=True)
    (root / "dir\nnl" / "p.md").write_text("# P\n\nText.\n")
    (root / "x\x1b[2J.md").write_text("# X\n\nText.\n")
    (root / "ok.md").write_text("# Ok\n\nText.\n")
    result, lines = run(runner, root)
    assert result.exit_code == 0, result.stderr
    assert [r["doc"] for r in parse(result.stdout_bytes)] == ["ok"]
    assert sorted(lines) == [
        f"rag-chunk: {root}/dir\\nnl/p.md: skipped, its name holds a control character",
        f"rag-chunk: {root}/x\\x1b[2J.md: skipped, its name holds a control character",
    ]
    assert "\x1b" not in result.stderr
    result, _ = run(runner, "--quiet", "--list", root)  # said even with --quiet; --list has only ok.md
    assert result.stdout == f"{root}/ok.md\n" and result.stderr.count("control character") == 2
    assert ragline.records.printable("a\x1bb\x7fé") == "a\\x1bb\\x7fé"
