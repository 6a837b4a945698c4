"""The local model on real questions, both ways it runs: in this process and behind an OpenAI-compatible server.

    just llm-eval                      # llama-cpp-python (the llm extra) and the local model first, then this
    python3 scripts/llm_eval.py --record tests/fixtures/llm/qwen2.5-coder-0.5b.jsonl   # also record the raw replies

1. The local model (the default, qwen2.5-coder-0.5b-instruct) comes from the model cache
   (`just llm-model` fetched it, hash-checked).
2. `python -m llama_cpp.server` starts on 127.0.0.1 (a free port) on that file, with its chat
   format named (ChatML: the model's own) and `logits_all` off (the server's default computes
   every prompt token's logits over the whole vocabulary).
3. The first golden question of each kind goes through `rag-eval questions | rag-search |
   rag-answer`, three times: `--reader openai` (the server writes), `--reader judge`
   and `--reader write` (the same model in process); `rag-eval score` scores each
   as a run of its own: results/llm-eval-{openai,judge,write}.json, and results/llm-eval.md
   (their tables, seconds a question, and what the citation check dropped and why).
4. Each run is checked for structure, never for the model's words: every stage exits 0, every
   record is an answer/1 of the generator asked for, every kept sentence cites a block that
   was sent and the citations are those blocks. A failure exits 1.
5. The server is stopped (SIGTERM, then SIGKILL), whatever happened.

Five questions prove the paths (the request, the stream, the bounds, the check; the judge's
batch, the writer's timeout) on a real model within CI's time; `just eval-llm` measures the
readers on the whole development sets. With --record FILE, each question's blocks and the
server's raw reply go to FILE: the citation check's tests replay them offline
(tests/test_llm_replies.py).
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
from ragline import local_models, options  # noqa: E402
from ragline.answer import context as answer_context  # noqa: E402
from ragline.answer import openai_chat, refusal  # noqa: E402
from ragline.answer.citations import CITATION  # noqa: E402

MODEL = options.default("local_model", "answer")
MODEL_ALIAS = MODEL
RUNS = {  # label -> rag-answer's reader flags, and the generator its records must name
    "openai": (["--reader", "openai"], "openai"),
    "judge": (["--reader", "judge"], "judge"),
    "write": (["--reader", "write"], "write"),
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(model: Path, port: int, log: Path, wait: float) -> subprocess.Popen[bytes]:
    extra = os.environ.get("RAG_LLM_SERVER_ARGS", "").split()
    cmd = [sys.executable, "-m", "llama_cpp.server", "--model", str(model), "--model_alias", MODEL_ALIAS]
    cmd += ["--chat_format", "chatml", "--logits_all", "false"]
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


def search(golden: Path, index: Path, env: dict[str, str], work: Path) -> Path:
    """rag-eval questions | rag-search > hits.jsonl; both must exit 0."""
    hits = work / "hits.jsonl"
    with open(hits, "wb") as out:
        q = subprocess.Popen(["rag-eval", "questions", str(golden)], stdout=subprocess.PIPE, env=env)
        s = subprocess.run(["rag-search", "--index", str(index)], stdin=q.stdout, stdout=out, env=env)
        assert q.stdout is not None
        q.stdout.close()
        if q.wait() or s.returncode:
            raise SystemExit(f"llm-eval: rag-eval questions exited {q.returncode}, rag-search {s.returncode}")
    return hits


def answer(hits: Path, index: Path, env: dict[str, str], work: Path, label: str) -> tuple[Path, float]:
    """rag-answer with the run's reader flags < hits.jsonl > LABEL.jsonl (exit 0), and its seconds."""
    answers = work / f"{label}.jsonl"
    start = time.monotonic()
    with open(hits, "rb") as given, open(answers, "wb") as out:
        a = subprocess.run(["rag-answer", "--index", str(index), *RUNS[label][0]], stdin=given, stdout=out, env=env)
    if a.returncode:
        raise SystemExit(f"llm-eval: rag-answer {' '.join(RUNS[label][0])} exited {a.returncode}")
    return answers, time.monotonic() - start


def check_structure(answers: list[dict], ids: list[str], generator: str) -> None:
    """What the run must show, whatever the model wrote."""
    problems = []
    if [r["id"] for r in answers] != ids:
        problems.append(f"answered {[r['id'] for r in answers]}, asked {ids}")
    for r in answers:
        sent = len(r["hits"][: r["generator"]["context"]])
        if r["schema"] != "answer/1" or r["generator"]["name"] != generator:
            problems.append(f"{r['id']}: not an answer/1 record of the {generator} generator")
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
    chat = openai_chat.OpenAIChat(url, MODEL_ALIAS, timeout=timeout)
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


def summary(runs: dict[str, tuple[list[dict], float, str]], replies: list[dict]) -> str:
    """results/llm-eval.md: each run's table, its seconds a question, refusals and what the check dropped."""
    version = importlib.metadata.version("llama-cpp-python")
    lines = [
        "# The local model on real questions: in process and behind a server",
        "",
        f"Generated by `just llm-eval` (scripts/llm_eval.py): llama-cpp-python {version}, {MODEL} ({local_models.KNOWN[MODEL].about}),",
        "the first golden question of each kind of golden.yaml through `rag-search | rag-answer`, three ways: the model",
        "behind llama-cpp-python's OpenAI-compatible server on 127.0.0.1 (`--llm openai`, ChatML, `logits_all` off), and",
        "in process as a judge of pieces and as a writer (`--llm local`). Five questions prove the paths within CI's time;",
        "the readers' scores on the whole development sets are in docs/evaluation.md (`just eval-llm`).",
        "",
    ]
    for label, (answers, seconds, table) in runs.items():
        refused = sum(r["refused"] for r in answers)
        dropped = sum(r["dropped"] for r in answers)
        lines += [
            f"## `{' '.join(RUNS[label][0])}`",
            "",
            f"Questions: {len(answers)}; refused: {refused}; sentences the citation check dropped: {dropped};"
            f" {seconds / max(len(answers), 1):.1f} s a question on this machine.",
            "",
            table.rstrip(),
            "",
        ]
        whys: dict[str, int] = {}
        for r in answers:
            for d in r.get("dropped_sentences") or []:
                why = d["why"]
                kind = "states a fact the cited block does not" if why.startswith("states ") else why
                kind = "too few of its terms in the cited block" if why.startswith("the cited block holds") else kind
                kind = "a fragment, not a sentence" if why.startswith("a fragment") else kind
                whys[kind] = whys.get(kind, 0) + 1
        if whys:
            lines += ["What the citation check dropped, by reason:", ""]
            lines += [f"- {why}: {n}" for why, n in sorted(whys.items(), key=lambda kv: -kv[1])]
            lines.append("")
    if replies:
        lines += [f"The server's raw replies were recorded ({len(replies)} questions) for tests/test_llm_replies.py.", ""]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--index", default="build/idx")
    parser.add_argument("--golden", default="golden.yaml")
    parser.add_argument("--work", default="build/llm-eval")
    parser.add_argument("--out", default="results/llm-eval", help="the result files' stem: STEM-LABEL.json and STEM.md")
    parser.add_argument("--record", default=None, help="Also record each question's blocks and the server's raw reply to this file.")
    parser.add_argument("--wait", type=float, default=300.0, help="Seconds the server may take to start.")
    args = parser.parse_args()
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    model, _ = local_models.model_file(MODEL)
    port = free_port()
    url = f"http://127.0.0.1:{port}/v1"
    # a shared or small machine reads a prompt of five blocks slowly: the first piece of a reply may take minutes
    env = {"RAG_LLM_TIMEOUT": "300", "RAG_LOCAL_TIMEOUT": "300", **os.environ, "RAG_LLM_URL": url, "RAG_LLM_MODEL": MODEL_ALIAS}
    golden = work / "golden.yaml"
    ids = subset(Path(args.golden), golden)
    index = Path(args.index)
    hits = search(golden, index, env, work)
    start = time.monotonic()
    done: dict[str, tuple[Path, float]] = {}
    server = start_server(model, port, work / "server.log", args.wait)
    try:
        print(f"llm-eval: server up on {url} in {time.monotonic() - start:.0f} s; {len(ids)} questions", file=sys.stderr)
        done["openai"] = answer(hits, index, env, work, "openai")
        replies = record_replies(hits, Path(args.record), url, float(env["RAG_LLM_TIMEOUT"])) if args.record else []
    finally:
        stop(server)
    for label in (label for label in RUNS if label != "openai"):  # the in-process readers, after the server stops
        done[label] = answer(hits, index, env, work, label)
    runs: dict[str, tuple[list[dict], float, str]] = {}
    for label, (path, seconds) in done.items():
        answers = [json.loads(line) for line in path.read_text().splitlines()]
        check_structure(answers, ids, RUNS[label][1])
        out = f"{args.out}-{label}.json"
        score = subprocess.run(
            ["rag-eval", "score", "--golden", str(golden), "--label", f"llm-{label}", "--corpus", "northwind", "--out", out, str(path)],
            env=env,
        )
        if score.returncode:
            raise SystemExit(f"llm-eval: rag-eval score exited {score.returncode}")
        table = subprocess.run(["rag-eval", "table", out], env=env, capture_output=True, text=True, check=True).stdout
        runs[label] = (answers, seconds, table)
    Path(args.out).with_suffix(".md").write_text(summary(runs, replies))
    print(
        f"llm-eval: {len(done)} runs of {len(ids)} questions in {time.monotonic() - start:.0f} s; {args.out}*.json and .md written",
        file=sys.stderr,
    )


if __name__ == "__main__":
    main()
