"""api: rag-serve's requests, for HTTP and MCP alike: the request models and their checks.

Each parameter's type, range and help is declared once: the options a request may set are
`ragline.options`' declarations (`served`), whose fields here take their range, choices and
help from it (`options.request_field`); tests/test_options.py holds these models' fields
equal to the declarations. JSON bodies are strict ("k": "5" and "k": true are 422s).
Needs pydantic (the serve or the mcp extra); only rag_serve imports this module.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

from ragline import options

MAX_QUESTION = options.MAX_QUESTION  # characters of one question
MAX_BATCH = 64  # questions in one POST
MAX_ID = 500  # characters of a chunk or query id


def absent(**constraints: Any) -> Any:
    """A field that is None when the request leaves it out. Its schema keeps the type alone, so
    an explicit null is a 422 like any other wrong type (typed Any, as `options.request_field`)."""
    return Field(None, **constraints)


Question = Annotated[str, Field(min_length=1, max_length=MAX_QUESTION, pattern=r"\S", description="A question (not blank).")]


class Options(BaseModel):
    """rag-search's retrieval options; an option left out takes the server's default.

    `ragline.options.Config`'s fields again, each optional: written out rather than made from
    Config or the declarations at run time (pydantic's create_model), because mypy and grep see
    only fields written out; the choices are Config's Literal types, the ranges and help the
    declarations' (`options.request_field`), and tests/test_options.py holds the list equal to them."""

    model_config = ConfigDict(extra="forbid")
    dense: bool = options.request_field("dense")
    sparse: bool = options.request_field("sparse")
    rerank: options.Rerank = options.request_field("rerank")
    k: int = options.request_field("k")
    rrf_k: int = options.request_field("rrf_k")
    candidates: int = options.request_field("candidates")
    fusion: options.Fusion = options.request_field("fusion")
    dense_weight: float = options.request_field("dense_weight")
    passages: bool = options.request_field("passages")
    exact: bool = options.request_field("exact")


class Answering(BaseModel):
    """rag-answer's options a request may set; left out, the server's default."""

    threshold: float = options.request_field("threshold")
    context: int = options.request_field("context")


class SearchQuery(Options):
    q: Question
    explain: str = absent(min_length=1, max_length=MAX_ID, description="A chunk id: add each query term's BM25 contribution to it.")


STRICT = ConfigDict(extra="forbid", strict=True)  # JSON bodies and MCP arguments: "k": "5", "k": true, "dense": "yes" refused


class AnswerQuery(Answering, Options):
    """GET /answer: one question (`q`), the retrieval options, the threshold and the context size."""

    q: Question


class Asked(Options):
    """One question, or a batch of them ("id" goes with one question only). JSON types are strict: "k": "5" and "k": true are 422s."""

    model_config = STRICT | ConfigDict(
        json_schema_extra={"oneOf": [{"required": ["question"]}, {"required": ["questions"], "not": {"required": ["id"]}}]}
    )
    question: Question = absent()
    questions: list[Question] = absent(min_length=1, max_length=MAX_BATCH, description="A batch: one record each, in order.")
    id: str = absent(min_length=1, max_length=MAX_ID, description="The query id of a single question (default q1).")


class SearchBody(Asked):
    explain: str = absent(min_length=1, max_length=MAX_ID, description="A chunk id: add each query term's BM25 contribution to it.")


class AnswerBody(Answering, Asked):
    pass


class ExplainQuery(BaseModel):
    model_config = ConfigDict(extra="forbid")
    q: Question
    chunk_id: str = Field(min_length=1, max_length=MAX_ID, description="The chunk to explain.")


class SearchTool(Options):
    """The MCP tool `search`: one question and the retrieval options (strict types, as HTTP's bodies)."""

    model_config = STRICT
    question: Question


class AnswerTool(Answering, Options):
    """The MCP tool `answer`: one question, the retrieval options, the threshold and the context size."""

    model_config = STRICT
    question: Question


class ExplainTool(BaseModel):
    """The MCP tool `explain`: one question and the chunk whose BM25 score to explain."""

    model_config = STRICT
    question: Question
    chunk_id: str = Field(min_length=1, max_length=MAX_ID, description="The chunk to explain.")


RETRIEVAL = tuple(Options.model_fields)  # what a request may set of rag-search's options


def retrieval(model: Options) -> dict[str, Any]:
    """rag-search's option values a request model holds (None: the server's default)."""
    return {name: getattr(model, name) for name in RETRIEVAL}


def problem(problems: Sequence[Any]) -> str:
    """One line for a list of pydantic validation errors: where, what, and how many more."""
    first = problems[0] if problems else {"loc": (), "msg": "invalid request"}
    where = ".".join(str(part) for part in first.get("loc", ()))
    more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
    return f"{where}: {first.get('msg')}{more}"
