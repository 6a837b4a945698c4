"""Mutation testing (`just mutate`): mutmut over the metrics, fusion and top-k, the citation check, the answer's choice.

    python3 scripts/mutate.py           # results/mutation.json (then `just docs` renders its table)
    python3 scripts/mutate.py --keep    # also leave the temporary copy, to `mutmut show NAME` in it

Scope: all of ragline/eval/metrics.py; in ragline/ranking.py `topk`, `rrf`, `score_fusion`
and `dense_scores`; in ragline/answer/citations.py `check_citations`, `escape_markers`, the
written answer's attribution (`_attributed`, `_supporter`) and the `CITATION` pattern; all of ragline/answer/choice.py (the extractive selection rule). mutmut generates mutants for every function of those files; only the scoped
functions' mutants are run and counted (`mutmut run` with their names).

mutmut rewrites the files it mutates, so it never runs in this tree (others run tests
here): the tree as it stands (tracked and untracked files, .gitignore honoured) is copied
to a temporary directory, mutmut runs there, and the copy is removed when the run ends or
is interrupted (SIGINT, SIGTERM). Every top-level module and the `ragline` package go into
mutmut's source paths, so the tests import the copy's modules, never this tree's through the
editable install. mutmut names a mutant by its module's dotted path (a file inside the package,
ragline/eval/metrics.py, gives `ragline.eval.metrics.x_FUNCTION__mutmut_N`) and keeps its
verdicts beside the mutated file (mutants/ragline/eval/metrics.py.meta).

Per mutant, only the fast tests of the three modules run (`-m "not model and not slow"`),
and of those only the ones that call the mutated function (mutmut's own mapping).
Three tests are deselected: tests/test_readers.py's eval-plan-and-bench test imports bench/,
which is not among mutmut's source paths, and two watch imports, which mutmut's trampoline adds
one to every mutated file: tests/test_metrics.py::test_imports_only_numpy_and_the_standard_library reads
the metrics module's imports, and tests/test_search.py::test_one_question_loads_no_writer_and_no_cache_modules
checks that a one-question rag-search never imports shutil or tempfile, which mutmut's own
modules import as soon as a mutated ragline.ranking is.

mutmut mutates only code inside functions, so `CITATION` (a module-level constant) is
mutated here with mutmut's own operators and tested with tests/test_answer.py in the
copy, after mutmut has finished with it.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import mutation_report

ROOT = Path(__file__).resolve().parent.parent
SCOPE: dict[str, tuple[str, ...] | None] = {  # file -> functions (None: the whole module)
    "ragline/eval/metrics.py": None,
    "ragline/ranking.py": ("topk", "rrf", "score_fusion", "dense_scores"),
    "ragline/answer/citations.py": ("check_citations", "escape_markers", "_attributed", "_supporter"),
    "ragline/answer/choice.py": None,
}
CONSTANTS = {"ragline/answer/citations.py": ("CITATION",)}  # module-level names, mutated outside mutmut
TESTS = [
    "tests/test_metrics.py",
    "tests/test_search.py",
    "tests/test_answer.py",
    "tests/test_choice.py",
    "tests/test_reader.py",
    "tests/test_readers.py",
]
CONSTANT_TESTS = {"ragline/answer/citations.py": ["tests/test_answer.py"]}
PYTEST_ARGS = [
    "-m",
    "not model and not slow",
    "--hypothesis-seed=0",  # the same examples every run, so the score does not wander
    "--deselect",
    "tests/test_metrics.py::test_imports_only_numpy_and_the_standard_library",
    "--deselect",
    "tests/test_search.py::test_one_question_loads_no_writer_and_no_cache_modules",
    "--deselect",
    "tests/test_readers.py::test_a_registered_reader_is_in_the_eval_plan_and_the_bench",
]


def copy_tree(dest: Path) -> None:
    """The working tree as it stands: tracked and untracked files, ignored ones left out."""
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    for name in filter(None, listed.decode().split("\0")):
        source = ROOT / name
        if source.is_file():  # a file deleted in the tree but still in the index is skipped
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / name)


def configure(work: Path) -> None:
    """Append mutmut's configuration to the copy's pyproject.toml (this tree's is left alone)."""
    pyproject = work / "pyproject.toml"
    text = pyproject.read_text(encoding="utf-8")
    if "[tool.mutmut]" in text:
        raise SystemExit("mutate: pyproject.toml already has a [tool.mutmut] table; scripts/mutate.py writes it")
    modules = [*sorted(p.name for p in work.glob("*.py")), "ragline"]
    table = {
        "source_paths": modules,
        "only_mutate": list(SCOPE),
        "pytest_add_cli_args": PYTEST_ARGS,
        "pytest_add_cli_args_test_selection": TESTS,
    }
    lines = "".join(f"{key} = {json.dumps(value)}\n" for key, value in table.items())  # JSON string arrays are TOML arrays
    pyproject.write_text(text.rstrip("\n") + "\n\n[tool.mutmut]\n" + lines, encoding="utf-8")


def module_name(file: str) -> str:
    """The dotted module name mutmut gives a file's mutants: ragline/eval/metrics.py -> ragline.eval.metrics."""
    return file.removesuffix(".py").replace("/", ".")


def patterns() -> list[str]:
    """mutmut's mutant-name patterns for the scope."""
    out = []
    for file, functions in SCOPE.items():
        module = module_name(file)
        out += [f"{module}.*"] if functions is None else [f"{module}.x_{f}__mutmut_*" for f in functions]
    return out


def run(command: list[str], cwd: Path, log: Path) -> int:
    """Run `command` in its own process group, output to `log`; on interruption the whole group goes."""
    with log.open("ab") as out:
        proc = subprocess.Popen(command, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        try:
            return proc.wait()
        except BaseException:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            raise


def _walk(node):  # a libcst node and every node below it
    yield node
    for child in node.children:
        yield from _walk(child)


def constant_mutants(work: Path, log: Path) -> dict[str, dict]:
    """Mutate each scoped module-level constant with mutmut's operators; run its tests on each mutant."""
    import libcst as cst
    from mutmut.mutation.mutators import mutation_operators

    results: dict[str, dict] = {}
    for file, names in CONSTANTS.items():
        baseline = run([sys.executable, "-m", "pytest", "-x", "-q", *PYTEST_ARGS, *CONSTANT_TESTS[file]], work, log)
        if baseline != 0:
            raise RuntimeError(f"{file}: its tests fail on the unmutated tree (pytest exited {baseline}): see {log}")
        path = work / file
        source = path.read_text(encoding="utf-8")
        module = cst.parse_module(source)
        lines = source.splitlines()
        for name in names:
            statement = next(
                s
                for s in module.body
                if isinstance(s, cst.SimpleStatementLine)
                and isinstance(s.body[0], cst.Assign)
                and any(isinstance(t.target, cst.Name) and t.target.value == name for t in s.body[0].targets)
            )
            nodes = list(_walk(statement.body[0].value))
            old = module.code_for_node(statement).strip()
            line = next(i for i, text in enumerate(lines, 1) if text.strip() == old)
            n = 0
            for node in nodes:
                for kind, operator in mutation_operators:
                    if not isinstance(node, kind):
                        continue
                    for new in operator(node):
                        n += 1
                        key = f"{module_name(file)}.{name}__mutmut_{n}"
                        mutated = statement.deep_replace(node, new)
                        path.write_text(module.deep_replace(statement, mutated).code, encoding="utf-8")
                        try:
                            code = run([sys.executable, "-m", "pytest", "-x", "-q", *PYTEST_ARGS, *CONSTANT_TESTS[file]], work, log)
                        finally:
                            path.write_text(source, encoding="utf-8")
                        results[key] = {
                            # pytest's exit codes: 0 passed, 1 failed, 2 collection error (the module did not import), 3 internal
                            # error (a plugin the tests load, tests/support/evalfixtures.py, did not import), 5 no tests; the
                            # unmutated tree passed these tests (the baseline above), so a failure is the mutant's
                            "status": {0: "survived", 1: "killed", 2: "killed", 3: "killed", 5: "no tests"}.get(
                                code, f"pytest exited {code}"
                            ),
                            "file": file,
                            "function": name,
                            "line": line,
                            "mutation": f"{old}  ->  {module.code_for_node(mutated).strip()}",
                        }
    return results


def main() -> int:
    keep = "--keep" in sys.argv[1:]
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # so the finally below removes the copy
    work = Path(tempfile.mkdtemp(prefix="ragline-mutate-"))
    log = work / "mutate.log"
    start = time.monotonic()
    try:
        copy_tree(work)
        configure(work)
        print(f"mutate: mutmut in {work} (log: {log.name} there)", file=sys.stderr)
        code = run([sys.executable, "-m", "mutmut", "run", *patterns()], work, log)
        if code != 0:
            print(log.read_text(errors="replace")[-3000:], file=sys.stderr)
            print(f"mutate: mutmut exited {code}", file=sys.stderr)
            return 1
        constants = constant_mutants(work, log)
        report = mutation_report.build(work, SCOPE, constants, seconds=time.monotonic() - start, tests=TESTS)
        out = ROOT / "results" / "mutation.json"
        tmp = out.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        tmp.replace(out)
        print(report["markdown"])
        return 0
    finally:
        if keep:
            print(f"mutate: kept {work}", file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
