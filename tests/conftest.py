"""Shared fixtures: a click runner, records as bytes, the real model when present."""

from __future__ import annotations

import os
from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared" / "corpora" / "eng-practices" / "docs"


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner()


def jsonl(*records: dict) -> bytes:
    return b"".join(orjson.dumps(r) + b"\n" for r in records)


def parse(output: bytes | str) -> list[dict]:
    data = output.encode() if isinstance(output, str) else output
    return [orjson.loads(line) for line in data.splitlines() if line.strip()]


@pytest.fixture(scope="session")
def minilm():
    """The real all-MiniLM-L6-v2 embedder. Missing model: skip locally, fail in CI."""
    import rag_embed
    from ragline import StageError

    try:
        return rag_embed.load_embedder("all-MiniLM-L6-v2")
    except StageError as err:
        if os.environ.get("CI"):
            pytest.fail(f"the model must be present in CI ({err}); run 'just model'")
        pytest.skip(f"model not fetched ({err}); run 'just model'")
