"""The shared core: JSON Lines in and out, errors, atomic writes, the tokeniser."""

from __future__ import annotations

import io
import os
import sys
from pathlib import Path

import pytest

import ragline
import ragline.records
import ragline.text
from ragline.records import StageError
from ragline.text import tokenize


def lines(data: bytes):
    return list(ragline.records.parse_lines("<stdin>", io.BytesIO(data)))


class TestParse:
    def test_objects_and_blank_lines(self):
        got = lines(b'{"a":1}\n\n   \n{"b":2}\n')
        assert [(str(w), r) for w, r in got] == [("<stdin>:1", {"a": 1}), ("<stdin>:4", {"b": 2})]

    def test_truncated_last_line_without_newline_is_read(self):
        assert [r for _, r in lines(b'{"a":1}\n{"b":2}')] == [{"a": 1}, {"b": 2}]

    def test_byte_order_mark_on_first_line_is_tolerated(self):
        assert [r for _, r in lines(b'\xef\xbb\xbf{"a":1}\n')] == [{"a": 1}]

    def test_bad_json_names_line_and_column(self):
        with pytest.raises(StageError) as err:
            lines(b'{"a":1}\n{"a": tru}\n')
        assert str(err.value).startswith("<stdin>:2: not valid JSON: ")
        assert "(column " in str(err.value)

    @pytest.mark.parametrize(("raw", "kind"), [(b"[1,2]", "an array"), (b"3", "a number"), (b'"x"', "a string"), (b"null", "null")])
    def test_not_an_object(self, raw, kind):
        with pytest.raises(StageError, match=f"^<stdin>:1: expected a JSON object, got {kind}$"):
            lines(raw + b"\n")

    def test_not_utf8(self):
        with pytest.raises(StageError, match=r"^<stdin>:1: not valid JSON: .*UTF-8"):
            lines(b'{"a":"\xff"}\n')


class TestField:
    def test_present_and_typed(self):
        assert ragline.records.require_field({"x": "a"}, "x", str, "f:1") == "a"
        assert ragline.records.require_field({"x": 3}, "x", float, "f:1") == 3

    def test_missing_names_schema(self):
        with pytest.raises(StageError, match=r"^f:1: missing field 'hits' \(got a chunk/1 record\)$"):
            ragline.records.require_field({"schema": "chunk/1"}, "hits", list, "f:1")

    def test_mistyped(self):
        with pytest.raises(StageError, match="^f:2: field 'text' must be a string, got a number$"):
            ragline.records.require_field({"text": 5}, "text", str, "f:2")

    def test_bool_is_not_a_number(self):
        with pytest.raises(StageError, match="must be a number, got a boolean"):
            ragline.records.require_field({"x": True}, "x", float, "f:1")


class TestAtomic:
    def test_failure_leaves_old_file(self, tmp_path):
        target = tmp_path / "out.json"
        target.write_text("old")
        with pytest.raises(RuntimeError), ragline.records.atomic_file(target) as handle:
            handle.write(b"new, half")
            raise RuntimeError
        assert target.read_text() == "old"
        assert os.listdir(tmp_path) == ["out.json"]

    def test_success_replaces(self, tmp_path):
        target = tmp_path / "out.json"
        with ragline.records.atomic_file(target) as handle:
            handle.write(b"new")
        assert target.read_bytes() == b"new"

    def test_atomic_dir_failure_leaves_old_dir(self, tmp_path):
        target = tmp_path / "d"
        target.mkdir()
        (target / "f").write_text("old")
        with pytest.raises(KeyboardInterrupt), ragline.records.atomic_dir(target) as build:
            (build / "f").write_text("new")
            raise KeyboardInterrupt
        assert (target / "f").read_text() == "old"
        assert sorted(os.listdir(tmp_path)) == ["d"]

    def test_atomic_dir_swaps(self, tmp_path):
        target = tmp_path / "d"
        target.mkdir()
        (target / "f").write_text("old")
        with ragline.records.atomic_dir(target) as build:
            (build / "g").write_text("new")
        assert sorted(os.listdir(target)) == ["g"]
        assert sorted(os.listdir(tmp_path)) == ["d"]


class TestTokenize:
    def test_lowercase_and_stopwords(self):
        assert tokenize("When does THE sweep run?") == ["sweep", "run"]

    def test_stopwords_kept_on_request(self):
        assert tokenize("the sweep", stopwords=False) == ["the", "sweep"]

    def test_identifier_whole_and_parts(self):
        assert tokenize("NW-4021") == ["nw-4021", "nw", "4021"]

    def test_region_identifier(self):
        assert tokenize("ap-south-1") == ["ap-south-1", "ap", "south", "1"]

    def test_card_number_groups_join(self):
        spaced = tokenize("use 4000 0000 0000 0002 here")
        dashed = tokenize("4000-0000-0000-0002")
        assert "4000000000000002" in spaced and "4000000000000002" in dashed
        assert spaced.count("0000") == 2

    def test_time_is_one_token_and_parts(self):
        assert tokenize("at 23:40 IST") == ["23:40", "23", "40", "ist"]

    def test_plural_rule(self):
        assert tokenize("runs retries charges keys status process analysis") == [
            "run", "retry", "charge", "key", "status", "process", "analysis",
        ]  # fmt: skip

    def test_sentence_punctuation_is_not_a_joiner(self):
        assert tokenize("the charge. Retry") == ["charge", "retry"]

    def test_unicodeletters(self):
        assert tokenize("Zahlungseingang bestätigt") == ["zahlungseingang", "bestätigt"]
        assert tokenize("ＮＷ－５００１") == tokenize("NW-5001")  # NFKC folds full-width forms

    def test_contractions(self):
        assert tokenize("don't retry") == ["retry"]

    def test_underscores_join(self):
        assert tokenize("idempotency_key") == ["idempotency_key", "idempotency", "key"]


# --------------------------------------------------------------------------- site-generator markup


def test_strip_templates_takes_tags_out_of_prose_but_not_code():
    text = "Use it <%= partial 'partials/banner' %>now.\n{% include x.html %}Then {{ site.name }} and {{< ref \"a\" >}}.\n```yaml\nrun: ${{ github.sha }}\n```\n"
    assert ragline.text.strip_templates(text) == "Use it now.\nThen  and a.\n```yaml\nrun: ${{ github.sha }}\n```\n"


def test_strip_templates_keeps_a_quoted_phrase_and_returns_plain_text_untouched():
    assert ragline.text.strip_templates("<%= warning_text('Do not log secrets') %>") == "Do not log secrets"
    plain = "No tags {here} at all."
    assert ragline.text.strip_templates(plain) is plain


def test_retrieval_text_is_one_definition_for_dense_and_sparse():
    rec = {"text": "Keep <%= x %>logs.", "headings": ["Logging", "Storage"]}
    assert ragline.text.retrieval_text(rec) == "Logging > Storage :: Keep logs."
    assert ragline.text.retrieval_text(rec, headings=False) == "Keep logs."


def test_ctrl_c_while_a_stage_is_still_importing_is_one_line_not_a_traceback(tmp_path):
    import subprocess
    import sys

    (tmp_path / "slowstage.py").write_text("import os, signal\nos.kill(os.getpid(), signal.SIGINT)  # Ctrl-C mid-import\nmain = None\n")
    code = "import ragline.records; ragline.records.launch('slowstage', 'rag-x')"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(Path(ragline.__file__).parent.parent)])}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stderr, done.stdout) == (130, "rag-x: interrupted\n", "")


@pytest.mark.parametrize(("body", "status"), [("print('out', end='')", 0), ("raise ragline.records.StageError('bad')", 1)])
def test_what_the_imports_made_is_frozen_and_what_main_makes_still_collected(tmp_path, body, status):
    """launch freezes what the stage's imports made (gc.freeze: no collection walks it again), not
    what main makes: a cycle main leaves (as an sqlite connection is) is still collected at exit,
    its finalizer run, on success and on failure alike; the output and the exit code are main's."""
    import subprocess
    import sys

    (tmp_path / "tinystage.py").write_text(
        "import click, ragline.records, sys\n\n"
        "class Held:\n    def __del__(self):\n        sys.stderr.write('closed ')\n\n"
        "@click.command()\n@ragline.records.stage_main('rag-x')\ndef main():\n"
        "    cycle = Held()\n    cycle.me = cycle\n    " + body + "\n"
    )
    code = "import atexit, gc, sys, ragline.records\natexit.register(lambda: sys.stderr.write(f'frozen {gc.get_freeze_count()} '))\n"
    code += "sys.argv = ['rag-x']\nragline.records.launch('tinystage', 'rag-x')\n"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(Path(ragline.__file__).parent.parent)])}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == status, done.stderr
    assert done.stdout == ("out" if status == 0 else "")
    frozen = int(done.stderr.rsplit("frozen ", 1)[1].split()[0])
    assert frozen > 1000, done.stderr  # everything the interpreter, click and ragline made
    assert done.stderr.endswith("closed "), done.stderr  # the shutdown's collection, after atexit


@pytest.mark.parametrize("module", ["rag_chunk", "rag_embed", "rag_index", "rag_search", "rag_answer", "rag_eval"])
def test_every_command_says_its_version(module):
    import importlib
    from importlib.metadata import version

    from click.testing import CliRunner

    name = module.replace("_", "-")
    result = CliRunner().invoke(importlib.import_module(module).main, ["--version"])
    assert (result.exit_code, result.output) == (0, f"{name} (ragline) {version('ragline')}\n")


@pytest.mark.parametrize(
    ("command", "typed", "offered"), [("rag-search", "--ra", "plain,--raw-input"), ("rag-eval", "co", "plain,compare")]
)
def test_shell_completion_works_as_the_docs_say(command, typed, offered):
    """The completion recipe of docs/options.md: click's `_RAG_..._COMPLETE` protocol through the console scripts."""
    import shutil
    import subprocess

    exe = shutil.which(command)
    assert exe, f"{command} is not installed"
    var = f"_{command.upper().replace('-', '_')}_COMPLETE"
    source = subprocess.run([exe], env=os.environ | {var: "bash_source"}, capture_output=True, text=True)
    assert source.returncode == 0 and "complete -o nosort -F" in source.stdout
    env = os.environ | {var: "bash_complete", "COMP_WORDS": f"{command} {typed}", "COMP_CWORD": "1"}
    assert subprocess.run([exe], env=env, capture_output=True, text=True).stdout.strip() == offered


def test_a_finished_stage_hands_ctrl_c_back_to_the_default(monkeypatch):
    """After `main` (its work done, or its interrupt reported), SIGINT is the default again: one that
    lands while the interpreter shuts down ends the process silently, not with Python's "Exception
    ignored ... KeyboardInterrupt" (seen in CI once, in tests/test_crash.py's Ctrl-C trials)."""
    import signal
    import types

    module = types.ModuleType("tests_finished_stage")
    module.main = lambda: None  # type: ignore[attr-defined]
    failing = types.ModuleType("tests_failing_stage")

    def fail() -> None:
        raise SystemExit(130)

    failing.main = fail  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "tests_finished_stage", module)
    monkeypatch.setitem(sys.modules, "tests_failing_stage", failing)
    before = signal.getsignal(signal.SIGINT)
    try:
        ragline.records.launch("tests_finished_stage", "rag-test")
        assert signal.getsignal(signal.SIGINT) is signal.SIG_DFL
        signal.signal(signal.SIGINT, before)
        with pytest.raises(SystemExit):
            ragline.records.launch("tests_failing_stage", "rag-test")
        assert signal.getsignal(signal.SIGINT) is signal.SIG_DFL
    finally:
        signal.signal(signal.SIGINT, before)
        import gc

        gc.unfreeze()  # launch froze the test process's objects


class TestStageContract:
    """`ragline.records.stage`: what a stage says and exits with, whatever its body raised."""

    def run(self, body, capsys) -> tuple[int, str]:
        with pytest.raises(SystemExit) as ended, ragline.records.stage("rag-x"):
            body()
        return ended.value.code, capsys.readouterr().err

    def test_a_cleanup_that_fails_as_ctrl_c_unwinds_is_still_the_interrupt(self, capsys):
        def body():
            try:
                raise KeyboardInterrupt
            finally:
                os.close(-1)  # a cleanup's EBADF, raised while the interrupt is handled

        assert self.run(body, capsys) == (130, "rag-x: interrupted\n")

    def test_an_os_error_of_its_own_is_one_line_and_exit_1(self, capsys):
        def body():
            os.close(-1)

        assert self.run(body, capsys) == (1, "rag-x: Bad file descriptor\n")
