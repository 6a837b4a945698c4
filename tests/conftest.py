"""Shared fixtures: a click runner, the tiny index, the real model when present.

The helpers the tests share live in tests/support/, which this puts on sys.path: `from corpora
import build_index`, `from jsonl import jsonl, parse`, `from stagecli import run`, `from properties
import examples`. No test module imports another test module (nor this one).
"""

from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent / "support"))

import pytest
from click.testing import CliRunner
from corpora import build_index, load_minilm
from hypothesis import settings
from properties import FAST

# No per-example deadline for hypothesis (its default is 200 ms): on a busy machine an example that waits
# for a core is not a failure, and hypothesis reports one that overruns once as flaky. The tests that set
# their own settings already said deadline=None. "fast" is the same with at most FAST examples a property
# test, for `just test-fast` (`pytest --hypothesis-profile=fast`, or PYTEST_ADDOPTS=--hypothesis-profile=fast);
# tests/support/properties.py says how a test's own count follows it.
settings.register_profile("ragline", deadline=None)
settings.register_profile("fast", settings.get_profile("ragline"), max_examples=FAST)
settings.load_profile("ragline")  # pytest's --hypothesis-profile, read after this file, loads another

# The suite's own per-user cache: rag-embed caches vectors there by default and rag-expand its questions,
# so a test run writes nothing into the user's ~/.cache. The model cache stays where it is (RAG_MODEL_HOME
# pinned to it first), so the real models are found as before.
from ragline import models  # noqa: E402

os.environ.setdefault("RAG_MODEL_HOME", str(models.model_home()))
os.environ["XDG_CACHE_HOME"] = tempfile.mkdtemp(prefix="ragline-tests-cache-")
atexit.register(shutil.rmtree, os.environ["XDG_CACHE_HOME"], True)

pytest_plugins = ["evalfixtures", "llmserver"]  # the rag-eval tests' fixtures (golden_path, golden, results); llm_server


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner()


@pytest.fixture(scope="session", params=["fp32", "int8", "qint8"])
def minilm(request):
    """The real all-MiniLM-L6-v2 embedder on the derived float32 file (the default), on the shipped
    int8 file, and on the int8-arithmetic file derived from the float32 one: the model tests hold for all three."""
    return load_minilm(request.param)


@pytest.fixture
def tiny_index(tmp_path: Path) -> Path:
    return build_index(tmp_path)
