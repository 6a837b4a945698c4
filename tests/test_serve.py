"""rag-serve as a real server on loopback: the routes against the CLI, the error statuses, the
generation swap while serving, SIGTERM and Ctrl-C, a port in use, the bind and token rules."""

from __future__ import annotations

import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

import orjson
import pytest
from corpora import TINY, build_index
from serving import Server, httpx, rebuild, refuses_connections, serving, settled, slow_llm, wait_for
from stagecli import command, run, stage_env

import rag_index

pytestmark = pytest.mark.serve

SWEEP = "When does the nightly sweep run?"
UNCOVERED = "Can customers pay with Apple Pay?"


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_index(tmp_path_factory.mktemp("serve"))


@pytest.fixture(scope="module")
def server(index: Path) -> Server:
    with serving(index) as s:
        yield s


@pytest.fixture(scope="module")
def client(server: Server) -> httpx.Client:
    with server.client() as c:
        yield c


def without_timing(record: dict) -> dict:
    return {k: v for k, v in record.items() if k not in ("ms", "answer_ms")}


def cli(stage: str, index: Path, *questions: str) -> list[dict]:
    done = run(stage, "--index", index, "--json", *questions)
    assert done.returncode == 0, done.stderr
    return [orjson.loads(line) for line in done.stdout.splitlines()]


# --------------------------------------------------------------------------- the routes


def test_search_is_the_record_rag_search_writes(client: httpx.Client, index: Path) -> None:
    got = client.get("/search", params={"q": "NW-4021", "k": 2})
    assert got.status_code == 200 and got.headers["content-type"] == "application/json"
    want = cli("rag-search", index, "--k", "2", "NW-4021")[0]
    assert without_timing(got.json()) == without_timing(want)
    assert got.json()["schema"] == "hits/1" and len(got.json()["hits"]) == 2


def test_post_search_batch_keeps_order_and_options(client: httpx.Client, index: Path) -> None:
    got = client.post("/search", json={"questions": [SWEEP, "NW-4021"], "k": 3, "sparse": False, "fusion": "rrf"})
    assert got.status_code == 200
    want = cli("rag-search", index, "--k", "3", "--no-sparse", "--fusion", "rrf", SWEEP, "NW-4021")
    assert [without_timing(r) for r in got.json()] == [without_timing(r) for r in want]
    assert [r["id"] for r in got.json()] == ["q1", "q2"] and got.json()[0]["retrieval"]["sparse"] is False
    one = client.post("/search", json={"question": SWEEP, "id": "mine", "explain": "settlement#the-nightly-sweep"}).json()
    assert one["id"] == "mine" and one["explain"]["chunk_id"] == "settlement#the-nightly-sweep" and one["explain"]["total"] > 0


def test_answer_is_the_record_rag_answer_writes(client: httpx.Client, index: Path) -> None:
    got = client.post("/answer", json={"questions": [SWEEP, UNCOVERED]})
    assert got.status_code == 200
    want = cli("rag-answer", index, SWEEP, UNCOVERED)
    assert [without_timing(r) for r in got.json()] == [without_timing(r) for r in want]
    answered, refused = got.json()
    assert "23:40" in answered["answer"] and answered["citations"][0]["chunk_id"] == "settlement#the-nightly-sweep"
    assert refused["refused"] is True and refused["schema"] == "answer/1"
    strict = client.post("/answer", json={"question": SWEEP, "threshold": 1.0}).json()
    assert strict["refused"] and strict["generator"]["threshold"] == 1.0


def test_get_answer_is_the_record_post_answer_and_rag_answer_write(client: httpx.Client, index: Path) -> None:
    """Issue 31: GET /answer?q= like GET /search, with the same options, limits and errors, and in the OpenAPI document."""
    got = client.get("/answer", params={"q": SWEEP, "k": 3, "context": 2, "threshold": 0.1})
    assert got.status_code == 200 and got.headers["content-type"] == "application/json"
    posted = client.post("/answer", json={"question": SWEEP, "k": 3, "context": 2, "threshold": 0.1}).json()
    want = cli("rag-answer", index, "--k", "3", "--context", "2", "--threshold", "0.1", SWEEP)[0]
    assert without_timing(got.json()) == without_timing(posted) == without_timing(want)
    assert got.json()["schema"] == "answer/1" and "23:40" in got.json()["answer"] and got.json()["generator"]["context"] == 2
    operation = client.get("/openapi.json").json()["paths"]["/answer"]["get"]
    assert {p["name"] for p in operation["parameters"]} >= {"q", "k", "threshold", "context", "fusion"}


def test_explain_and_health(client: httpx.Client, index: Path) -> None:
    import rag_search

    got = client.get("/explain", params={"q": "NW-4021 capture", "chunk_id": "errors#client-errors"})
    assert got.status_code == 200
    loaded = rag_index.load(index)
    want = rag_search.explain(loaded, "NW-4021 capture", "errors#client-errors")
    want["dense"] = rag_search.explain_dense(rag_search.Searcher(loaded, rag_search.Config()), "NW-4021 capture", "errors#client-errors")
    assert got.json() == want  # the CLI's --explain: BM25 terms and the dense side
    health = client.get("/health").json()
    assert health["status"] == "ok" and health["model"] == "hash" and health["reload_error"] is None
    assert health["generation"] == (index / "CURRENT").read_text().strip()
    assert health["chunks"] == len(rag_index.load(index).chunks)


def test_health_says_which_sources_changed_since_the_build(tmp_path: Path) -> None:
    """Issue 31: an index whose pages were edited says so in /health, in one line with the rebuild."""
    index = build_index(tmp_path)
    page = tmp_path / "corpus" / "settlement.md"
    with serving(index) as server, server.client() as c:
        assert c.get("/health").json()["sources"] == {"files": 3, "changed": [], "vanished": [], "notice": None}
        page.write_text(TINY["settlement"].replace("23:40", "00:15"))
        (tmp_path / "corpus" / "runbook.md").unlink()
        got = c.get("/health").json()["sources"]
        assert (got["changed"], got["vanished"]) == ([str(page)], [str(tmp_path / "corpus" / "runbook.md")])
        assert got["notice"].endswith(
            f"since the index was built (2 of 3 sources); rebuild it: {rag_index.rebuild_command(rag_index.load(index))}"
        )
        assert c.get("/search", params={"q": SWEEP}).status_code == 200  # still serving what it was built from


def test_page_is_served_with_its_policy(client: httpx.Client) -> None:
    got = client.get("/")
    assert got.status_code == 200 and got.headers["content-type"].startswith("text/html")
    assert "default-src 'none'" in got.headers["content-security-policy"]
    assert '<label for="q">' in got.text and not re.search(r"""(src|href)=["']?(https?:)?//|@import|url\(""", got.text)
    schema = client.get("/openapi.json").json()
    assert {"/health", "/search", "/answer", "/explain"} <= set(schema["paths"])


# --------------------------------------------------------------------------- errors

BIG = "x" * 70_000
CASES = [
    ("blank question", "POST", "/search", {"json": {"question": "   "}}, 422),
    ("both retrievers off", "POST", "/search", {"json": {"question": "x", "dense": False, "sparse": False}}, 400),
    ("not JSON", "POST", "/answer", {"content": b"{bad", "headers": {"content-type": "application/json"}}, 400),
    ("question and questions", "POST", "/answer", {"json": {"question": "x", "questions": ["y"]}}, 400),
    ("neither", "POST", "/search", {"json": {"k": 2}}, 400),
    ("id with a batch", "POST", "/search", {"json": {"questions": ["x"], "id": "a"}}, 400),
    ("null option", "POST", "/search", {"json": {"question": "x", "k": None}}, 422),
    ("blank question to explain", "GET", "/explain", {"params": {"q": " ", "chunk_id": "errors#client-errors"}}, 422),
    ("unknown chunk", "GET", "/explain", {"params": {"q": "x", "chunk_id": "nope#nothing"}}, 404),
    ("unknown chunk to explain in a search", "POST", "/search", {"json": {"question": "x", "explain": "nope"}}, 404),
    ("unknown route", "GET", "/nothing", {}, 404),
    ("method", "DELETE", "/search", {}, 405),
    ("method on answer", "DELETE", "/answer", {}, 405),
    ("no q to answer", "GET", "/answer", {}, 422),
    ("blank q to answer", "GET", "/answer", {"params": {"q": "  "}}, 422),
    ("threshold out of range in a GET", "GET", "/answer", {"params": {"q": "x", "threshold": 2}}, 422),
    ("unknown option in a GET", "GET", "/answer", {"params": {"q": "x", "kk": 3}}, 422),
    ("both retrievers off in a GET", "GET", "/answer", {"params": {"q": "x", "dense": "false", "sparse": "false"}}, 400),
    ("question too long to answer", "GET", "/answer", {"params": {"q": "y" * 2001}}, 422),
    ("body over the limit", "POST", "/answer", {"json": {"question": BIG}}, 413),
    ("body over the limit, chunked", "POST", "/search", {"content": iter([b'{"question": "', BIG.encode(), b'"}'])}, 413),
    ("k out of range", "GET", "/search", {"params": {"q": "x", "k": 0}}, 422),
    ("k not a number", "GET", "/search", {"params": {"q": "x", "k": "many"}}, 422),
    ("no q", "GET", "/search", {}, 422),
    ("unknown option", "POST", "/search", {"json": {"question": "x", "kk": 3}}, 422),
    ("question too long", "GET", "/search", {"params": {"q": "y" * 2001}}, 422),
    ("fusion not a choice", "POST", "/search", {"json": {"question": "x", "fusion": "max"}}, 422),
    ("threshold out of range", "POST", "/answer", {"json": {"question": "x", "threshold": 2}}, 422),
]


@pytest.mark.parametrize(("name", "method", "path", "kwargs", "status"), CASES, ids=[c[0] for c in CASES])
def test_bad_requests_get_one_line_and_their_status(
    client: httpx.Client, server: Server, name: str, method: str, path: str, kwargs: dict, status: int
) -> None:
    got = client.request(method, path, **kwargs)
    assert got.status_code == status, got.text
    body = got.json()
    assert set(body) == {"error"} and body["error"] and "\n" not in body["error"]
    assert "Traceback" not in server.log()


def test_a_declared_oversized_body_is_refused_before_it_is_sent(server: Server) -> None:
    host, port = server.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(b"POST /search HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100000000\r\n\r\n")
        reply = b""
        while not reply.endswith(b"}"):  # no byte of the body sent: the answer comes from the header alone
            more = sock.recv(4096)
            if not more:
                break
            reply += more
    assert reply.startswith(b"HTTP/1.1 413 ") and b'{"error":"the body is over 65536 bytes"}' in reply


def test_access_log_and_quiet(index: Path, server: Server, client: httpx.Client) -> None:
    client.get("/health")
    client.get("/nothing")

    def logged() -> bool:  # a request's line is written after its response is sent: wait for it, do not race it
        lines = server.log().splitlines()
        return any(line.startswith("rag-serve: GET /health 200 ") and line.endswith(" ms") for line in lines) and any(
            line.startswith("rag-serve: GET /nothing 404 ") for line in lines
        )

    wait_for(logged, "the two requests' access-log lines")
    with serving(index, "--quiet") as quiet, quiet.client() as c:
        assert c.get("/health").status_code == 200
    assert "GET /health" not in quiet.log()  # read once the server has stopped: every line it would write is written


def test_cors_only_when_asked(index: Path, client: httpx.Client) -> None:
    origin = {"Origin": "http://handbook.test"}
    assert "access-control-allow-origin" not in client.get("/health", headers=origin).headers
    with serving(index, "--cors", "http://handbook.test", "--quiet") as s, s.client() as c:
        assert c.get("/health", headers=origin).headers["access-control-allow-origin"] == "http://handbook.test"
        other = c.get("/health", headers={"Origin": "http://elsewhere.test"})
        assert "access-control-allow-origin" not in other.headers


# --------------------------------------------------------------------------- safety


def test_token_is_required_when_given(index: Path) -> None:
    with serving(index, "--token", "s3cret", "--quiet") as s, s.client() as c:
        assert c.get("/").status_code == 200  # the page holds no data
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "s3cret"}):
            got = c.get("/search", params={"q": "x"}, headers=headers)
            assert got.status_code == 401 and got.headers["www-authenticate"] == "Bearer" and "error" in got.json()
        assert c.get("/search", params={"q": "x"}, headers={"Authorization": "Bearer s3cret"}).status_code == 200
        assert c.get("/health", headers={"Authorization": "Bearer s3cret"}).status_code == 200


def _busy_port() -> socket.socket:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(1)
    return sock


def test_non_loopback_bind_needs_a_token_or_open(index: Path) -> None:
    done = run("rag-serve", "--index", index, "--host", "0.0.0.0", "--port", "0", timeout=30)
    assert done.returncode == 2 and done.stdout == b""
    err = done.stderr.decode()
    assert err.count("\n") == 1 and err.startswith("rag-serve: binding 0.0.0.0") and "--token" in err and "--open" in err
    with _busy_port() as busy:  # with a token (or --open) the rule is met: it goes on to bind, here a port in use
        port = str(busy.getsockname()[1])
        for extra, env in ((["--open"], stage_env()), ([], stage_env(RAG_SERVE_TOKEN="t"))):
            done = run("rag-serve", "--index", index, "--host", "0.0.0.0", "--port", port, *extra, env=env, timeout=30)
            assert done.returncode == 1 and b"is in use" in done.stderr, done.stderr


def test_port_in_use_is_one_line(index: Path) -> None:
    with _busy_port() as busy:
        port = busy.getsockname()[1]
        done = run("rag-serve", "--index", index, "--port", str(port))
    assert done.returncode == 1 and done.stdout == b""
    assert done.stderr.decode() == f"rag-serve: port {port} on 127.0.0.1 is in use (another server?)\n"


@pytest.mark.parametrize("flags", [["--port", "70000"], ["--off", "bogus"], ["--max-body", "10"]], ids=["port", "feature", "max-body"])
def test_usage_errors_exit_2(index: Path, flags: list[str]) -> None:
    done = run("rag-serve", "--index", index, *flags, timeout=60)
    assert done.returncode == 2 and done.stdout == b"" and b"Error:" in done.stderr and b"Traceback" not in done.stderr


def test_an_index_that_cannot_serve_is_one_line(tmp_path: Path) -> None:
    done = run("rag-serve", "--index", tmp_path / "missing", "--port", "0", timeout=60)
    assert done.returncode == 1 and done.stdout == b""
    assert done.stderr.decode() == f"rag-serve: {tmp_path / 'missing'}: no index here (run rag-index --out first)\n"


def test_without_the_extra_says_how_to_get_it(index: Path) -> None:
    code = (
        "import sys; sys.modules['fastapi'] = None; sys.argv = ['rag-serve', '--index', sys.argv[1]]; import ragline; ragline.rag_serve()"
    )
    done = subprocess.run([sys.executable, "-c", code, str(index)], capture_output=True, env=stage_env(), timeout=60)
    assert done.returncode == 1
    assert done.stderr.decode() == "rag-serve: rag-serve needs the serve extra: pip install 'ragline[serve]' (FastAPI and uvicorn)\n"


# --------------------------------------------------------------------------- stopping and swapping


def _in_flight(server: Server, question: str, out: list) -> threading.Thread:
    def ask() -> None:
        with server.client() as c:
            out.append(c.post("/answer", json={"question": question}))

    thread = threading.Thread(target=ask)
    thread.start()
    return thread


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "Ctrl-C"])
def test_signal_finishes_requests_in_flight_and_exits_cleanly(index: Path, sig: int) -> None:
    release = threading.Event()
    with slow_llm(held=release) as (url, asked):
        server = Server.start(index, "--reader", "openai", env=stage_env(RAG_LLM_URL=url))
        try:
            got: list = []
            thread = _in_flight(server, SWEEP, got)
            assert asked.wait(30)  # the request is with the slow generator now, held there until released
            server.proc.send_signal(sig)
            refuses_connections(server.url)  # no new connection once stopping
            assert thread.is_alive() and server.proc.poll() is None  # the request still in flight, and the server waits for it
            release.set()
            thread.join(30)
            code = server.proc.wait(30)
        finally:
            server.stop()
    assert got and got[0].status_code == 200 and got[0].json()["answer"] == "The sweep runs at 23:40 [1]."
    assert code == 0
    assert server.log().splitlines()[-1] == f"rag-serve: stopped by {signal.Signals(sig).name} after 1 requests"
    assert "Traceback" not in server.log()


def test_rebuild_while_serving_swaps_generation(tmp_path: Path) -> None:
    index = build_index(tmp_path)
    corpus = tmp_path / "corpus"
    old = (index / "CURRENT").read_text().strip()
    release = threading.Event()
    with slow_llm(held=release) as (url, asked):
        server = Server.start(index, "--reader", "openai", env=stage_env(RAG_LLM_URL=url))
        try:
            with server.client() as c:
                assert c.get("/health").json()["generation"] == old
            got: list = []
            thread = _in_flight(server, SWEEP, got)  # on the old generation, held in flight through the whole rebuild
            assert asked.wait(30)
            (corpus / "settlement.md").write_text(TINY["settlement"].replace("23:40", "22:15"))
            rebuild(corpus, index)
            new = (index / "CURRENT").read_text().strip()
            assert new != old and not (index / old).exists()  # the old generation's files are gone from the directory
            assert thread.is_alive()  # and the request that started on it is still running
            release.set()
            thread.join(30)
            with server.client() as c:
                after = c.post("/answer", json={"question": SWEEP}).json()  # a request swaps before it runs
                hits = c.get("/search", params={"q": SWEEP}).json()
                health = c.get("/health").json()
        finally:
            server.stop()
    assert got[0].status_code == 200 and got[0].json()["answer"] == "The sweep runs at 23:40 [1]."
    assert health["generation"] == new and health["reload_error"] is None
    assert after["answer"] == "The sweep runs at 22:15 [1]."
    assert "22:15" in hits["hits"][0]["text"] and "23:40" not in str(hits)
    assert f"now serving generation {new}" in server.log()


def test_requests_during_rebuilds_never_fail(tmp_path: Path) -> None:
    index = build_index(tmp_path)
    corpus = tmp_path / "corpus"
    statuses: list[int] = []
    seen: set[str] = set()
    stop = threading.Event()
    with serving(index, "--quiet") as server:

        def hammer() -> None:
            with server.client() as c:
                while not stop.is_set():
                    r = c.get("/search", params={"q": SWEEP})
                    statuses.append(r.status_code)
                    seen.add(c.get("/health").json()["generation"])

        thread = threading.Thread(target=hammer)
        thread.start()
        try:
            for stamp in ("21:00", "21:30", "22:00"):
                (corpus / "settlement.md").write_text(TINY["settlement"].replace("23:40", stamp))
                rebuild(corpus, index)
        finally:
            stop.set()
            thread.join(30)
        with server.client() as c:
            final = settled(c)["generation"]
    assert statuses and set(statuses) == {200}
    assert final == (index / "CURRENT").read_text().strip() and len(seen) >= 2


def test_a_generation_that_fails_to_load_leaves_the_old_one_serving(tmp_path: Path) -> None:
    index = build_index(tmp_path)
    old = (index / "CURRENT").read_text().strip()
    with serving(index, "--quiet") as server, server.client() as c:
        broken = index / "gen-broken"
        shutil.copytree(index / old, broken)
        (broken / "chunks.jsonl").write_bytes((broken / "chunks.jsonl").read_bytes().replace(b"23:40", b"99:99"))
        (index / "CURRENT").write_text("gen-broken\n")
        health = settled(c)
        assert health["generation"] == old and "gen-broken" in health["reload_error"] and "sha256" in health["reload_error"]
        assert "23:40" in c.post("/answer", json={"question": SWEEP}).json()["answer"]
    assert "generation gen-broken not loaded, still serving" in server.log()


def test_the_embedding_cache_serves_from_the_worker_thread(index: Path, tmp_path: Path) -> None:
    env = stage_env(RAG_EMBED_CACHE=str(tmp_path / "cache.sqlite"))
    with serving(index, "--quiet", env=env) as s, s.client() as c:
        for _ in range(2):  # the second asks the cache the first filled
            assert "23:40" in c.post("/answer", json={"question": SWEEP}).json()["answer"]
    assert (tmp_path / "cache.sqlite").stat().st_size > 0


def test_help_runs_without_the_server(index: Path) -> None:
    done = subprocess.run([*command("rag-serve"), "--help"], capture_output=True, env=stage_env(), timeout=60)
    assert done.returncode == 0 and b"--token" in done.stdout and b"--index" in done.stdout
