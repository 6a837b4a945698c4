"""page: what rag-serve hands out besides the records: the page at `/`, and the JSON schemas of its responses.

Not a stage: rag_serve imports it. The page is one static HTML document, its style and
script inline, no external assets. The page asks POST /answer (or GET /search in the
search-only view) with `fetch`, and builds every element from the records with
`textContent` and `createElement`, never `innerHTML`, so corpus text shows as text
whatever it holds. The question and the view live in the URL (`?q=...&view=search`),
so a link can be shared. `policy()` is the Content-Security-Policy that allows this
page's own style and script (by their sha256) and nothing else.
"""

from __future__ import annotations

import base64
import hashlib
import re
from typing import Any

STYLE = """
:root { color-scheme: light dark; --fg: #1b1f24; --bg: #fdfdfc; --muted: #5b6470; --line: #d6dae0; --accent: #0b5cad; --warn: #8a4b00; }
@media (prefers-color-scheme: dark) { :root { --fg: #e6e8eb; --bg: #15181c; --muted: #a3acb8; --line: #39404a; --accent: #7db4ff; --warn: #ffb25b; } }
* { box-sizing: border-box; }
body { margin: 0 auto; max-width: 52rem; padding: 1.5rem 1rem 4rem; font: 16px/1.55 system-ui, sans-serif; color: var(--fg); background: var(--bg); }
h1 { font-size: 1.4rem; margin: 0 0 1rem; }
h2 { font-size: 1.15rem; margin: 1.5rem 0 .5rem; }
form { display: grid; gap: .6rem; }
label { font-weight: 600; }
.row { display: flex; gap: .5rem; flex-wrap: wrap; align-items: center; }
input[type=search], input[type=password] { flex: 1 1 20rem; font: inherit; padding: .5rem .6rem; border: 1px solid var(--line); border-radius: 6px; background: transparent; color: inherit; }
button { font: inherit; padding: .5rem 1rem; border-radius: 6px; border: 1px solid var(--accent); background: var(--accent); color: var(--bg); cursor: pointer; }
fieldset { border: 0; padding: 0; margin: 0; display: flex; gap: 1rem; }
:focus-visible { outline: 3px solid var(--accent); outline-offset: 2px; }
.answer p { margin: .3rem 0; }
#result { overflow-wrap: anywhere; }
.answer pre, .chunk { white-space: pre; overflow-x: auto; background: color-mix(in srgb, var(--line) 30%, transparent); padding: .6rem; border-radius: 6px; font: .8em/1.45 ui-monospace, monospace; }
a.cite { font-size: .85em; vertical-align: super; text-decoration: none; padding: 0 .1em; }
.sources { padding-left: 0; list-style: none; }
.sources li, .hits li { border-top: 1px solid var(--line); padding: .4rem 0; }
summary { cursor: pointer; }
.where, .meta, .signals { color: var(--muted); font-size: .9em; }
.refusal { color: var(--warn); font-weight: 600; }
.error { color: var(--warn); }
.hits { padding-left: 1.5rem; }
[hidden] { display: none !important; }
"""

SCRIPT = """
"use strict";
const $ = (id) => document.getElementById(id);
const form = $("ask"), box = $("q"), out = $("result"), status = $("status");

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
  for (const child of children) if (child !== null && child !== undefined) node.append(child);  // strings become text nodes
  return node;
}
const where = (h) => h.path ? `${h.path}:${h.start_line}-${h.end_line}` : "";
const trail = (h) => (h.headings || []).join(" > ") || h.doc || h.chunk_id;
const num = (x, d) => (typeof x === "number" ? x.toFixed(d) : "-");

function view() { return document.querySelector("input[name=view]:checked").value; }

const BUSY_TRIES = 3, BUSY_WAIT_MAX = 30;  // a 429 is asked again after its Retry-After (seconds, at most 30), three times

async function call(path, init, tries = BUSY_TRIES) {
  const token = sessionStorage.getItem("rag-serve-token");
  init = init || {};
  init.headers = Object.assign({"Accept": "application/json"}, init.headers || {});
  if (token) init.headers["Authorization"] = "Bearer " + token;
  const response = await fetch(path, init);
  if (response.status === 429 && tries > 0) {  // the server is busy: wait as long as it says, then ask again
    await response.text().catch(() => "");  // the refusal's body, read so the connection is free
    const wait = Math.min(BUSY_WAIT_MAX, Math.max(1, parseInt(response.headers.get("Retry-After"), 10) || 1));
    status.textContent = `The server is busy: asking again in ${wait} s…`;
    await new Promise((resume) => setTimeout(resume, wait * 1000));
    status.textContent = "Asking…";
    return call(path, init, tries - 1);
  }
  const body = await response.json().catch(() => ({error: `HTTP ${response.status}`}));
  if (response.status === 401) $("auth").hidden = false;
  if (!response.ok) throw new Error(body.error || `HTTP ${response.status}`);
  return body;
}

function citeText(line, blocks) {
  // the answer's text, its [n] markers as links to their source blocks; \\[n] (quoted handbook text) stays text
  const parts = [];
  const marker = /(\\\\?)\\[(\\d{1,3})\\]/g;
  let last = 0, m;
  while ((m = marker.exec(line))) {
    parts.push(line.slice(last, m.index));
    const n = m[2];
    if (m[1] || !blocks.has(n)) parts.push(`[${n}]`);
    else parts.push(el("a", {href: `#src-${n}`, class: "cite", "data-n": n, "aria-label": `source ${n}`}, `[${n}]`));
    last = marker.lastIndex;
  }
  parts.push(line.slice(last));
  return parts;
}

function answerBody(text, blocks) {
  const box = el("div", {class: "answer"});
  const pieces = text.split(/(```[\\s\\S]*?```|~~~[\\s\\S]*?~~~)/);
  for (const piece of pieces) {
    if (!piece) continue;
    if (/^(```|~~~)/.test(piece)) { box.append(el("pre", {}, el("code", {}, piece.replace(/^(```|~~~)[^\\n]*\\n?/, "").replace(/\\n?(```|~~~)$/, "")))); continue; }
    for (const line of piece.split("\\n")) if (line.trim()) box.append(el("p", {}, ...citeText(line, blocks)));
  }
  return box;
}

function showAnswer(r) {
  const title = el("h2", {id: "result-title", tabindex: "-1"}, r.refused ? "No answer" : "Answer");
  const threshold = r.generator ? r.generator.threshold : null;
  const nodes = [title];
  if (r.refused) {
    nodes.push(el("p", {class: "refusal"}, r.answer));
    if (r.reason) nodes.push(el("p", {class: "reason"}, `Why: ${r.reason}`));
    nodes.push(el("p", {class: "meta"}, `confidence ${num(r.confidence, 2)} · threshold ${num(threshold, 2)}`));
  } else {
    const hits = new Map((r.hits || []).map((h, i) => [String(i + 1), h]));
    const cited = new Map((r.citations || []).map((c) => [String(c.n), c]));
    nodes.push(answerBody(r.answer, cited));
    nodes.push(el("p", {class: "meta"}, `confidence ${num(r.confidence, 2)} · threshold ${num(threshold, 2)} · ${num((r.ms || 0) + (r.answer_ms || 0), 0)} ms`));
    const list = el("ol", {class: "sources", "aria-label": "sources"});
    for (const c of r.citations || []) {
      const hit = hits.get(String(c.rank || c.n)) || {};  // c.rank: the hit the citation quotes (n is its order in the answer)
      list.append(el("li", {}, el("details", {id: `src-${c.n}`},
        el("summary", {}, `[${c.n}] ${trail(c)}`, " ", el("span", {class: "where"}, where(c))),
        el("pre", {class: "chunk"}, hit.text || ""))));
    }
    nodes.push(el("h2", {}, "Sources"), list);
  }
  out.replaceChildren(...nodes);
  title.focus();
}

function showHits(r) {
  const title = el("h2", {id: "result-title", tabindex: "-1"}, `Search: ${r.hits.length} hits`);
  const list = el("ol", {class: "hits"});
  for (const h of r.hits) {
    const s = h.signals || {};
    const signals = [];
    if (s.dense) signals.push(`dense ${num(s.dense.score, 3)} (#${s.dense.rank})`);
    if (s.bm25) signals.push(`bm25 ${num(s.bm25.score, 3)} (#${s.bm25.rank})`);
    if ("fused" in s) signals.push(`fused ${num(s.fused, 3)}`);
    if ("rrf" in s) signals.push(`rrf ${num(s.rrf, 4)}`);
    if ("lexical" in s) signals.push(`lexical ${num(s.lexical, 3)}`);
    if ("exact" in s) signals.push(`exact ${num(s.exact, 3)}`);
    list.append(el("li", {class: "hit"},
      el("details", {}, el("summary", {}, `${trail(h)} `, el("span", {class: "where"}, `${where(h)} · score ${num(h.score, 3)}`)),
        el("p", {class: "signals"}, signals.join(" · ")),
        el("pre", {class: "chunk"}, h.text))));
  }
  out.replaceChildren(title, el("p", {class: "meta"}, `confidence ${num(r.confidence, 2)} · ${num(r.ms, 0)} ms`), list);
  title.focus();
}

let asked = 0;  // the questions asked so far: an answer (after a busy server's wait, say) shows only if still the latest

async function ask(question, mode) {
  const mine = ++asked;
  status.textContent = "Asking…";
  try {
    const r = mode === "search"
      ? await call("/search?" + new URLSearchParams({q: question}))
      : await call("/answer", {method: "POST", headers: {"Content-Type": "application/json"}, body: JSON.stringify({question})});
    if (mine !== asked) return;
    (mode === "search" ? showHits : showAnswer)(r);
    status.textContent = "";
  } catch (err) {
    if (mine !== asked) return;
    out.replaceChildren(el("p", {class: "error", role: "alert"}, String(err.message || err)));
    status.textContent = "";
  }
}

out.addEventListener("click", (event) => {
  const link = event.target.closest("a.cite");
  if (!link) return;
  event.preventDefault();
  const block = $(`src-${link.dataset.n}`);
  if (!block) return;
  block.open = true;
  block.querySelector("summary").focus();
});

form.addEventListener("submit", (event) => {
  event.preventDefault();
  const question = box.value.trim();
  if (!question) { box.focus(); return; }
  const params = new URLSearchParams({q: question});
  if (view() === "search") params.set("view", "search");
  history.pushState(null, "", "?" + params);
  ask(question, view());
});

$("save-token").addEventListener("click", () => {
  sessionStorage.setItem("rag-serve-token", $("token").value);
  $("auth").hidden = true;
  if (box.value.trim()) ask(box.value.trim(), view());
});

function fromUrl() {
  const params = new URLSearchParams(location.search);
  const question = params.get("q");
  document.querySelector(`input[name=view][value=${params.get("view") === "search" ? "search" : "answer"}]`).checked = true;
  if (question) { box.value = question; ask(question, view()); }
}
window.addEventListener("popstate", fromUrl);
fromUrl();
"""

PAGE = f"""<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Ask the handbook</title>
<style>{STYLE}</style>
</head>
<body>
<main>
<h1>Ask the handbook</h1>
<form id="ask" role="search">
  <label for="q">Question</label>
  <div class="row">
    <input id="q" name="q" type="search" autocomplete="off" required maxlength="2000" placeholder="When does the settlement sweep run?" autofocus>
    <button type="submit">Ask</button>
  </div>
  <fieldset>
    <legend class="where">View</legend>
    <label><input type="radio" name="view" value="answer" checked> Answer with citations</label>
    <label><input type="radio" name="view" value="search"> Search only</label>
  </fieldset>
</form>
<div id="auth" hidden>
  <label for="token">Access token</label>
  <div class="row"><input id="token" type="password" autocomplete="off"><button type="button" id="save-token">Use token</button></div>
</div>
<p id="status" role="status" aria-live="polite" class="where"></p>
<section id="result" aria-live="polite" aria-labelledby="result-title"></section>
</main>
<script>{SCRIPT}</script>
</body>
</html>
"""


def _sha(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"


def policy() -> str:
    """The page's Content-Security-Policy: its own inline style and script, requests to its own origin, nothing else."""
    style = re.search(r"<style>(.*?)</style>", PAGE, re.S)
    script = re.search(r"<script>(.*?)</script>", PAGE, re.S)
    assert style and script
    return (
        f"default-src 'none'; script-src {_sha(script.group(1))}; style-src {_sha(style.group(1))}; "
        "connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
    )


# --------------------------------------------------------------------------- the responses, for /openapi.json


def responses(schema: dict[str, Any], what: str = "") -> dict[int | str, dict[str, Any]]:
    """OpenAPI responses: the 200 body's schema, and the error body every route may answer with."""
    err = {"content": {"application/json": {"schema": ERROR}}}
    return {
        200: {"description": what or "OK", "content": {"application/json": {"schema": schema}}},
        400: {"description": "A request that cannot run", **err},
        401: {"description": "No or a wrong bearer token", **err},
        404: {"description": "An unknown chunk id", **err},
        413: {"description": "A body over the limit", **err},
        422: {"description": "A parameter of the wrong type or out of range", **err},
    }


ERROR = {"type": "object", "required": ["error"], "properties": {"error": {"type": "string"}}}
CHUNK = {"type": "string"}
LOCATION = {
    "chunk_id": CHUNK,
    "doc": {"type": ["string", "null"]},
    "path": {"type": ["string", "null"]},
    "start_line": {"type": ["integer", "null"]},
    "end_line": {"type": ["integer", "null"]},
    "headings": {"type": "array", "items": {"type": "string"}},
}
HIT = {
    "type": "object",
    "required": ["rank", "chunk_id", "headings", "text", "score", "signals"],
    "properties": LOCATION
    | {"rank": {"type": "integer"}, "text": {"type": "string"}, "score": {"type": "number"}, "signals": {"type": "object"}},
}
EXPLAIN = {
    "type": "object",
    "required": ["chunk_id", "doc_len", "avgdl", "k1", "b", "terms", "total"],
    "properties": {
        "chunk_id": CHUNK,
        "terms": {"type": "array", "items": {"type": "object"}},
        "total": {"type": "number"},
        "dense": {
            "type": "object",
            "required": ["cosine", "passage_cosine"],
            "properties": {
                "cosine": {"type": "number"},
                "passage_cosine": {"type": ["number", "null"]},
                "sentence": {"type": "string"},
                "sentence_cosine": {"type": "number"},
            },
        },
    },
}
HITS: dict[str, Any] = {
    "type": "object",
    "required": ["schema", "id", "question", "hits", "confidence", "confidence_parts", "retrieval", "ms"],
    "properties": {
        "schema": {"const": "hits/1"},
        "id": {"type": "string"},
        "question": {"type": "string"},
        "hits": {"type": "array", "items": HIT},
        "confidence": {"type": "number", "minimum": 0, "maximum": 1},
        "confidence_parts": {"type": "object"},
        "retrieval": {"type": "object"},
        "ms": {"type": "number"},
        "explain": EXPLAIN,
    },
}
ANSWER = {
    "type": "object",
    "required": [*HITS["required"], "answer", "citations", "refused", "reason", "dropped", "generator", "answer_ms"],
    "properties": HITS["properties"]
    | {
        "schema": {"const": "answer/1"},
        "answer": {"type": "string"},
        "citations": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["n", "chunk_id"],
                "properties": LOCATION | {"n": {"type": "integer"}, "rank": {"type": "integer"}},
            },
        },
        "refused": {"type": "boolean"},
        "reason": {"type": ["string", "null"]},
        "dropped": {"type": "integer"},
        "generator": {"type": "object"},
        "answer_ms": {"type": "number"},
    },
}
HEALTH = {
    "type": "object",
    "required": ["status", "model", "generation", "chunks"],
    "properties": {
        "status": {"const": "ok"},
        "model": {"type": "string"},
        "generation": {"type": "string"},
        "chunks": {"type": "integer"},
        "requests": {"type": "integer"},
        "pending": {"type": ["string", "null"]},
        "reload_error": {"type": ["string", "null"]},
        "busy": {"type": "object"},
        "connections": {"type": ["object", "null"]},
        "sources": {
            "type": "object",
            "description": "The index's source files: how many, which changed or vanished since it was built, and one line saying so (null when none did).",
            "properties": {
                "files": {"type": "integer"},
                "changed": {"type": "array", "items": {"type": "string"}},
                "vanished": {"type": "array", "items": {"type": "string"}},
                "notice": {"type": ["string", "null"]},
            },
        },
    },
}
