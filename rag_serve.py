"""rag-serve: HTTP over the search and answer cores, and a page to ask the handbook.

    rag-serve --index build/idx                                   # then open http://127.0.0.1:8000/
    curl -s 'http://127.0.0.1:8000/search?q=NW-4021&k=3'
    curl -s http://127.0.0.1:8000/answer -H 'Content-Type: application/json' -d '{"question": "When does the settlement sweep run?"}'

Routes (the OpenAPI schema at /openapi.json says each one's parameters and bodies):

    GET  /health    status, model, index generation, chunk count, requests served (also HEAD;
                    answered on the event loop, never behind search and answer work)
    GET  /search    ?q=QUESTION and the retrieval options of rag-search: one hits/1 record
    POST /search    {"question": ...} or {"questions": [...]} and the same options: one
                    hits/1 record, or a list of them in the order asked
    GET  /answer    ?q=QUESTION, the same options, threshold and context: one answer/1 record
    POST /answer    as POST /search, plus "threshold" and "context": answer/1 records
    GET  /explain   ?q=QUESTION&chunk_id=ID: each query term's BM25 contribution to that chunk
    GET  /          the page (no external assets; the question in the URL as ?q=; also HEAD)

A response body is the record the CLI writes for the same question, byte for byte a line
of `rag-search --json` or `rag-answer --json` (its `ms` aside), so a client can switch
between the pipe and the URL. Every option of rag-answer (and its RAG_* variable) is the
server's default; a request may override the retrieval options, the threshold and the
context size, not the model or the generator.

The index and the model are loaded once. Before each search or answer the server reads the
index's CURRENT pointer (`rag_index`); when a rebuild has made a new generation live, it
loads that one whole (the model is kept) and answers from it, and a request already running
finishes on the generation it started with. A new generation that fails to load, or a
damaged CURRENT, leaves the old one serving, and /health says why. The work runs on one
thread, in arrival order, with a bounded queue (`ragline.serving.Pool`): a question's
embedding is milliseconds, the rest is Python under the interpreter's lock, and the vector
cache's sqlite connection belongs to the thread that opened it. What keeps one client from
taking the service from the others (the head timeout, the connection bound, the queue, the
budget of one request) is `ragline.serving`'s.
With --workers N, N processes share the port (`ragline.prefork`), each loading the index and
the model and swapping generations on its own, so N interpreters answer at once (one that dies
or stalls is started again); /health counts one worker's requests.

Bad requests get `{"error": "<one line>"}` with their status (and so does a bug: 500, its
traceback in the log): 400 (both retrievers off, a body that is not JSON), 401 (no or a wrong
token), 404 (an unknown route or chunk id), 405, 408 (a body that does not arrive in time), 413
(a body over --max-body, or more work than one request may ask for), 421 (without a token, a
Host that is not localhost or the server's own address: DNS rebinding), 422 (a parameter of the
wrong type or out of range, a blank question), 429 (the queue is full). JSON bodies are strictly
typed. Safe by default: it binds 127.0.0.1; another address needs --token (or RAG_SERVE_TOKEN),
which every route but the page then requires as `Authorization: Bearer TOKEN` (the scheme in any
case), or --open to say it is meant to be open; no CORS unless --cors names an origin. One
access-log line per request on stderr unless --quiet, its control characters escaped.
SIGTERM and Ctrl-C stop taking connections, finish the requests in flight, and exit 0.

Needs the `serve` extra (`pip install 'ragline[serve]'`: FastAPI and uvicorn); nothing
else in ragline imports this module.
"""

import contextlib
import dataclasses
import os
import re
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import click
import orjson

import rag_answer
import rag_embed
import rag_index
import rag_search
import ragline
import ragline.mcpserver
import ragline.options
import ragline.records
from ragline import cli, serving
from ragline.answer.reader import Reader
from ragline.records import StageError

STAGE = "rag-serve"
MAX_BODY = ragline.options.default("max_body")  # bytes of a request body
SEARCHERS = 16  # retrieval configurations kept ready per generation
WARM_UP = ("how is this handbook organised", "who owns this page", "what should I read first")  # timed at start, for nobody
RELOAD_RETRY = 30.0  # seconds before a generation that failed to load is tried again
EXTRA = "rag-serve needs the serve extra: pip install 'ragline[serve]' (FastAPI and uvicorn)"
HTTP_ONLY = (
    "host",
    "port",
    "token",
    "is_open",
    "cors",
    "max_body",
    "head_timeout",
    "body_timeout",
    "write_timeout",
    "workers",
    "quiet",
)  # the options --mcp has no use for


# --------------------------------------------------------------------------- the core: one generation


@dataclass(frozen=True)
class Settings:
    """The server's defaults: rag-answer's options as given on the command line."""

    search: cli.SearchArgs
    answering: cli.AnswerArgs = field(default_factory=cli.AnswerArgs)

    @property
    def threshold(self) -> float:
        return self.answering.threshold

    @property
    def context(self) -> int:
        return self.answering.size


@dataclass
class Engine:
    """One loaded index generation with its generator, and the searchers asked of it so far."""

    settings: Settings
    generation: str
    index: rag_index.Index
    embedder: rag_embed.Embedder
    generator: Reader
    searchers: dict[ragline.options.Config, rag_search.Searcher] = field(default_factory=dict)
    chunk_ids: frozenset[str] = frozenset()
    watch: Any = None  # the index's source files (`rag_index.watch`), for /health

    def searcher(self, overrides: dict[str, Any], at_least: int = 1) -> rag_search.Searcher:
        """The searcher for the server's options with `overrides` (rag-search's option names); 400 when they cannot run."""
        args = self.settings.search.overriding({k: v for k, v in overrides.items() if v is not None})
        try:
            config = args.config(at_least)
        except click.UsageError as err:
            raise serving.RequestError(err.message) from None
        if config not in self.searchers:
            if len(self.searchers) >= SEARCHERS:
                self.searchers.pop(next(iter(self.searchers)))
            s = self.settings.search
            self.searchers[config] = rag_search.Searcher(self.index, config, model=s.model, threads=s.threads, embedder=self.embedder)
        return self.searchers[config]

    def search(self, queries: list[dict[str, Any]], overrides: dict[str, Any], explain_id: str | None = None) -> list[dict[str, Any]]:
        """hits/1 records for query records ({"id", "question"}), as rag-search writes them."""
        if explain_id is not None:
            self.check_chunk(explain_id)
        searcher = self.searcher(overrides)
        return list(rag_search.search_records(searcher, _lines(queries), explain_id))

    def answer(
        self, queries: list[dict[str, Any]], overrides: dict[str, Any], threshold: float | None = None, context: int | None = None
    ) -> list[dict[str, Any]]:
        """answer/1 records for query records, as `rag-answer QUESTIONS` writes them."""
        size = context or self.settings.context
        searcher = self.searcher(overrides, at_least=size)
        hits = rag_search.search_records(searcher, _lines(queries))
        limit = self.settings.threshold if threshold is None else threshold
        return list(rag_answer.answer_records(_lines(hits), self.generator, limit, size))

    def explain(self, question: str, chunk_id: str) -> dict[str, Any]:
        """Each query term's BM25 contribution to one chunk (rag-search --explain)."""
        self.check_chunk(chunk_id)
        if not question.strip():
            raise serving.RequestError("the question is blank")
        return rag_search.explain(self.index, question, chunk_id) | {
            "dense": rag_search.explain_dense(self.searcher({}), question, chunk_id)
        }

    def check_chunk(self, chunk_id: str) -> None:
        if chunk_id not in self.chunk_ids:
            raise serving.RequestError(f"no chunk '{chunk_id}' in the index", 404)


def _lines(records: Any) -> Iterator[tuple[ragline.records.Line, dict[str, Any]]]:
    return ((ragline.records.Line("<request>", n), r) for n, r in enumerate(records, 1))


def time_a_search(engine: Engine) -> float:
    """Seconds one search takes once warm: WARM_UP's questions searched in turn, the fastest of all but the
    first (which carries the start-up's one-off costs: the embedder's first run, the index's pages read
    in: many times a warm search with MiniLM). Each question is another, so none is
    answered from the question cache."""
    times = []
    for n, question in enumerate(WARM_UP):
        started = time.perf_counter()
        engine.search([{"id": f"warm-up-{n}", "question": question}], {})
        times.append(time.perf_counter() - started)
    return min(times[1:])


def open_engine(settings: Settings, embedder: rag_embed.Embedder | None = None) -> Engine:
    """Load the live generation (and the model, unless `embedder` is the index's): a StageError when it cannot serve."""
    root = Path(settings.search.index_path)
    for _ in range(rag_index.LOAD_ATTEMPTS):
        before = rag_index.live_generation(root)
        index = rag_index.load(root)
        if rag_index.live_generation(root) == before:  # the generation named before the load is the one loaded
            break
    else:
        raise StageError("the index is being rebuilt faster than it can be loaded", str(root))
    built = index.manifest["model"]
    s = settings.search
    if embedder is None or embedder.name != built or embedder.sha256 != index.manifest.get("model_sha256", embedder.sha256):
        embedder = rag_embed.load_embedder(s.model or built, threads=s.threads)
    generator = rag_answer.make_reader(settings.answering, index, embedder)
    engine = Engine(settings, before or "", index, embedder, generator, chunk_ids=frozenset(index.ids), watch=rag_index.watch(index))
    engine.searcher({})  # the default configuration is checked (model, dimensions) before the first request
    return engine


class Live:
    """The generation being served: follows the index's CURRENT pointer, swapping whole engines.

    `current()` is called at the start of each request; a request holds the engine it got
    until it is done, so a swap never touches a request in flight. Engines are loaded and used
    on the pool's worker thread (`serving.Pool`): the embedding cache's sqlite connection
    belongs to the thread that opened it. A damaged CURRENT (not a generation's name) leaves
    the loaded generation serving, with the reason in /health, until it names one again.
    `health()` reads only what is loaded and the pointer: it runs on the event loop and never
    waits for the pool.
    """

    def __init__(
        self,
        settings: Settings,
        note: Callable[[str], None] = lambda message: None,
        pool: serving.Pool | None = None,
        warm: bool = True,
    ):
        self.settings = settings
        self.root = Path(settings.search.index_path)
        self.note = note
        self.pool = pool or serving.Pool(name=STAGE)
        self.engine = self.pool.call(lambda: open_engine(settings))
        if warm:  # the pool's admission needs a search's cost; MCP's one host, served in turn, does not (`warm=False`)
            self.pool.warm("search", self.pool.call(lambda: time_a_search(self.engine)))
        self.failed: tuple[str, str] | None = None  # (generation, why) of the last swap that failed
        self.failed_at = 0.0
        self.served = 0
        self.started = time.time()
        self.policy: serving.Policy | None = None  # the connection policy, for /health's counts
        self._lock = threading.Lock()
        self._reloading = False

    def pointer(self) -> str | None:
        """The generation CURRENT names, None when none; a damaged pointer is recorded in `failed` (once) and read as None."""
        try:
            live = rag_index.live_generation(self.root)
        except OSError:  # passing (no descriptor free for a moment): keep serving, read it again next time
            return None
        except StageError as err:
            why = ragline.records.one_line(err.message)
            if self.failed != ("CURRENT", why):
                self.failed = ("CURRENT", why)
                self.note(f"{STAGE}: {why}; still serving generation {self.engine.generation}")
            return None
        if self.failed and live == self.engine.generation:  # pointing back at what is served: nothing failed now
            self.failed = None
        elif self.failed and self.failed[0] == "CURRENT" and live is not None:
            self.failed = None  # repaired: the swap below decides
        return live

    def current(self) -> Engine:
        live = self.pointer()
        if live is None or live == self.engine.generation or self._failed(live):
            return self.engine
        with self._lock:
            if live != self.engine.generation:
                try:
                    engine = open_engine(self.settings, self.engine.embedder)
                except (StageError, OSError) as err:
                    self.failed, self.failed_at = (live, str(err)), time.monotonic()
                    self.note(f"{STAGE}: generation {live} not loaded, still serving {self.engine.generation}: {err}")
                else:
                    self.note(f"{STAGE}: now serving generation {engine.generation} ({len(engine.index.chunks)} chunks)")
                    self.engine, self.failed = engine, None
        return self.engine

    def pending(self) -> str | None:
        """The generation CURRENT names when it is not the one served (and has not failed to load): a swap to come."""
        live = self.pointer()
        if live is None or live == self.engine.generation or self._failed(live):
            return None
        return live

    def _failed(self, live: str) -> bool:
        """`live` failed to load less than RELOAD_RETRY s ago (its failure may have been passing: tried again after that)."""
        return bool(self.failed and self.failed[0] == live and time.monotonic() - self.failed_at < RELOAD_RETRY)

    def reload_soon(self) -> None:
        """Queue a swap to the pending generation on the worker, without waiting for it (one queued at a time)."""
        with self._lock:
            if self._reloading:
                return
            self._reloading = True

        def reload() -> None:
            try:
                self.current()
            finally:
                self._reloading = False

        self.pool.executor.submit(reload)

    def health(self) -> dict[str, Any]:
        pending = self.pending()
        if pending is not None:
            self.reload_soon()
        engine = self.engine
        m = engine.index.manifest
        return {
            "status": "ok",
            "model": m["model"],
            "generation": engine.generation,
            "chunks": len(engine.index.chunks),
            "docs": m.get("counts", {}).get("docs"),
            "index": str(engine.index.path),
            "generator": engine.generator.name,
            "threshold": self.settings.threshold,
            "requests": self.served,
            "uptime_s": round(time.time() - self.started, 1),
            "pending": pending,
            "reload_error": None if self.failed is None else self._failure(),
            "busy": {
                "running_or_waiting": self.pool.admitted,
                "capacity": self.pool.capacity,
                "expected_wait_s": None if (w := self.pool.expected_wait()) is None else round(w, 3),
                "refused": self.pool.refused,
                "dropped": self.pool.dropped,
                "abandoned": self.pool.abandoned,
                "mean_s": {kind: round(seconds, 4) for kind, seconds in sorted(self.pool.means.items())},
            },
            "connections": None if self.policy is None else self.policy.counts(),
            "sources": rag_index.source_report(engine.index, engine.watch),
            "ragline": ragline.__version__,
        }

    def _failure(self) -> str:
        assert self.failed is not None
        where, why = self.failed
        return why if where == "CURRENT" else f"generation {where}: {why}"


# --------------------------------------------------------------------------- HTTP


def check_budget(settings: Settings, questions: list[str], options: dict[str, Any], context: int | None = None) -> None:
    """serving.OverBudget (a 413 over HTTP, a tool error over MCP) for a request asking for more work than
    serving.MAX_HITS or MAX_CHARS allow: the hits are the larger of k, the candidate lists and the context."""
    s = settings.search
    hits = max(options.get("k") or s.retrieval.k, options.get("candidates") or s.retrieval.candidates, context or 0)
    serving.check_budget(questions, hits)


def make_app(
    live: Live,
    token: str | None = None,
    cors: tuple[str, ...] = (),
    log: Callable[[str], None] | None = None,
    max_body: int = MAX_BODY,
    hosts: serving.Hosts | None = None,
    body_timeout: float = serving.BODY_TIMEOUT,
) -> Any:
    """The ASGI application: FastAPI routes over `live`, inside the gate (token, body limit, Host, access log)."""
    from fastapi import FastAPI, Query
    from fastapi.exceptions import RequestValidationError
    from starlette.exceptions import HTTPException
    from starlette.requests import Request
    from starlette.responses import HTMLResponse, Response

    from ragline import page as servepage

    async def work(fn: Callable[[Engine], Any], questions: int = 1, kind: str = "search") -> Any:
        """Run fn (of `questions` questions, a search or an answer: `kind`, whose mean the pool keeps apart)
        on the engine of the moment, on the pool's worker (a 429 at once when the pool admits no more)."""

        def job() -> Any:
            live.served += 1
            return fn(live.current())

        return await live.pool.run(job, questions, kind=kind)

    def budget(questions: list[str], options: dict[str, Any], context: int | None = None) -> None:
        check_budget(live.settings, questions, options, context)

    from ragline import api

    def record(body: Any) -> Response:
        return Response(ragline.records.dumps(body) if isinstance(body, dict) else orjson.dumps(body), media_type="application/json")

    app = FastAPI(
        title="ragline",
        version=ragline.__version__,
        description="Search and answer over a markdown handbook: the records rag-search and rag-answer write.",
        docs_url=None,  # the interactive docs load scripts from a CDN; the page works offline
        redoc_url=None,
        redirect_slashes=False,  # its redirect is built from the client's Host header: /health/ is a 404, not a hop to any host
    )

    @app.api_route("/health", methods=["GET", "HEAD"], responses=servepage.responses(servepage.HEALTH))
    async def health() -> Response:
        """Status, model, index generation and chunk count; answered at once, whatever the search and answer work is doing."""
        return record(live.health())

    @app.get("/search", responses=servepage.responses(servepage.HITS, "one hits/1 record"))
    async def search_get(params: Annotated[api.SearchQuery, Query()]) -> Response:
        """Search for one question: a hits/1 record, as `rag-search --json` writes it."""
        queries = serving.query_records(params.q, None)
        budget([params.q], api.retrieval(params))
        return record((await work(lambda e: e.search(queries, api.retrieval(params), params.explain)))[0])

    @app.post(
        "/search",
        responses=servepage.responses(
            {"oneOf": [servepage.HITS, {"type": "array", "items": servepage.HITS}]}, "a hits/1 record, or a list of them for 'questions'"
        ),
    )
    async def search_post(body: api.SearchBody) -> Response:
        """Search for one question or a batch."""
        queries = serving.query_records(body.question, body.questions, body.id)
        budget([q["question"] for q in queries], api.retrieval(body))
        found = await work(lambda e: e.search(queries, api.retrieval(body), body.explain), len(queries))
        return record(found[0] if body.question is not None else found)

    @app.get("/answer", responses=servepage.responses(servepage.ANSWER, "one answer/1 record"))
    async def answer_get(params: Annotated[api.AnswerQuery, Query()]) -> Response:
        """Answer one question, as POST /answer does: an answer/1 record, as `rag-answer --json` writes it."""
        queries = serving.query_records(params.q, None)
        budget([params.q], api.retrieval(params), params.context or live.settings.context)
        return record((await work(lambda e: e.answer(queries, api.retrieval(params), params.threshold, params.context), kind="answer"))[0])

    @app.post(
        "/answer",
        responses=servepage.responses(
            {"oneOf": [servepage.ANSWER, {"type": "array", "items": servepage.ANSWER}]},
            "an answer/1 record, or a list of them for 'questions'",
        ),
    )
    async def answer_post(body: api.AnswerBody) -> Response:
        """Answer one question or a batch, with checked citations, or refuse."""
        queries = serving.query_records(body.question, body.questions, body.id)
        budget([q["question"] for q in queries], api.retrieval(body), body.context or live.settings.context)
        found = await work(lambda e: e.answer(queries, api.retrieval(body), body.threshold, body.context), len(queries), "answer")
        return record(found[0] if body.question is not None else found)

    @app.get("/explain", responses=servepage.responses(servepage.EXPLAIN, "per-term BM25 contributions"))
    async def explain_get(params: Annotated[api.ExplainQuery, Query()]) -> Response:
        """Each query term's BM25 contribution to one chunk: tf, df, idf, contribution, and the total."""
        return record(await work(lambda e: e.explain(params.q, params.chunk_id)))

    csp = servepage.policy()

    @app.api_route("/", methods=["GET", "HEAD"], response_class=HTMLResponse, include_in_schema=False)
    async def page() -> HTMLResponse:
        return HTMLResponse(servepage.PAGE, headers={"Content-Security-Policy": csp, "X-Content-Type-Options": "nosniff"})

    def error(status: int, message: str, headers: dict[str, str] | None = None) -> Response:
        return Response(orjson.dumps({"error": ragline.records.one_line(message)}), status, headers, media_type="application/json")

    @app.exception_handler(serving.RequestError)
    async def request_error(request: Request, err: serving.RequestError) -> Response:
        return error(err.status, err.message)

    @app.exception_handler(serving.Busy)
    async def busy(request: Request, err: serving.Busy) -> Response:
        return error(429, str(err), {"Retry-After": str(serving.RETRY_AFTER)})

    @app.exception_handler(serving.OverBudget)
    async def over_budget(request: Request, err: serving.OverBudget) -> Response:
        return error(413, str(err))

    @app.exception_handler(StageError)
    async def stage_error(request: Request, err: StageError) -> Response:
        return error(400, str(err))

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, err: RequestValidationError) -> Response:
        problems = err.errors()
        if any(p.get("type") == "json_invalid" for p in problems):
            return error(400, "the body is not valid JSON")
        return error(422, api.problem(problems))

    @app.exception_handler(Exception)
    async def bug(request: Request, err: Exception) -> Response:  # its traceback goes to stderr (uvicorn's log), which then closes
        return error(500, f"internal error ({type(err).__name__}): the server's log has its traceback", {"connection": "close"})

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, err: HTTPException) -> Response:
        messages = {404: f"no route {request.url.path}", 405: f"{request.method} is not allowed on {request.url.path}"}
        return error(err.status_code, messages.get(err.status_code, str(err.detail)), getattr(err, "headers", None))

    if cors:
        from starlette.middleware.cors import CORSMiddleware

        app.add_middleware(
            CORSMiddleware, allow_origins=list(cors), allow_methods=["GET", "POST"], allow_headers=["Authorization", "Content-Type"]
        )
    return serving.Gate(app, token, max_body, log, bool(cors), hosts, body_timeout)


# --------------------------------------------------------------------------- MCP


def mcp_tools(live: Live) -> list[ragline.mcpserver.Tool]:
    """The MCP tools: the records GET /search, POST /answer and GET /explain return, one question a call.

    Each call runs on the engine of the moment (`Live.current`), so a rebuilt index is
    served as over HTTP; its arguments are the request models' (`models`)."""
    from ragline import api

    def on_live(fn: Callable[[Engine, Any], dict[str, Any]]) -> Callable[[Any], dict[str, Any]]:
        def call(arguments: Any) -> dict[str, Any]:
            if isinstance(arguments, api.SearchTool):  # HTTP's budget (a 413 there), a tool error here
                check_budget(live.settings, [arguments.question], api.retrieval(arguments))
            elif isinstance(arguments, api.AnswerTool):
                check_budget(live.settings, [arguments.question], api.retrieval(arguments), arguments.context or live.settings.context)
            live.served += 1
            return fn(live.current(), arguments)

        return call

    Tool = ragline.mcpserver.Tool
    return [
        Tool(
            "search",
            "Search the handbook for one question: its hits (chunk text, document, path, lines, heading path, score) "
            "and the confidence that the handbook covers it, as `rag-search --json` writes them.",
            api.SearchTool,
            on_live(lambda e, a: e.search(serving.query_records(a.question, None), api.retrieval(a))[0]),
        ),
        Tool(
            "answer",
            "Answer one question from the handbook: every sentence cites a numbered block, checked against it; "
            "or a refusal (refused: true, and why) when the handbook does not cover it. The record `rag-answer --json` writes.",
            api.AnswerTool,
            on_live(lambda e, a: e.answer(serving.query_records(a.question, None), api.retrieval(a), a.threshold, a.context)[0]),
        ),
        Tool(
            "explain",
            "Why a chunk scored as it did for a question: each query term's BM25 contribution (tf, df, idf) and the dense similarity.",
            api.ExplainTool,
            on_live(lambda e, a: e.explain(a.question, a.chunk_id)),
        ),
    ]


DOC_URI = "ragline://doc/"


def mcp_documents(live: Live) -> ragline.mcpserver.Documents:
    """The handbook's documents as MCP resources, `ragline://doc/DOC`: a document is its chunks in
    line order (rag-chunk's chunks do not overlap), as the index of the moment holds them."""
    from urllib.parse import quote, unquote

    def listing() -> list[ragline.mcpserver.Document]:
        paths = {c["doc"]: c.get("path") or c["doc"] for c in live.current().index.chunks}
        return [
            ragline.mcpserver.Document(DOC_URI + quote(doc, safe=""), doc, f"{path}, as the index holds it") for doc, path in paths.items()
        ]

    def read(uri: str) -> str | None:
        if not uri.startswith(DOC_URI):
            return None
        doc = unquote(uri[len(DOC_URI) :])
        chunks = sorted((c for c in live.current().index.chunks if c["doc"] == doc), key=lambda c: c.get("start_line") or 0)
        return "\n\n".join(c["text"] for c in chunks) if chunks else None

    return ragline.mcpserver.Documents(listing, read)


def serve_mcp(settings: Settings) -> None:
    """Load the index (before any protocol: a missing one is the usual one line and exit 1), then serve MCP on stdio."""
    with contextlib.redirect_stdout(sys.stderr):  # stdout is the protocol's
        live = Live(settings, note=serving.say, warm=False)
    e = live.engine
    sys.stderr.write(
        f"{STAGE}: serving {settings.search.index_path} (generation {e.generation}, {len(e.index.chunks)} chunks) over MCP on stdio\n"
    )
    tools = mcp_tools(live)
    from ragline import api

    ragline.mcpserver.serve_stdio(
        tools,
        live.pool.executor,
        "ragline",
        ragline.__version__,
        "Search and answer questions over a markdown handbook, with citations to its files and lines.",
        (serving.RequestError, serving.OverBudget, StageError),
        api.problem,
        mcp_documents(live),
    )
    sys.stderr.write(f"{STAGE}: MCP host closed the connection after {live.served} calls\n")


# --------------------------------------------------------------------------- the command


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@cli.search_options
@ragline.options.get("host").click()
@ragline.options.get("port").click()
@ragline.options.get("token").click()
@click.option("--open", "is_open", is_flag=True, help="Serve a non-loopback address without a token, on purpose.")
@click.option("--cors", multiple=True, metavar="ORIGIN", help="Allow browser requests from this origin (repeatable; none by default).")
@ragline.options.get("max_body").click()
@ragline.options.get("head_timeout").click()
@ragline.options.get("body_timeout").click()
@ragline.options.get("write_timeout").click()
@ragline.options.get("workers").click()
@cli.answer_options
@click.option("--quiet", "-q", is_flag=True, help="No access log.")
@click.option(
    "--mcp",
    "over_mcp",
    is_flag=True,
    help="Serve the tools search, answer and explain over MCP on stdio (what an MCP host starts) instead of HTTP; needs the mcp extra.",
)
@ragline.records.stage_main(STAGE)
def main(
    search: cli.SearchArgs,
    host: str,
    port: int,
    token: str | None,
    is_open: bool,
    cors: tuple[str, ...],
    max_body: int,
    head_timeout: float,
    body_timeout: float,
    write_timeout: float,
    workers: int,
    answering: cli.AnswerArgs,
    quiet: bool,
    over_mcp: bool,
) -> None:
    """Serve /health, /search, /answer, /explain and a page to ask the handbook, over HTTP (or the same over MCP)."""
    if over_mcp:
        if given := cli.given_on_command_line(HTTP_ONLY):
            raise click.UsageError(f"{', '.join(given)}: HTTP options; --mcp serves stdio")
        serve_mcp(Settings(search, answering))
        return
    if not serving.is_loopback(host) and not token and not is_open:
        sys.stderr.write(
            f"{STAGE}: binding {host} serves the handbook beyond this machine: give --token (or RAG_SERVE_TOKEN), or --open to mean it\n"
        )
        raise SystemExit(2)
    try:
        import fastapi  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError:
        raise StageError(EXTRA) from None
    if token is not None and not re.fullmatch(r"[\x21-\x7e]+", token):
        sys.stderr.write(f"{STAGE}: the token must be printable ASCII without spaces (RFC 6750): no client could send this one\n")
        raise SystemExit(2)
    settings = Settings(search, answering)
    sock = serving.bind(host, port, shared=workers > 1)
    say = serving.say

    def app_for(live: Live) -> tuple[Any, serving.Policy]:
        """The app serving `live`, and the connection policy it is served under (which /health reports)."""
        live.policy = serving.Policy(head_timeout=head_timeout, max_body=max_body, body_timeout=body_timeout, write_timeout=write_timeout)
        hosts = None if token else serving.Hosts(host, sock.getsockname()[0])
        return make_app(live, token, cors, None if quiet else say, max_body, hosts, body_timeout), live.policy

    if workers > 1:  # each worker loads its own (`serving.serve_workers`); onnxruntime's threads shared out unless --threads says
        if not search.threads:
            settings = dataclasses.replace(settings, search=dataclasses.replace(search, threads=max(1, (os.cpu_count() or 1) // workers)))

        def start() -> tuple[Any, serving.Policy, str, Callable[[], int]]:
            live = Live(settings, note=say)
            return *app_for(live), f"generation {live.engine.generation}, {len(live.engine.index.chunks)} chunks", lambda: live.served

        serving.serve_workers(workers, sock, start, say, f"serving {search.index_path}")
        return
    live = Live(settings, note=say)
    app, policy = app_for(live)
    bound = sock.getsockname()
    shown = f"[{bound[0]}]" if ":" in bound[0] else bound[0]
    say(
        f"{STAGE}: serving {search.index_path} (generation {live.engine.generation}, {len(live.engine.index.chunks)} chunks) at http://{shown}:{bound[1]}/"
    )
    stopped = serving.serve(app, sock, policy, say)
    say(f"{STAGE}: stopped{f' by {stopped}' if stopped else ''} after {live.served} requests")


if __name__ == "__main__":
    main()
