"""The documentation a newcomer meets: a short README, links that resolve, recipes whose description reads whole.

The README is for a newcomer (at most README_LINES lines); the reference lives in docs/. Every
relative link of README.md and docs/*.md names a file that exists and, with `#anchor`, a heading
of that file (GitHub's anchors). `just --list` shows a recipe's [doc] attribute or, without one,
only the last line of the comment above it: so a recipe's comment is one line, or it has a [doc].
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from corpora import ROOT

README_LINES = 250
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"!?\[(?:[^\]\\]|\\.)*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
FENCE = re.compile(r"^(```|~~~).*?^\1[ \t]*$", re.S | re.M)
CODE = re.compile(r"(`+).+?\1", re.S)


def prose(text: str) -> str:
    """The text without code: fenced blocks and inline code spans, where a bracket is not a link."""
    return CODE.sub("", FENCE.sub("", text))


def anchor(heading: str) -> str:
    """GitHub's anchor for a heading: markup and punctuation dropped, lower case, spaces to hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link keeps its text
    text = re.sub(r"[`*]|<[^>]+>", "", text).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every heading's anchor in a markdown file; a repeated one gets -1, -2, as on GitHub."""
    seen: dict[str, int] = {}
    out = set()
    for line in FENCE.sub("", path.read_text(encoding="utf-8")).splitlines():
        heading = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if heading:
            base = anchor(heading.group(1))
            out.add(base if base not in seen else f"{base}-{seen[base]}")
            seen[base] = seen.get(base, 0) + 1
    return out


def links(path: Path) -> list[str]:
    return LINK.findall(prose(path.read_text(encoding="utf-8")))


def test_the_readme_is_short():
    lines = (ROOT / "README.md").read_text(encoding="utf-8").count("\n")
    assert lines <= README_LINES, f"README.md has {lines} lines: the reference belongs in docs/"


def test_the_readme_links_every_page_of_docs():
    linked = {(ROOT / target.partition("#")[0]).resolve() for target in links(ROOT / "README.md")}
    assert [p.name for p in PAGES[1:] if p.resolve() not in linked] == []


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page):
    broken = []
    for target in links(page):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto: and the like: not checked offline
            continue
        file, _, fragment = target.partition("#")
        dest = (page.parent / file).resolve() if file else page
        if not dest.exists():
            broken.append(f"{target}: no such file")
        elif fragment and dest.suffix == ".md" and fragment not in anchors(dest):
            broken.append(f"{target}: no heading with that anchor in {dest.relative_to(ROOT)}")
    assert broken == []


def test_the_link_check_sees_a_broken_link_and_a_broken_anchor(tmp_path):
    (tmp_path / "a.md").write_text("# A page\n\n## `dense_weight`, fitted: one\n\n[ok](#dense_weight-fitted-one) `[code](nope.md)`\n")
    assert anchors(tmp_path / "a.md") == {"a-page", "dense_weight-fitted-one"}
    assert links(tmp_path / "a.md") == ["#dense_weight-fitted-one"]
    assert LINK.findall("[x](docs/nope.md#there) ![pic](../results/p.png)") == ["docs/nope.md#there", "../results/p.png"]


def recipes(justfile: str) -> dict[str, list[str]]:
    """Each recipe's name -> the comment and attribute lines right above it."""
    out: dict[str, list[str]] = {}
    above: list[str] = []
    for line in justfile.splitlines():
        if line.startswith(("#", "[")):
            above.append(line)
            continue
        header = re.match(r"^@?([A-Za-z_][\w-]*)(?![\w-])(?!\s*:=)", line)
        if header and not line.startswith(("set ", "export ", "alias ")):
            out[header.group(1)] = above
        above = []
    return out


def test_each_recipe_has_one_line_of_description():
    """A comment of several lines shows only its last line in `just --list` (a sentence's tail)."""
    found = recipes((ROOT / "justfile").read_text(encoding="utf-8"))
    assert {"test", "eval-corpus", "tables-check", "_run"} <= set(found)
    bad = []
    for name, lines in found.items():
        if name.startswith("_") or any(line.startswith("[private") for line in lines):
            continue
        if not any(line.startswith("[doc(") for line in lines) and len([x for x in lines if x.startswith("#")]) != 1:
            bad.append(name)
    assert bad == [], "give these a one-line comment or a [doc] attribute"


@pytest.mark.skipif(shutil.which("just") is None, reason="just is not installed (pip install -e '.[just]')")
def test_just_list_shows_each_description_whole():
    dump = subprocess.run(["just", "--dump", "--dump-format", "json"], cwd=ROOT, capture_output=True, text=True, check=True)
    found = recipes((ROOT / "justfile").read_text(encoding="utf-8"))
    listed = json.loads(dump.stdout)["recipes"]
    assert set(found) == set(listed)
    for name, recipe in listed.items():
        if recipe["private"]:
            continue
        comment = [line.lstrip("# ") for line in found[name] if line.startswith("#")]
        assert recipe["doc"], f"{name}: no description in `just --list`"
        if not any(line.startswith("[doc(") for line in found[name]):
            assert [recipe["doc"]] == comment, name


def test_design_names_every_module_of_the_package():
    """docs/design.md's house and ragline/__init__.py's docstring name each module of ragline/, so a
    module added (or renamed) without a word there fails here."""
    import ast

    import ragline

    package = Path(ragline.__file__).parent
    design = (ROOT / "docs" / "design.md").read_text(encoding="utf-8")
    listed = ast.get_docstring(ast.parse((package / "__init__.py").read_text(encoding="utf-8"))) or ""
    for path in sorted(package.rglob("*.py")):
        if path.name == "__init__.py":
            continue
        name = path.stem
        assert f"`{name}`" in design or f"`ragline.{name}`" in design, f"docs/design.md does not name {path.relative_to(package)}"
        if path.parent == package:
            assert f"`{name}`" in listed, f"ragline/__init__.py's docstring does not name {name}"
