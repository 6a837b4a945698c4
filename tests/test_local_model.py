"""The local reader on the real model: llama.cpp in process (marked `local`; `just llm-model` fetches
the model and installs llama-cpp-python, CI does both before `just test`).

What is asserted is the machinery, not the model's wisdom: the judge's batches give what judging
each piece alone gives, the same prompt gives the same output, the bounds hold, a damaged file is
one line, and the reader's records are whole; one plain case each checks that the judge prefers
the piece that states the answer."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from corpora import build_index
from stagecli import run, stage_env

from ragline import local_models, options
from ragline.records import StageError

pytestmark = pytest.mark.local
MODEL = options.default("local_model", "answer")

llama_cpp = pytest.importorskip("llama_cpp", reason="the local reader's tests need llama-cpp-python: run 'just llm-model'")
try:
    PATH, SHA = local_models.model_file(MODEL)
except StageError as err:  # pragma: no cover - depends on the machine
    pytest.skip(f"the local model is not in the model cache ({err}): run 'just llm-model'", allow_module_level=True)

from ragline.answer.local import METHODS, SEQUENCES, Judge, LocalModel, runs_here  # noqa: E402


@pytest.fixture(scope="module")
def model() -> LocalModel:
    if why := runs_here(PATH):  # a build that dies in llama.cpp fails these tests, not the whole run
        pytest.fail(why)
    return LocalModel(PATH, threads=0, context=4096, sha256=SHA, name=MODEL)


def test_the_judge_prefers_the_piece_that_states_the_answer(model):
    judge = Judge(model)
    p = judge.scores(
        "When does the nightly settlement sweep run?",
        [
            (["Settlement", "The nightly sweep"], "The sweep runs once a day at 23:40 IST."),
            (["Refunds"], "Refunds take five business days."),
        ],
    )
    assert 0.0 <= min(p) <= max(p) <= 1.0
    assert p[0] > p[1]


@pytest.mark.parametrize("method", METHODS)
def test_batches_give_what_each_piece_alone_gives(model, method):
    judge = Judge(model, method)
    pieces = [(["Guide", f"Part {i}"], f"Rule {i}: keep changes small, at most {i * 10} lines.") for i in range(SEQUENCES + 3)]
    together = judge.scores("How large may a change be?", pieces)  # two batches: SEQUENCES - 1 pieces, then the rest
    alone = [judge.scores("How large may a change be?", [piece])[0] for piece in pieces[:3] + pieces[-2:]]
    assert len(together) == len(pieces)
    # llama.cpp picks its matrix kernels by the rows in a batch (one path quantises the activations), which
    # moves P(yes) by a few hundredths (0.025 seen); a piece that saw another sequence's tokens would move far more
    assert together[:3] + together[-2:] == pytest.approx(alone, abs=0.05)
    assert judge.scores("How large may a change be?", pieces) == together  # the same prompt, the same numbers


def test_generation_is_greedy_bounded_and_stops(model):
    prompt = model.chat([("system", "You answer briefly."), ("user", "Count from one to twenty, in words, separated by commas.")])
    first = model.generate(prompt, 12)
    assert first == model.generate(prompt, 12)  # greedy: the same text every time
    assert len(model.tokenize(first, special=False)) <= 13  # at most 12 tokens (a piece may split when retokenised)
    stopped = model.generate(prompt, 40, stop=[","])
    assert "," not in stopped and stopped.strip()
    with pytest.raises(TimeoutError):
        model.generate(prompt, 40, deadline=0.0)


def test_the_reader_answers_and_records_its_model(tmp_path):
    index = build_index(tmp_path)
    for mode in ("judge", "span", "write"):
        result = run(
            "rag-answer",
            "--index",
            str(index),
            "--reader",
            mode,
            "--threshold",
            "0",
            "--json",
            "When does the sweep run?",
            env=stage_env(RAG_MODEL_HOME=str(PATH.parent.parent)),
            timeout=600,
        )
        assert result.returncode == 0, result.stderr.decode()
        record = json.loads(result.stdout)
        gen = record["generator"]
        assert (gen["name"], gen["reader"], gen["local_model"], gen["local_model_sha256"]) == (mode, mode, MODEL, SHA)
        assert record["schema"] == "answer/1" and isinstance(record["dropped_sentences"], list)
        if not record["refused"]:
            assert record["citations"] and all(1 <= c["rank"] <= 5 for c in record["citations"])


def test_a_damaged_model_file_is_one_line(tmp_path):
    broken = tmp_path / "broken.gguf"
    with open(PATH, "rb") as source, open(broken, "wb") as out:
        out.write(source.read(1 << 20))  # the header and a little: the tensors are missing
    index = build_index(tmp_path)
    result = run(
        "rag-answer", "--index", str(index), "--reader", "judge", "--local-model", str(broken), "--json", "When does the sweep run?"
    )
    err = result.stderr.decode()
    assert result.returncode == 1 and result.stdout == b""
    assert err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith("rag-answer: ") and "cannot load" in err


def test_a_copy_of_the_model_elsewhere_runs_as_the_users_own(tmp_path):
    copy = tmp_path / "mine.gguf"
    shutil.copy(PATH, copy)
    path, sha = local_models.model_file(str(copy))
    assert (path, sha) == (Path(copy), None)  # a path is the user's file: loaded, not vouched for


def test_rag_expand_writes_questions_with_the_real_model_and_a_rerun_reads_the_cache(tmp_path):
    """rag-expand as a process on the real model: each chunk gets questions (strings ending in "?"),
    and a rerun gives the same bytes from the cache, writing none afresh (no notice on stderr)."""
    chunks = b"".join(
        json.dumps(c).encode() + b"\n"
        for c in (
            {
                "id": "payouts#timing",
                "text": "## Timing\n\nPayouts reach the bank two working days after settlement.",
                "headings": ["Payouts", "Timing"],
            },
            {
                "id": "charges#void",
                "text": "## Voiding\n\nA charge that is not captured can be voided; no money moves.",
                "headings": ["Charges", "Voiding"],
            },
        )
    )
    env = stage_env(RAG_MODEL_HOME=str(PATH.parent.parent), RAG_EXPAND_CACHE=str(tmp_path / "q.sqlite"))
    first = run("rag-expand", "--questions", "3", stdin=chunks, env=env, timeout=600)
    assert first.returncode == 0, first.stderr
    records = [json.loads(line) for line in first.stdout.splitlines()]
    assert [r["id"] for r in records] == ["payouts#timing", "charges#void"]
    assert all(r["questions"] and all(q.endswith("?") for q in r["questions"]) and len(r["questions"]) <= 3 for r in records)
    assert records[0]["expand"]["model"] == MODEL and records[0]["expand"]["model_sha256"] == SHA
    assert b"wrote the questions of 2 of 2 chunks" in first.stderr
    again = run("rag-expand", "--questions", "3", stdin=chunks, env=env, timeout=600)
    assert again.returncode == 0 and again.stdout == first.stdout and again.stderr == b""
