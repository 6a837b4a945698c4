"""options: every option of the stages, declared once.

An `Option` says all there is to say about one option: its name, its flags, its type and
default, its range or choices, its environment variable, its help, the stages that take
it, whether rag-serve takes it per request, and whether answer records show it. From
OPTIONS come:

- each stage's click options (`Option.click`, `decorate`), with " Env: VAR." after the help
- the defaults of the retrieval configuration, `Config` (below), of `ragline.cli`'s `SearchArgs` (which holds one)
  and of rag-serve's request models (`ragline.api`: each field's range and help,
  `request_field`), and `check`, which holds a configuration built in code to the ranges the
  command line enforces. Those classes are written out, field by field, so that grep and mypy
  see them; tests/test_options.py holds each one equal to its declarations (names, order,
  types, defaults, ranges, choices). The choices of an option such a class holds are written
  once, as a Literal type here (`Rerank`, `Fusion`), which the class's field and the
  declaration both read
- the configuration keys rag-eval records and checks (`ragline.eval.runs.CONFIG_KEYS`, from
  `recorded`): each key's default, the flags that ask for a value (`Option.args`), the value
  an older record without it means (`absent`)
- the options table of the documentation (`markdown_table`), which `scripts/docs.py`
  renders into docs/options.md between `<!-- options:begin -->` and `<!-- options:end -->`
  (`just docs`; `just tables-check` fails when it is stale)

A stage's own switches that configure nothing (--json, --quiet, --raw-input, --explain,
--open, ...) stay plain click options in the stage.

Adding an option is one declaration here, its field in the classes that hold it, and the
code that uses it. A retrieval option that drops hits under a score, for instance:

    Option(
        "min_score", float, 0.0, "Drop the hits scoring under this.", env="RAG_MIN_SCORE",
        stages=SEARCHING, range=(0.0, 1.0), served="retrieval", recorded="retrieval", absent=0.0,
    ),

then `min_score: float = _searching("min_score")` in `Config` (which `ragline.cli.SearchArgs` holds),
`min_score: float = options.request_field("min_score")` in `ragline.api.Options`, and in
`rag_search.Searcher` the line that uses `self.config.min_score`. rag-search, rag-answer
and rag-serve then take `--min-score` (and RAG_MIN_SCORE) with its range, /search and
/answer take "min_score" with the same range, answer records show it under `retrieval`
(results written before it read as 0.0), `rag-eval plan` passes `--min-score` to
rag-search for a run that sets it in RUNS, and the docs table has its row; a field left
out of a class fails tests/test_options.py, naming it.

    >>> get("dense_weight").click_help()
    'The dense share of --fusion score. Env: RAG_DENSE_WEIGHT.'
    >>> get("passages", "embed").env, get("passages", "search").env
    ('RAG_EMBED_PASSAGES', 'RAG_USE_PASSAGES')
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Literal, get_args

from ragline.answer import reader
from ragline.records import ANSWER_FEATURES

PIPELINE = ("chunk", "expand", "embed", "index", "search", "rerank", "answer")  # the stages in pipeline order (rag-eval's flag columns)
STAGES = (*PIPELINE, "serve")
SEARCHING = ("search", "answer", "serve")  # rag-answer and rag-serve search with rag-search's options
ANSWERING = ("answer", "serve")  # rag-serve answers with rag-answer's options, its defaults
REQUIRED = object()  # an `absent` value: every answer record must show the key
MAX_QUESTION = 2_000  # characters of one question: rag-search cuts a longer one (with a notice), rag-serve refuses it (422)

# The choices of the options that a written-out class holds (`Config`, `ragline.api.Options`), as
# Literal types: mypy checks the classes' values against them, and the declarations below read their
# choices from them (`get_args`), so each list of choices is written once.
Rerank = Literal["lexical", "none"]
Fusion = Literal["rrf", "score"]


@dataclass(frozen=True)
class Option:
    """One option. `name` is its parameter (click's, `Config`'s field, the request field and the
    configuration key), unless `param` names the command's parameter otherwise; two
    declarations share a name only when no stage takes both. `flags` are click's (a switch is
    "--on/--off"); `type` the value's type (bool, int, float, str); `path` "dir" or "file" for a
    str that names one. `help` is one sentence or two; the click help adds " Env: VAR.", the
    request field reads `summary` where that is shorter. `served`: "retrieval" (every search
    and answer request) or "answer" (answer requests only), else rag-serve fixes it at start.
    `recorded`: the answer record's field that shows it ("retrieval" or "generator"), which
    makes it a configuration key of rag-eval, with `absent` the value of a record written
    before the key existed."""

    name: str
    type: type
    default: Any
    help: str
    flags: tuple[str, ...] = ()
    env: str | None = None
    stages: tuple[str, ...] = ()
    range: tuple[Any, Any] | None = None
    choices: tuple[str, ...] | Callable[[], tuple[str, ...]] | None = None  # a callable: read each time they are asked
    param: str | None = None
    path: str | None = None
    required: bool = False
    multiple: bool = False
    metavar: str | None = None
    show_default: bool = True
    summary: str | None = None
    served: str | None = None
    recorded: str | None = None
    absent: Any = REQUIRED

    def __post_init__(self) -> None:
        if not self.flags:  # --name, or --name/--no-name for a switch
            flag = "--" + self.name.replace("_", "-")
            object.__setattr__(self, "flags", (f"{flag}/--no-{flag[2:]}" if self.type is bool else flag,))

    @property
    def choice_names(self) -> tuple[str, ...] | None:
        """The choices as they are now (a callable's read at this moment)."""
        return self.choices() if callable(self.choices) else self.choices

    @property
    def parameter(self) -> str:
        """The name the command's function takes it under."""
        return self.param or self.name

    @property
    def flag(self) -> str:
        """The long flag (the "on" one of a switch)."""
        return self.flags[0].split("/")[0]

    def click_help(self) -> str:
        """The --help text: the help, then its variable (a list's is comma-separated and read by the stage)."""
        if self.env is None:
            return self.help
        return f"{self.help} Env: {self.env}{' (comma-separated)' if self.multiple else ''}."

    def click(self) -> Callable[[Any], Any]:
        """The click option decorator."""
        import click

        kind: Any = None
        if callable(self.choices):
            kind = _LiveChoice(self.choices)
        elif self.choices is not None:
            kind = click.Choice(self.choices)
        elif self.range is not None:
            kind = (click.IntRange if self.type is int else _NumberRange)(*self.range)
        elif self.path is not None:
            kind = click.Path(file_okay=self.path != "dir", dir_okay=self.path != "file")
        settings: dict[str, Any] = {"help": self.click_help()}
        if self.env is not None and not self.multiple:
            settings["envvar"] = self.env
        if self.required:
            settings["required"] = True
        elif self.multiple:
            settings["multiple"] = True
        else:
            settings["default"] = self.default
            if self.show_default and self.default is not None:
                settings["show_default"] = True
        if kind is not None:
            settings["type"] = kind
        if self.metavar is not None:
            settings["metavar"] = self.metavar
        return click.option(*self.flags, self.parameter, **settings)

    def args(self, value: Any) -> list[str]:
        """The command-line arguments that ask for `value` (`--no-sparse`, `--k 7`, `--dense-weight 0.5`)."""
        if self.type is bool:
            on, _, off = self.flags[0].partition("/")
            return [on if value else off]
        return [self.flag, f"{value:g}" if isinstance(value, float) else str(value)]

    def check(self, value: Any) -> str | None:
        """Why `value` is outside the declared choices or range, else None."""
        if (names := self.choice_names) is not None and value not in names:
            return f"{self.flag} must be one of {', '.join(names)}, got {value!r}"
        if self.range is not None and not self.range[0] <= value <= self.range[1]:
            low, high = self.range
            return f"{self.flag} must be between {low:g} and {high:g}, got {value:g}"
        return None


def _live_choice() -> type:
    import click

    class LiveChoice(click.Choice):
        """click's Choice over choices read each time they are asked (a registry's names)."""

        def __init__(self, source: Callable[[], tuple[str, ...]]):
            self.source = source
            super().__init__((), case_sensitive=True)

        @property
        def choices(self) -> tuple[str, ...]:
            return self.source()

        @choices.setter
        def choices(self, value: Any) -> None:  # click's __init__ sets them; the source wins
            pass

    return LiveChoice


def _LiveChoice(source: Callable[[], tuple[str, ...]]) -> Any:
    return _live_choice()(source)


def _NumberRange(low: float, high: float) -> Any:
    """click's FloatRange, refusing NaN too: every comparison with NaN is false, so FloatRange lets
    `--head-timeout nan` through (a server whose every body "did not arrive within nan s")."""
    import math

    import click

    class NumberRange(click.FloatRange):
        def convert(self, value: Any, param: Any, ctx: Any) -> Any:
            number = super().convert(value, param, ctx)
            if math.isnan(number):
                self.fail(f"{number} is not a number", param, ctx)
            return number

    return NumberRange(low, high)


# --------------------------------------------------------------------------- the declarations
#
# In each stage's --help order. The defaults that measurement chose say where they come from.

OPTIONS: tuple[Option, ...] = (
    # rag-chunk
    Option(
        "window",
        int,
        180,
        "The window: most words in a chunk (atomic blocks may exceed it).",
        flags=("--words",),
        env="RAG_CHUNK_WORDS",
        stages=("chunk",),
        range=(10, 100_000),
        recorded="retrieval",
    ),
    Option(
        "include",
        str,
        None,
        "Read only the pages of a walked folder that match this gitignore-style glob (repeatable).",
        stages=("chunk",),
        multiple=True,
        metavar="GLOB",
    ),
    Option(
        "exclude",
        str,
        None,
        "Leave out the files and folders of a walked folder that match this gitignore-style glob (repeatable; wins over --include).",
        stages=("chunk",),
        multiple=True,
        metavar="GLOB",
    ),
    # rag-embed
    Option(
        "model",
        str,
        "all-MiniLM-L6-v2",
        "Model name (all-MiniLM-L6-v2, bge-small-en-v1.5, hash) or a model folder.",
        flags=("--model", "-m"),
        env="RAG_MODEL",
        stages=("embed",),
        recorded="retrieval",
    ),
    Option(
        "embed_headings",
        bool,
        True,
        "Join the chunk's heading path to its text.",
        flags=("--headings/--no-headings",),
        param="headings",
        env="RAG_EMBED_HEADINGS",
        stages=("embed",),
        recorded="retrieval",
    ),
    Option(
        "passages",
        bool,
        True,
        "Also embed each chunk's passages (runs of sentences of about 60 words) for rag-search to match.",
        env="RAG_EMBED_PASSAGES",
        stages=("embed",),
        recorded="retrieval",
        absent=False,
    ),
    Option(
        "embed_questions",
        bool,
        True,
        "Embed the questions rag-expand wrote for a chunk as passage vectors of it, where the records have them.",
        flags=("--questions/--no-questions",),
        env="RAG_EMBED_QUESTIONS",
        stages=("embed",),
    ),
    # Texts per model call. With batches sorted by length, smaller batches pad less:
    # the batch-size ablation in results/bench.json (`just bench`) is what chose it.
    Option("batch_size", int, 8, "Texts per model call.", env="RAG_BATCH_SIZE", stages=("embed",), range=(1, 4096)),
    Option(
        "threads",
        int,
        0,
        "onnxruntime intra-op threads (0: one per core).",
        env="RAG_THREADS",
        stages=("embed",),
        range=(0, 256),
        show_default=False,
    ),
    Option(
        "embed_long",
        str,
        "windows",
        "A text over the model's max tokens: embed every window and average them, or keep the first window.",
        flags=("--long",),
        param="long_mode",
        env="RAG_EMBED_LONG",
        stages=("embed",),
        choices=("truncate", "windows"),
        recorded="retrieval",
    ),
    Option(
        "cache_path",
        str,
        None,
        "A vector cache file (sqlite): unchanged text is not embedded again [default: $XDG_CACHE_HOME/ragline/embed-cache.sqlite, for a model with files; --no-cache: none].",
        flags=("--cache",),
        env="RAG_EMBED_CACHE",
        stages=("embed",),
        path="file",
    ),
    # rag-expand
    Option(
        "questions",
        int,
        4,
        "Questions the local model writes for each chunk (0: pass the records through).",
        env="RAG_EXPAND_QUESTIONS",
        stages=("expand",),
        range=(0, 20),
    ),
    Option(
        "local_model",
        str,
        "qwen2.5-coder-0.5b-instruct",
        "The model that writes the questions: a known model's name (fetched by `just llm-model`) or a GGUF file's path.",
        env="RAG_LOCAL_MODEL",
        stages=("expand",),
    ),
    Option(
        "local_threads",
        int,
        0,
        "llama.cpp's threads (0: one per core).",
        env="RAG_LOCAL_THREADS",
        stages=("expand",),
        range=(0, 256),
        show_default=False,
    ),
    Option(
        "local_context", int, 2048, "The local model's context, in tokens.", env="RAG_LOCAL_CONTEXT", stages=("expand",), range=(512, 32768)
    ),
    Option(
        "expand_cache",
        str,
        None,
        "The question cache file (sqlite): a chunk whose text, model and prompt are unchanged is not asked again [default: $XDG_CACHE_HOME/ragline/expand.sqlite].",
        flags=("--cache",),
        env="RAG_EXPAND_CACHE",
        stages=("expand",),
        path="file",
    ),
    # rag-rerank
    Option(
        "depth",
        int,
        20,
        "Hits of each question the local model scores (rag-search --k at least this many); those past it are dropped.",
        env="RAG_RERANK_DEPTH",
        stages=("rerank",),
        range=(1, 200),
    ),
    Option(
        "rerank_weight",
        float,
        None,
        "The model's share against the retrieval score, both min-max normalised (0: retrieval's order) "
        "[default: the weight fitted for the model, by name or by its file: 1 for qwen2.5-coder-0.5b-instruct and 2 for qwen2.5-coder-1.5b-instruct].",
        flags=("--weight",),
        env="RAG_RERANK_WEIGHT",
        stages=("rerank",),
        range=(0.0, 1000.0),
        show_default=False,
    ),
    Option(
        "rerank_words",
        int,
        120,
        "Words of each hit the model reads, after its heading path: the cost is linear in them.",
        flags=("--words",),
        env="RAG_RERANK_WORDS",
        stages=("rerank",),
        range=(8, 2000),
    ),
    Option(
        "local_model",
        str,
        "qwen2.5-coder-0.5b-instruct",
        "The model that scores the hits: a known model's name (fetched by `just llm-model`) or a GGUF file's path.",
        env="RAG_LOCAL_MODEL",
        stages=("rerank",),
    ),
    Option(
        "local_threads",
        int,
        0,
        "llama.cpp's threads (0: one per core).",
        env="RAG_LOCAL_THREADS",
        stages=("rerank",),
        range=(0, 256),
        show_default=False,
    ),
    Option(
        "local_context",
        int,
        4096,
        "The local model's context, in tokens (the question and the hits scored at once).",
        env="RAG_LOCAL_CONTEXT",
        stages=("rerank",),
        range=(512, 32768),
    ),
    # rag-index
    Option(
        "out",
        str,
        None,
        "The index directory to write (replaced atomically).",
        flags=("--out", "-o"),
        env="RAG_INDEX",
        stages=("index",),
        path="dir",
        required=True,
    ),
    # rag-search, and rag-answer and rag-serve, which search with them
    Option(
        "index_path",
        str,
        None,
        "The index directory.",
        flags=("--index", "-i"),
        env="RAG_INDEX",
        stages=SEARCHING,
        path="dir",
        required=True,
    ),
    Option(
        "model",
        str,
        None,
        "Query model; must be the index's own (default: the index's).",
        flags=("--model", "-m"),
        env="RAG_MODEL",
        stages=SEARCHING,
    ),
    Option("dense", bool, True, "Dense retrieval.", env="RAG_USE_DENSE", stages=SEARCHING, served="retrieval", recorded="retrieval"),
    Option(
        "sparse",
        bool,
        True,
        "BM25, fused with dense (see --fusion).",
        env="RAG_USE_SPARSE",
        stages=SEARCHING,
        summary="BM25, fused with dense.",
        served="retrieval",
        recorded="retrieval",
    ),
    Option(
        "rerank",
        str,
        "lexical",
        "Reorder candidates by query-term overlap.",
        env="RAG_RERANK",
        stages=SEARCHING,
        choices=get_args(Rerank),
        served="retrieval",
        recorded="retrieval",
    ),
    Option(
        "k",
        int,
        5,
        "Hits per question.",
        flags=("--k", "-k"),
        env="RAG_K",
        stages=SEARCHING,
        range=(1, 1000),
        served="retrieval",
        recorded="retrieval",
    ),
    Option(
        "rrf_k",
        int,
        60,
        "The k of reciprocal rank fusion.",
        env="RAG_RRF_K",
        stages=SEARCHING,
        range=(0, 10_000),
        served="retrieval",
        recorded="retrieval",
        absent=60,
    ),
    Option(
        "candidates",
        int,
        30,
        "Each retriever's list length before fusion and rerank.",
        env="RAG_CANDIDATES",
        stages=SEARCHING,
        range=(1, 10_000),
        served="retrieval",
        recorded="retrieval",
        absent=30,
    ),
    Option(
        "fusion",
        str,
        "score",
        "How dense and BM25 combine: reciprocal rank fusion, or a weighted sum of normalised scores.",
        env="RAG_FUSION",
        stages=SEARCHING,
        choices=get_args(Fusion),
        summary="How dense and BM25 combine.",
        served="retrieval",
        recorded="retrieval",
        absent="rrf",
    ),
    # chosen across the three dev corpora: results/ (just eval), the dense-weight rows
    Option(
        "dense_weight",
        float,
        0.9,
        "The dense share of --fusion score.",
        env="RAG_DENSE_WEIGHT",
        stages=SEARCHING,
        range=(0.0, 1.0),
        summary="The dense share of fusion 'score'.",
        served="retrieval",
        recorded="retrieval",
        absent=0.5,
    ),
    Option(
        "passages",
        bool,
        True,
        "Score a chunk by its best passage vector too, where the index has them.",
        env="RAG_USE_PASSAGES",
        stages=SEARCHING,
        summary="Score a chunk by its best passage vector too.",
        served="retrieval",
        recorded="retrieval",
        absent=False,
    ),
    Option(
        "exact",
        bool,
        False,
        "Lift chunks that hold the question's identifiers (error codes, commands, file names) whole.",
        env="RAG_EXACT",
        stages=SEARCHING,
        summary="Lift chunks that hold the question's identifiers whole.",
        served="retrieval",
        recorded="retrieval",
        absent=False,
    ),
    Option(
        "threads",
        int,
        0,
        "onnxruntime threads for query embedding (0: one per core).",
        env="RAG_THREADS",
        stages=SEARCHING,
        range=(0, 256),
        show_default=False,
    ),
    # rag-serve's own
    Option("host", str, "127.0.0.1", "The address to bind.", env="RAG_SERVE_HOST", stages=("serve",)),
    Option("port", int, 8000, "The port (0: any free one).", env="RAG_SERVE_PORT", stages=("serve",), range=(0, 65535)),
    Option(
        "token",
        str,
        None,
        "Require 'Authorization: Bearer TOKEN' on every route but the page.",
        env="RAG_SERVE_TOKEN",
        stages=("serve",),
    ),
    Option(
        "max_body",
        int,
        64 * 1024,
        "The largest request body, in bytes.",
        env="RAG_SERVE_MAX_BODY",
        stages=("serve",),
        range=(1024, 64 << 20),
    ),
    Option(
        "head_timeout",
        float,
        5.0,
        "Seconds a connection has, from its opening or the end of its last response, to send a whole request head; then it is closed.",
        env="RAG_SERVE_HEAD_TIMEOUT",
        stages=("serve",),
        range=(0.1, 86400.0),
    ),
    Option(
        "body_timeout",
        float,
        10.0,
        "Seconds a request has to send its whole body; then the answer is a 408.",
        env="RAG_SERVE_BODY_TIMEOUT",
        stages=("serve",),
        range=(0.1, 86400.0),
    ),
    Option(
        "write_timeout",
        float,
        10.0,
        "Seconds a response may go unread (its bytes waiting, none taken) before its connection is closed.",
        env="RAG_SERVE_WRITE_TIMEOUT",
        stages=("serve",),
        range=(0.1, 86400.0),
    ),
    Option(
        "workers",
        int,
        1,
        "Server processes sharing the port, each with the index and the model loaded (memory times N) and following rebuilds on its own.",
        env="RAG_SERVE_WORKERS",
        stages=("serve",),
        range=(1, 64),
    ),
    # rag-answer, and rag-serve, whose defaults they are
    # the choices are the registry's (`ragline.answer.reader.REGISTRY`), read when asked: a reader registered is a choice
    Option(
        "reader",
        str,
        "extractive",
        "The reader: " + "; ".join(f"{k.name}: {k.help}" for k in reader.REGISTRY.values()) + ".",
        env="RAG_READER",
        stages=ANSWERING,
        choices=reader.names,
        summary="The reader.",
        recorded="generator",
        absent="extractive",
    ),
    Option(
        "local_model",
        str,
        "qwen2.5-coder-0.5b-instruct",
        "The readers that run the local model (judge, span, pmi, write): a known model's name (fetched by `just llm-model`) or a GGUF file's path.",
        env="RAG_LOCAL_MODEL",
        stages=ANSWERING,
        recorded="generator",
        absent="qwen2.5-coder-0.5b-instruct",
    ),
    Option(
        "local_threads",
        int,
        0,
        "The local model: llama.cpp's threads (0: one per core).",
        env="RAG_LOCAL_THREADS",
        stages=ANSWERING,
        range=(0, 256),
        show_default=False,
    ),
    Option(
        "local_context",
        int,
        4096,
        "The local model's context, in tokens (the prompt and every piece judged at once).",
        env="RAG_LOCAL_CONTEXT",
        stages=ANSWERING,
        range=(512, 32768),
    ),
    Option(
        "off",
        str,
        None,
        f"Switch off an extractive feature ({', '.join(ANSWER_FEATURES)}); repeatable.",
        env="RAG_ANSWER_OFF",
        stages=ANSWERING,
        multiple=True,
        metavar="FEATURE",
    ),
    # Read off results/abstain-sweep.json (`just eval`, its `chosen.threshold`): within one wrongly
    # refused answerable question in eight, the threshold that refuses the most unanswerable ones.
    # tests/test_golden.py checks it against the committed sweep, so the two cannot drift apart.
    Option(
        "threshold",
        float,
        0.23,
        "The abstain threshold: refuse a question whose confidence is under it (0: never on confidence).",
        env="RAG_ABSTAIN_CONFIDENCE",
        stages=ANSWERING,
        range=(0, 1),
        summary="The abstain threshold.",
        served="answer",
        recorded="generator",
        absent=None,
    ),
    Option(
        "context",
        int,
        5,
        "Hits sent as context blocks.",
        param="size",
        env="RAG_CONTEXT",
        stages=ANSWERING,
        range=(1, 50),
        served="answer",
        recorded="generator",
        absent=5,
    ),
)


@dataclass(frozen=True)
class Variable:
    """A setting read from the environment alone (no flag): for the documentation's table."""

    name: str
    default: str
    help: str
    stages: tuple[str, ...]


# Read where they are used (ragline.models, ragline.answer.openai_chat.build, ...); listed here for the table.
VARIABLES: tuple[Variable, ...] = (
    Variable(
        "RAG_MODEL_HOME",
        "`~/.cache/ragline/models`",
        "The model cache (`$XDG_CACHE_HOME/ragline/models` where set).",
        ("embed", *SEARCHING),
    ),
    Variable(
        "RAG_EMBED_CACHE_MB",
        "`ragline.vectorcache.MOST_MB`",
        "The most megabytes a vector cache file grows to: past it, the vectors stored first are dropped (they are embedded again when asked for).",
        ("embed", *SEARCHING),
    ),
    Variable(
        "RAG_MODEL_WEIGHTS",
        "`fp32`",
        "The model file: the derived float32 one, the shipped `int8` one, or the int8-arithmetic `qint8` one derived from the float32 one.",
        ("embed", *SEARCHING),
    ),
    Variable("RAG_LLM_URL", "", "`--reader openai`: the API base of an OpenAI-protocol server (required).", ANSWERING),
    Variable("RAG_LLM_MODEL", "`default`", "`--reader openai`: the model name sent.", ANSWERING),
    Variable("RAG_LLM_KEY", "", "`--reader openai`: a bearer key.", ANSWERING),
    Variable(
        "RAG_LLM_TIMEOUT", "60", "`--reader openai`: the longest wait, in seconds, for the next piece of the streamed reply.", ANSWERING
    ),
    Variable(
        "RAG_LLM_MAX_TOKENS",
        "`ragline.answer.prompt.MAX_TOKENS`",
        "`--reader openai`, `--reader write`: the most tokens a written answer may have.",
        ANSWERING,
    ),
    Variable(
        "RAG_LOCAL_TIMEOUT",
        "60",
        "`--reader judge`, `span`, `write`: the longest a question's local model work may take, in seconds, the prompt's "
        "evaluation included; past it, the extractive answer (judge, span: the answer record's `fallback` says so) or a "
        "refusal saying so (write).",
        ANSWERING,
    ),
    Variable(
        "RAG_LOCAL_TOKENS",
        "`ragline.answer.local.TOKENS`",
        "`--reader judge`, `span`, `pmi`, `write`: the most tokens the local model may decode for one question; past it, as past "
        "RAG_LOCAL_TIMEOUT.",
        ANSWERING,
    ),
    Variable(
        "RAG_LLM",
        "",
        "Before `--reader`: `extractive`, `local` or `openai`; read only where RAG_READER and `--reader` are not set.",
        ANSWERING,
    ),
    Variable("RAG_LOCAL_MODE", "", "Before `--reader`: with RAG_LLM=local, `judge` or `write`.", ANSWERING),
)


# --------------------------------------------------------------------------- lookups


def get(name: str, stage: str | None = None) -> Option:
    """The declaration of `name` (taken by `stage`, where two stages have options of that name)."""
    found = [o for o in OPTIONS if o.name == name and (stage is None or stage in o.stages)]
    if len(found) != 1:
        raise KeyError(f"{len(found)} options named {name!r}" + (f" for {stage}" if stage else "") + ": name the stage")
    return found[0]


def default(name: str, stage: str | None = None) -> Any:
    """The default of `name` (see `get`)."""
    return get(name, stage).default


def taken_by(stage: str) -> tuple[Option, ...]:
    """The options a stage takes, in its --help order."""
    return tuple(o for o in OPTIONS if stage in o.stages)


def declared_for(stages: tuple[str, ...]) -> tuple[Option, ...]:
    """The options declared for exactly these stages (SEARCHING, ANSWERING): the set one shared decorator applies."""
    return tuple(o for o in OPTIONS if o.stages == stages)


def retrieval() -> tuple[Option, ...]:
    """The retrieval configuration: rag-search's options that its records show (`Config`'s fields)."""
    return tuple(o for o in taken_by("search") if o.recorded == "retrieval")


def served(kind: str) -> tuple[Option, ...]:
    """The options a request may set: "retrieval" (search and answer requests) or "answer"."""
    return tuple(o for o in OPTIONS if o.served == kind)


def recorded() -> tuple[Option, ...]:
    """The options answer records show: rag-eval's configuration keys (one key per name)."""
    return tuple(o for o in OPTIONS if o.recorded is not None)


# --------------------------------------------------------------------------- the retrieval configuration
#
# Written out field by field, not built from `retrieval()` at run time, so that grep and mypy see
# its fields (../shared/STYLE.md: a class built from a table is one no checker can see); each
# field's default and type (its choices as a Literal above) is the declaration's, and
# tests/test_options.py holds the field list equal to `retrieval()`.


def _searching(name: str) -> Any:
    return default(name, "search")


@dataclass(frozen=True)
class Config:
    """What retrieval runs (`rag_search.Searcher`); recorded on every hits and answer record as `retrieval`.

    One field per retrieval option (`retrieval()`), with its declared default."""

    dense: bool = _searching("dense")
    sparse: bool = _searching("sparse")
    rerank: Rerank = _searching("rerank")  # noqa: RUF009 (a str, immutable)
    k: int = _searching("k")
    rrf_k: int = _searching("rrf_k")
    candidates: int = _searching("candidates")
    fusion: Fusion = _searching("fusion")  # noqa: RUF009 (a str, immutable)
    dense_weight: float = _searching("dense_weight")
    passages: bool = _searching("passages")
    exact: bool = _searching("exact")

    def check(self) -> None:
        """ValueError for a configuration that cannot run (the CLI turns it into a usage error)."""
        if not (self.dense or self.sparse):
            raise ValueError("both retrievers are off: use dense (the default), --sparse, or both")
        check(retrieval(), self)


# --------------------------------------------------------------------------- derived


def decorate(options: Iterable[Option]) -> Callable[[Any], Any]:
    """A decorator applying the click options, first on top (the --help order)."""
    chosen = list(options)

    def apply(f: Any) -> Any:
        for option in reversed(chosen):
            f = option.click()(f)
        return f

    return apply


def check(options: Iterable[Option], values: Any) -> None:
    """ValueError for the first attribute of `values` outside its option's choices or range."""
    for option in options:
        if (why := option.check(getattr(values, option.parameter))) is not None:
            raise ValueError(why)


def request_field(name: str) -> Any:
    """The pydantic field of an option a request may set (see `served`): optional (None: the
    server's default; an explicit null is a 422), in its declared range, with its help. Its type and choices are written
    out in `ragline.api`; tests/test_options.py holds them equal to the declaration."""
    from pydantic import Field

    o = next(o for o in OPTIONS if o.name == name and o.served is not None)
    bounds = {} if o.range is None else {"ge": o.type(o.range[0]), "le": o.type(o.range[1])}
    return Field(None, **bounds, description=o.summary or o.help)


def _shown(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, str):
        return f"`{value}`"
    return f"{value:g}" if isinstance(value, float) else str(value)


def markdown_table() -> str:
    """The options table of the documentation: every option, then the settings read from the environment alone."""
    rows = [
        "| option | variable | default | values | stages | what it sets |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for o in OPTIONS:
        flags = " / ".join(f"`{f}`" for f in o.flags)
        values = ""
        if (names := o.choice_names) is not None:
            values = ", ".join(f"`{c}`" for c in names)
        elif o.range is not None:
            values = f"{_shown(o.range[0])} to {_shown(o.range[1])}"
        env = f"`{o.env}`" + (" (comma-separated)" if o.multiple else "") if o.env else ""
        default = "required" if o.required else _shown(o.default)
        rows.append(f"| {flags} | {env} | {default} | {values} | {', '.join(o.stages)} | {o.help} |")
    rows += ["", "| variable | default | stages | what it sets |", "| --- | --- | --- | --- |"]
    rows += [f"| `{v.name}` | {v.default} | {', '.join(v.stages)} | {v.help} |" for v in VARIABLES]
    return "\n".join(rows)
