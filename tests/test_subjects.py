"""scripts/subjects.py, `just check`'s rule that a commit subject fits `git log --oneline` (72 characters)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from corpora import ROOT

sys.path.insert(0, str(ROOT / "scripts"))

import subjects


def test_a_subject_of_72_characters_fits_and_73_do_not():
    lines = ["aaaaaaa " + "x" * 72, "bbbbbbb " + "y" * 73, "ccccccc " + "é" * 72, "ddddddd"]
    assert subjects.too_long(lines) == [("bbbbbbb", "y" * 73)]  # characters, not bytes: 72 é are 144 bytes


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_the_check_fails_on_a_range_holding_a_long_subject(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    def commit(subject: str) -> str:
        git = ["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@example.invalid"]
        subprocess.run([*git, "commit", "--quiet", "--allow-empty", "-m", subject, "-m", "A body of any length. " * 9], check=True)
        return subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()

    subprocess.run(["git", "init", "--quiet", str(tmp_path)], check=True)
    start = commit("The first commit, before the rule")
    long = commit("A subject that says everything it did and why, and so runs past the column git log --oneline gives")
    assert subjects.main([f"{start}..HEAD"], repo=tmp_path) == 1
    assert f"subjects: {long}: 98 characters, over 72" in capsys.readouterr().err
    short = commit("Fix the subject rule's edge")
    assert subjects.main([f"{long}..HEAD"], repo=tmp_path) == 0  # the long one is before the range, the body never counts
    assert subjects.main([f"{short}..HEAD"], repo=tmp_path) == 0  # an empty range passes
    assert subjects.main(["no-such-commit..HEAD"], repo=tmp_path) == 2
    assert "cannot read no-such-commit..HEAD" in capsys.readouterr().err


def test_just_check_runs_it():
    justfile = (ROOT / "justfile").read_text(encoding="utf-8")
    check = justfile.split("\ncheck:", 1)[1].split("\n\n", 1)[0]
    assert "python3 scripts/subjects.py\n" in check + "\n"
