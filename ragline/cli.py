"""cli: the command-line parts the stages share, so that no stage is a library of another's CLI.

rag-search, rag-answer and rag-serve take the retrieval options (`search_options`, which hands
the command one `SearchArgs`); rag-answer and rag-serve the answer options (`answer_options`,
one `AnswerArgs`); rag-search and rag-answer the two views (`view_options`) and the questions
of the command line (`question_records`); rag-answer and rag-serve refuse options typed where
they mean nothing (`given_on_command_line`); rag-search and rag-answer say on stderr when the
index's pages have moved since it was built (`note_stale`, the line `rag_index.stale_notice` makes). The options themselves are `ragline.options`'
declarations. A stage imports these and an upstream stage's core, never another stage's
command-line helpers (docs/design.md).
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, fields, replace
from typing import Any

import click

import ragline.records
from ragline import options, terminal
from ragline.answer.reader import from_legacy
from ragline.options import Config
from ragline.records import ANSWER_FEATURES, StageError

MAX_QUESTION = options.MAX_QUESTION  # characters of a question read from the command line or stdin; the rest is cut, with a notice


def _searching(name: str) -> Any:
    return options.default(name, "search")


# --------------------------------------------------------------------------- rag-search's options: rag-search, rag-answer, rag-serve


@dataclass(frozen=True)
class SearchArgs:
    """The retrieval options as given on the command line (see `search_options`): the index, the
    query model and the threads, and the retrieval configuration they ask for as one `Config`
    (not its fields a second time); tests/test_options.py holds these fields and Config's to
    `options.declared_for(SEARCHING)`."""

    index_path: str
    model: str | None = None
    threads: int = _searching("threads")
    retrieval: Config = field(default_factory=Config)

    def config(self, at_least: int = 1) -> Config:
        """The Config these options ask for, with k and the candidate lists at least `at_least` long."""
        k = max(self.retrieval.k, at_least)
        config = replace(self.retrieval, k=k, candidates=max(self.retrieval.candidates, k))
        try:
            config.check()
        except ValueError as err:
            raise click.UsageError(str(err)) from None
        return config

    def overriding(self, overrides: dict[str, Any]) -> SearchArgs:
        """These options with some of the retrieval configuration's fields replaced (rag-serve's requests)."""
        return replace(self, retrieval=replace(self.retrieval, **overrides))


def search_options(f: Any) -> Any:
    """The retrieval options (`ragline.options.declared_for(options.SEARCHING)`) of rag-search, rag-answer
    (which runs the search itself) and rag-serve. The decorated command receives them as
    one `search: SearchArgs` argument."""

    @functools.wraps(f)
    def command(*args: Any, **kwargs: Any) -> Any:
        given = {o.parameter: kwargs.pop(o.parameter) for o in options.declared_for(options.SEARCHING)}
        retrieval = Config(**{c.name: given.pop(c.name) for c in fields(Config)})
        return f(*args, search=SearchArgs(**given, retrieval=retrieval), **kwargs)

    return options.decorate(options.declared_for(options.SEARCHING))(command)


def view_options(f: Any) -> Any:
    """--json and --text, rag-search's and rag-answer's: the decorated command receives `human`, whether to
    write the readable view (a terminal's, or --text to any stdout) rather than JSON Lines."""

    @click.option("--json", "as_json", is_flag=True, help="JSON Lines even on a terminal.")
    @click.option("--text", "as_text", is_flag=True, help="The readable view even when piped (jq's -r): what a terminal shows.")
    @functools.wraps(f)
    def command(*args: Any, as_json: bool, as_text: bool, **kwargs: Any) -> Any:
        if as_json and as_text:
            raise click.UsageError("--json and --text ask for two views: give one")
        return f(*args, human=as_text or (sys.stdout.isatty() and not as_json), **kwargs)

    return command


def question_records(
    questions: tuple[str, ...], queries: str | None, usage: str, raw: bool, stage: str
) -> Iterator[tuple[ragline.records.Line, dict[str, Any]]]:
    """Query records from the command line of `stage`: QUESTIONS as arguments become records q1, q2,
    ...; otherwise JSON Lines from --queries or stdin, or with `raw` one question a line
    (blank lines skipped). A record without an `id` gets its input line number. A question
    over MAX_QUESTION characters is cut to them, with a notice: a whole file pasted as a
    question costs seconds of BM25 and the model reads 256 tokens of it at most."""
    if questions and raw:
        raise click.UsageError("--raw-input reads questions from stdin or --queries: give them there or as arguments, not both")
    empty = next((n for n, q in enumerate(questions, 1) if not q.strip()), None)
    if empty is not None:
        raise click.UsageError(f"question {empty} is empty")
    if questions:
        source: Iterable[tuple[ragline.records.Line, dict[str, Any]]] = (
            (ragline.records.Line("<args>", n), {"id": f"q{n}", "question": q}) for n, q in enumerate(questions, 1)
        )
    elif raw:
        source = _raw_lines(queries, usage)
    else:
        source = ragline.records.read_records([queries or "-"], usage=usage)
    for where, record in source:
        if "id" not in record:
            record["id"] = str(where.number)
        question = record.get("question")
        if isinstance(question, str) and len(question) > MAX_QUESTION:
            ragline.records.note(f"{stage}: {where}: a question of {len(question):,} characters, cut to its first {MAX_QUESTION:,}")
            record["question"] = question[:MAX_QUESTION]
        yield where, record


def _raw_lines(path: str | None, usage: str) -> Iterator[tuple[ragline.records.Line, dict[str, Any]]]:
    """`--raw-input`: each non-blank line of the file or stdin is a question."""
    for name, stream in ragline.records.open_inputs([path or "-"], usage):
        for number, raw in enumerate(stream, 1):
            try:
                text = raw.decode("utf-8").removeprefix("\ufeff" if number == 1 else "").strip()
            except UnicodeDecodeError as bad:
                raise StageError(f"not UTF-8 (byte 0x{raw[bad.start]:02x} at column {bad.start + 1})", f"{name}:{number}") from None
            if text:
                yield ragline.records.Line(name, number), {"question": text}


def note_stale(stage: str, index_path: os.PathLike[str] | str, notice: str | None) -> None:
    """The stale notice on stderr, stage and index first (nothing when `notice` is None)."""
    if notice is not None:
        ragline.records.note(f"{stage}: {terminal.shown_path(str(index_path))}: {notice}")


def given_on_command_line(names: Iterable[str]) -> list[str]:
    """The options among `names` (parameter names) that were typed on the command line,
    as the user spelled them (--k, --rerank, ...); environment variables do not count."""
    ctx = click.get_current_context()
    given = []
    for param in ctx.command.params:
        if param.name in names and ctx.get_parameter_source(param.name) is click.core.ParameterSource.COMMANDLINE:
            off = getattr(param, "secondary_opts", None) and ctx.params.get(param.name) is False  # --no-sparse, not --sparse
            given.append(max(param.secondary_opts if off else param.opts, key=len))
    return given


# --------------------------------------------------------------------------- rag-answer's options: rag-answer, rag-serve


@dataclass(frozen=True)
class AnswerArgs:
    """rag-answer's options as given on the command line (`answer_options`), rag-serve's defaults:
    held equal to `options.declared_for(ANSWERING)` by tests/test_options.py."""

    reader: str = options.default("reader")
    local_model: str = options.default("local_model", "answer")
    local_threads: int = options.default("local_threads", "answer")
    local_context: int = options.default("local_context", "answer")
    off: tuple[str, ...] = ()
    threshold: float = options.default("threshold")
    size: int = options.default("context")

    def __post_init__(self) -> None:
        features_from(self.off)  # an unknown --off name is a usage error before anything loads

    @property
    def features(self) -> tuple[str, ...]:
        """The extractive features left on (`features_from`)."""
        return features_from(self.off)


def features_from(off: tuple[str, ...]) -> tuple[str, ...]:
    """The extractive features left on by --off and RAG_ANSWER_OFF; an unknown name is a usage error."""
    env_off = [f.strip() for f in os.environ.get(options.get("off").env or "", "").split(",") if f.strip()]
    bad = [f for f in (*off, *env_off) if f not in ANSWER_FEATURES]
    if bad:
        raise click.UsageError(f"unknown feature {bad[0]!r} (features: {', '.join(ANSWER_FEATURES)})")
    return tuple(f for f in ANSWER_FEATURES if f not in off and f not in env_off)


def answer_options(f: Any) -> Any:
    """The answer options (`options.declared_for(ANSWERING)`: --reader, the local model's, --off,
    --threshold, --context) of rag-answer and of rag-serve, whose defaults they are there. The decorated
    command receives them as one `answering: AnswerArgs` argument."""

    @functools.wraps(f)
    def command(*args: Any, **kwargs: Any) -> Any:
        given = {a.name: kwargs.pop(a.name) for a in fields(AnswerArgs)}
        llm, mode = kwargs.pop("legacy_llm"), kwargs.pop("legacy_local_mode")
        if llm is not None or mode is not None:  # --reader (or RAG_READER) wins over RAG_LLM; over --llm, only if they agree
            ctx, typed = click.get_current_context(), click.core.ParameterSource.COMMANDLINE
            named = from_legacy(llm, mode)
            if ctx.get_parameter_source("reader") in (None, click.core.ParameterSource.DEFAULT):
                given["reader"] = named
            elif given["reader"] != named and typed in (
                ctx.get_parameter_source("legacy_llm"),
                ctx.get_parameter_source("legacy_local_mode"),
            ):
                raise click.UsageError(f"--reader {given['reader']} and --llm/--local-mode (reader {named}) disagree: give --reader alone")
        return f(*args, answering=AnswerArgs(**given), **kwargs)

    legacy = [  # the flags before --reader, kept as aliases (hidden): --llm local --local-mode write is --reader write
        click.option("--llm", "legacy_llm", type=click.Choice(["extractive", "local", "openai"]), envvar="RAG_LLM", hidden=True),
        click.option("--local-mode", "legacy_local_mode", type=click.Choice(["judge", "write"]), envvar="RAG_LOCAL_MODE", hidden=True),
    ]
    decorated = options.decorate(options.declared_for(options.ANSWERING))(command)
    for option in legacy:
        decorated = option(decorated)
    return decorated
