"""The citation check against a real model's replies, replayed offline.

tests/fixtures/llm/gemma-3-270m.jsonl holds, for the first golden question of each kind, the
context blocks rag-answer sent and the raw reply of Gemma 3 270M (the base model, Q4_K_M) served
by llama-cpp-python's OpenAI-compatible server, as `just llm-eval --record FILE` recorded them;
qwen2.5-coder-0.5b.jsonl the same for the local model, instruction-tuned (the per-reply tests run
on both; those that count what a base model's replies hold, on Gemma's).
The tests assert on structure (what the check kept, what it dropped and why, the answer
records), never on the model's words.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import rag_answer
import ragline.text
from ragline.answer import openai_chat, refusal
from ragline.answer.citations import CITATION, SUPPORT, Source, check_citations, stated

FIXTURES = Path(__file__).parent / "fixtures" / "llm"
ROWS = [json.loads(line) for line in (FIXTURES / "gemma-3-270m.jsonl").read_text().splitlines()]
# The local model's replies (Qwen2.5-Coder-0.5B-Instruct behind the same server, ChatML), recorded by
# `just llm-eval --record`: an instruction-tuned model's, for the tests that hold for any reply.
QWEN = [json.loads(line) for line in (FIXTURES / "qwen2.5-coder-0.5b.jsonl").read_text().splitlines()]
EVERY = ROWS + QWEN
EVERY_IDS = [f"gemma-{row['id']}" for row in ROWS] + [f"qwen-{row['id']}" for row in QWEN]


def sources(row: dict) -> list[Source]:
    return [Source(b["text"], tuple(b["headings"])) for b in row["blocks"]]


def checked(row: dict):
    return check_citations(row["raw"], sources(row), openai_chat.OpenAIChat("http://127.0.0.1:9/v1").frame(row["question"]), written=True)


def heading_lines(row: dict) -> set[str]:
    """The block heading lines of the prompt, as the model was shown them: `[n] A > B`."""
    return {f"[{b['n']}] {' > '.join(b['headings'])}" for b in row["blocks"]}


@pytest.mark.parametrize("rows", [ROWS, QWEN], ids=["gemma", "qwen"])
def test_the_recording_is_of_real_replies_to_every_question(rows: list[dict]) -> None:
    assert len(rows) >= 4 and all(row["raw"].strip() and row["blocks"] for row in rows)
    assert len({row["id"] for row in rows}) == len(rows)


# the replies of which the check keeps a sentence (all five of Gemma 3 270M's, three of Qwen's): the rows the next tests read
KEEPING = [(row, name) for row, name in zip(EVERY, EVERY_IDS, strict=True) if checked(row).kept]


def test_the_check_keeps_sentences_of_some_recorded_replies() -> None:
    """The test after this one has sentences to read: were the recording one whose every sentence is dropped,
    it would assert nothing."""
    assert len(KEEPING) >= 2, [name for _, name in KEEPING]


@pytest.mark.parametrize("row", [row for row, _ in KEEPING], ids=[name for _, name in KEEPING])
def test_every_sentence_kept_is_supported_by_the_blocks_it_cites(row: dict) -> None:
    """What the check keeps of a reply cites blocks that were sent and holds their facts and half
    their terms."""
    kept = checked(row).kept
    assert kept
    for sentence in kept:
        cited = {int(n) for n in CITATION.findall(sentence)}
        assert cited and all(1 <= n <= len(row["blocks"]) for n in cited), sentence
        held = set().union(*(sources(row)[n - 1].terms() for n in cited))
        body = CITATION.sub(" ", sentence)
        assert set(stated(body)) <= held, sentence
        terms = set(ragline.text.tokenize(body))
        assert len(terms & held) >= SUPPORT * len(terms) > 0, sentence
        assert body.strip() not in {line.split("] ", 1)[1] for line in heading_lines(row)}, sentence


def test_the_heading_lines_the_model_echoed_are_dropped_as_such() -> None:
    echoed = [(row, line.strip()) for row in ROWS for line in row["raw"].split("\n") if line.strip() in heading_lines(row)]
    assert echoed, "the recorded replies echo no heading line: record again or drop this test"
    for row, line in echoed:
        result = checked(row)
        assert line not in result.kept and (line, "repeats a heading path") in result.dropped


def test_the_check_keeps_less_than_a_valid_marker_alone_would() -> None:
    """The old check kept every sentence carrying a marker of a block that was sent; on these
    real replies that would have let through sentences this check drops."""
    from ragline.answer.citations import split_sentences

    marked = sum(
        any(1 <= int(n) <= len(row["blocks"]) for n in CITATION.findall(sentence))
        for row in ROWS
        for sentence in split_sentences(row["raw"])
    )
    frame = openai_chat.OpenAIChat("http://127.0.0.1:9/v1").frame
    kept = sum(len(check_citations(row["raw"], sources(row), frame(row["question"])).kept) for row in ROWS)  # no attribution
    assert marked > kept


def test_the_model_cites_what_the_blocks_do_not_support_and_the_check_drops_it() -> None:
    """The old check kept every sentence with a marker of a block that was sent; on these replies
    the support check drops some of those, for a reason other than the marker."""
    reasons = [why for row in ROWS for _, why in checked(row).dropped if why not in ("cites nothing", "cites no block that was sent")]
    assert reasons
    kinds = {"repeats a heading path", "repeats the prompt", "a heading, not a sentence"}
    assert all(why in kinds or why.startswith(("states ", "the cited block holds ", "a fragment of ")) for why in reasons)


@pytest.mark.parametrize("row", EVERY, ids=EVERY_IDS)
def test_the_answer_record_follows_the_check(row: dict) -> None:
    class Replay(openai_chat.OpenAIChat):
        """The OpenAI generator, its reply the recorded one."""

        def generate(self, question, blocks):
            return row["raw"]

    hits = [{"chunk_id": b["chunk_id"], "headings": b["headings"], "text": b["text"]} for b in row["blocks"]]
    out = rag_answer.answer({"question": row["question"], "hits": hits, "confidence": 1.0}, Replay("http://127.0.0.1:9/v1"), 0.0, len(hits))
    result = checked(row)
    if row["raw"].strip() == refusal.REFUSAL:  # the refusal sentence is a refusal, not a sentence to check
        assert out["refused"] and out["dropped"] == 0
        return
    assert out["dropped"] == len(result.dropped)
    if result.kept:
        assert not out["refused"] and out["answer"] == rag_answer.renumber("\n".join(result.kept), result.cited)
        assert [c["rank"] for c in out["citations"]] == result.cited and [c["n"] for c in out["citations"]] == list(
            range(1, len(result.cited) + 1)
        )
    else:
        assert out["refused"] and out["reason"] == "no sentence survived the citation check" and out["citations"] == []
