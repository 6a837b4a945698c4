"""The README's first command installs only what the main job needs: its size, measured on the installed packages."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest
from corpora import ROOT
from packaging.requirements import Requirement

LIGHT_LIMIT_MB = 300  # the bound for the first command's venv
PIP_MB = 20  # pip itself, which every venv holds (not a dependency of ragline, so not in the closure)


def first_command() -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    block = re.search(r"```sh\n(.*?)```", text, re.S)
    assert block, "the README starts with a sh block"
    return block.group(1).splitlines()[0]


def closure(name: str, extras: set[str]) -> dict[str, metadata.Distribution]:
    """The installed distributions `pip install name[extras]` brings in, by normalised name."""
    found: dict[str, metadata.Distribution] = {}
    todo = [(name, extras)]
    while todo:
        current, wanted = todo.pop()
        dist = metadata.distribution(current)
        key = dist.metadata["Name"].lower().replace("_", "-")
        if key in found and not wanted:
            continue
        found[key] = dist
        for raw in dist.requires or []:
            req = Requirement(raw)
            if req.marker is None or any(req.marker.evaluate({"extra": e}) for e in (wanted or {""})):
                if req.name.lower().replace("_", "-") == key:  # an extra naming the package's own other extras
                    todo.append((current, set(req.extras)))
                else:
                    todo.append((req.name, set(req.extras)))
    return found


def installed_mb(dist: metadata.Distribution) -> float:
    return sum(f.locate().stat().st_size for f in dist.files or [] if f.locate().is_file()) / 2**20


def test_the_first_command_installs_the_light_extra_only():
    command = first_command()
    match = re.search(r"pip install (?:--\S+ )*-e '\.\[([\w,]+)\]'", command)
    assert match, command
    extras = set(match.group(1).split(","))
    packages = closure("ragline", extras)
    assert "just demo" in command
    for heavy in ("numba", "scipy", "pandas", "matplotlib", "ranx", "pytest"):
        assert heavy not in packages, f"the first command installs {heavy}"
    size = sum(installed_mb(d) for d in packages.values()) + PIP_MB
    assert size < LIGHT_LIMIT_MB, {k: round(installed_mb(d)) for k, d in packages.items()}
    assert "rust-just" in packages  # the main job runs through just


def test_the_test_extra_holds_what_the_suite_imports():
    packages = closure("ragline", {"test"})
    for needed in ("pytest", "hypothesis", "ruff", "rust-just", "ranx"):
        assert needed in packages


def test_the_recipes_find_the_venv_from_a_plain_shell():
    """`.venv/bin/just test` in a new terminal (nothing activated) runs the venv's tools."""
    just = Path(sys.prefix) / "bin" / "just"
    env = {"HOME": os.environ.get("HOME", "/tmp"), "PATH": "/usr/bin:/bin"}
    result = subprocess.run(
        [str(just), "--justfile", str(ROOT / "justfile"), "--evaluate", "PATH"], env=env, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split(":")[0] == str(ROOT / ".venv" / "bin")


@pytest.mark.slow  # pip builds the wheel
def test_the_wheel_installs_the_stages_and_ragline_only(tmp_path):
    """The built wheel's top-level names: the seven rag_* stage modules and the ragline package,
    nothing that could collide with another distribution (no `progress`, no `ranking`)."""
    import shutil
    import zipfile

    source = tmp_path / "src"  # a copy, so the build leaves nothing in the checkout
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(".venv", ".git", ".cache", "build", "results", "*.egg-info", "__pycache__"))
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--quiet", "-w", str(tmp_path / "dist"), str(source)],
        capture_output=True,
        text=True,
        env={**os.environ, "PIP_NO_INDEX": "1"},
    )
    assert done.returncode == 0, done.stderr
    (wheel,) = (tmp_path / "dist").glob("ragline-*.whl")
    names = {n.split("/")[0].removesuffix(".py") for n in zipfile.ZipFile(wheel).namelist() if not n.split("/")[0].endswith(".dist-info")}
    assert names == {
        "rag_chunk",
        "rag_expand",
        "rag_embed",
        "rag_index",
        "rag_search",
        "rag_rerank",
        "rag_answer",
        "rag_eval",
        "rag_serve",
        "ragline",
    }
    packaged = {n for n in zipfile.ZipFile(wheel).namelist() if n.startswith("ragline/")}
    assert {"ragline/__init__.py", "ragline/eval/metrics.py", "ragline/answer/citations.py", "ragline/options.py"} <= packaged


def test_the_package_imports_no_stage():
    """ragline/ imports no `rag_*` stage, not even under TYPE_CHECKING; the console-script launcher
    (ragline/__init__.py) names its stages as strings, which is not an import."""
    import ast

    found = []
    for path in sorted((ROOT / "ragline").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            found += [f"{path.relative_to(ROOT)}:{node.lineno}: {n}" for n in names if n.split(".")[0].startswith("rag_")]
    assert found == []
