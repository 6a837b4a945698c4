"""ragline.options: each option declared once, and everything that derives from the declaration."""

from __future__ import annotations

import dataclasses
import doctest
import importlib

import click
import pytest
from corpora import ROOT

import rag_search
from ragline import options
from ragline.eval import runs as evalruns
from ragline.options import Option

COMMANDS = {stage: f"rag_{stage}" for stage in options.STAGES}


def command_params(stage: str) -> dict[str, click.Parameter]:
    module = importlib.import_module(COMMANDS[stage])
    return {p.name: p for p in module.main.params if p.name}


@pytest.mark.parametrize("stage", options.STAGES)
def test_each_stage_takes_its_declared_options_as_declared(stage):
    params = command_params(stage)
    for option in options.taken_by(stage):
        param = params[option.parameter]
        assert isinstance(param, click.Option), option.name
        assert param.envvar == (None if option.multiple else option.env), option.name
        assert param.help == option.click_help()
        assert [*param.opts, *param.secondary_opts] == [f for flags in option.flags for f in flags.split("/")]
        if not option.required and not option.multiple:
            assert param.default == option.default, option.name
        if option.range is not None:
            assert (param.type.min, param.type.max) == option.range, option.name
        if option.choices is not None:
            assert tuple(param.type.choices) == option.choices, option.name


def test_two_declarations_share_a_name_only_across_stages():
    for stage in options.STAGES:
        names = [o.parameter for o in options.taken_by(stage)]
        assert len(names) == len(set(names)), stage
    with pytest.raises(KeyError, match="name the stage"):
        options.get("passages")
    assert options.get("passages", "embed").env == "RAG_EMBED_PASSAGES"


def test_config_is_the_retrieval_options():
    assert [f.name for f in dataclasses.fields(rag_search.Config)] == [o.name for o in options.retrieval()]
    assert rag_search.Config() == rag_search.Config(**{o.name: o.default for o in options.retrieval()})
    import rag_answer
    import rag_serve

    assert rag_answer.RETRIEVAL_OPTIONS == rag_serve.OPTIONS == tuple(o.name for o in options.retrieval())
    for bad, message in (
        ({"k": 0}, "--k must be between 1 and 1000, got 0"),
        ({"dense_weight": 1.5}, "--dense-weight must be between 0 and 1, got 1.5"),
        ({"fusion": "max"}, "--fusion must be one of rrf, score, got 'max'"),
        ({"dense": False, "sparse": False}, "both retrievers are off"),
    ):
        with pytest.raises(ValueError, match=message):
            rag_search.Config(**bad).check()


def test_the_request_fields_hold_the_declared_ranges_and_choices():
    pydantic = pytest.importorskip("pydantic")
    model = pydantic.create_model("M", **options.request_fields("retrieval"), **options.request_fields("answer"))
    assert list(model.model_fields) == [o.name for o in (*options.served("retrieval"), *options.served("answer"))]
    assert model().dense_weight is None  # left out: the server's default
    for option in (*options.served("retrieval"), *options.served("answer")):
        if option.range is not None:
            low, high = option.range
            model(**{option.name: low})
            model(**{option.name: high})
            step = 1 if option.type is int else 0.01
            for outside in (low - step, high + step):
                with pytest.raises(pydantic.ValidationError):
                    model(**{option.name: outside})
        if option.choices is not None:
            with pytest.raises(pydantic.ValidationError):
                model(**{option.name: "nope"})


def test_the_configuration_keys_are_the_recorded_options():
    keys = {k.name: k for k in evalruns.CONFIG_KEYS}
    assert set(keys) == {o.name for o in options.recorded()} | {"features"}
    for option in options.recorded():
        key = keys[option.name]
        assert (key.default, key.absent, key.holder) == (option.default, option.absent, option.recorded)
    assert keys["passages"].stages == ("embed", "search")  # two declarations, one key
    assert keys["sparse"].flags(False) == ["--no-sparse"] and keys["exact"].flags(True) == ["--exact"]
    assert keys["dense_weight"].flags(0.5) == ["--dense-weight", "0.5"] and keys["window"].flags(120) == ["--words", "120"]
    assert keys["dense_weight"].stages == ("search",)  # the first pipeline stage that takes it, not rag-answer
    assert list(keys)[: len(evalruns.ORDER)] == list(evalruns.ORDER)  # result files keep their key order


def test_a_new_option_is_one_declaration(monkeypatch):
    """The docstring's example: the declaration alone gives the click option of every stage that
    takes it, the request field, the configuration key and the docs row."""
    new = Option(
        "min_score", float, 0.0, "Drop the hits scoring under this.", env="RAG_MIN_SCORE", stages=options.SEARCHING,
        range=(0.0, 1.0), served="retrieval", recorded="retrieval", absent=0.0,
    )  # fmt: skip
    monkeypatch.setattr(options, "OPTIONS", (*options.OPTIONS, new))
    assert new in options.retrieval() and new in options.declared_for(options.SEARCHING)

    @click.command()
    @options.decorate(options.declared_for(options.SEARCHING))
    def cmd(**kwargs):
        click.echo(repr(kwargs["min_score"]))

    from click.testing import CliRunner

    assert CliRunner().invoke(cmd, ["--index", "x", "--min-score", "0.3"]).output == "0.3\n"
    assert CliRunner().invoke(cmd, ["--index", "x"], env={"RAG_MIN_SCORE": "0.2"}).output == "0.2\n"
    bad = CliRunner().invoke(cmd, ["--index", "x", "--min-score", "2"])
    assert bad.exit_code == 2 and "'--min-score': 2.0 is not in the range 0.0<=x<=1.0" in bad.output
    assert "Drop the hits scoring under this. Env: RAG_MIN_SCORE." in CliRunner().invoke(cmd, ["--help"], terminal_width=300).output
    assert "min_score" in options.request_fields("retrieval")
    key = next(k for k in evalruns._keys() if k.name == "min_score")
    assert (key.stages, key.absent, key.flags(0.5)) == (("search",), 0.0, ["--min-score", "0.5"])
    assert "| `--min-score` | `RAG_MIN_SCORE` | 0 | 0 to 1 | search, answer, serve | Drop the hits scoring under this. |" in (
        options.markdown_table()
    )
    config = options.config_class("C", options.retrieval())
    assert config().min_score == 0.0


def test_the_table_renders_between_its_markers(tmp_path, capsys):
    table = options.markdown_table()
    assert table.count("\n| `--") == len(options.OPTIONS)
    doc = tmp_path / "options.md"
    doc.write_text(f"# Options\n\n{options.BEGIN}\nold\n{options.END}\n\nAfter.\n")
    assert options.main([str(doc), "--check"]) == 1
    assert options.main([str(doc)]) == 0
    assert doc.read_text() == f"# Options\n\n{options.BEGIN}\n{table}\n{options.END}\n\nAfter.\n"
    assert options.main([str(doc), "--check"]) == 0
    (tmp_path / "none.md").write_text("no markers\n")
    assert options.main([str(tmp_path / "none.md")]) == 1
    assert "no <!-- BEGIN options --> ... <!-- END options --> markers" in capsys.readouterr().err


def test_the_docs_show_the_table():
    page = (ROOT / "docs" / "options.md").read_text(encoding="utf-8")
    assert f"<!-- options:begin -->\n{options.markdown_table()}\n<!-- options:end -->" in page


def test_docstring_examples():
    failed, tried = doctest.testmod(options)
    assert tried and not failed
