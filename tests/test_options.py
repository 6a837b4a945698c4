"""ragline.options: each option declared once, and everything that derives from the declaration."""

from __future__ import annotations

import dataclasses
import doctest
import importlib
import typing

import click
import pytest
from corpora import ROOT

from ragline import cli, options
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
            assert tuple(param.type.choices) == option.choice_names, option.name


@pytest.mark.parametrize("option", [o for o in options.OPTIONS if o.type is float and o.range is not None], ids=lambda o: o.name)
def test_a_number_option_refuses_nan_on_the_command_line_and_from_its_variable(option):
    """Every comparison with NaN is false, so click's own FloatRange takes "nan" for any range: a
    `--head-timeout nan` server answered every body with a 408 "within nan s"."""
    from click.testing import CliRunner

    @click.command()
    @option.click()
    def cmd(**kwargs):
        click.echo(repr(kwargs[option.parameter]))

    low = option.range[0]
    assert CliRunner().invoke(cmd, [option.flag, str(low)]).output == f"{float(low)!r}\n"  # the range's own end is taken
    for args, env in (([option.flag, "nan"], {}), ([], {option.env: "NaN"})):
        got = CliRunner().invoke(cmd, args, env=env)
        assert got.exit_code == 2 and f"'{option.flag}': " in got.output and "is not a number" in got.output, got.output


def test_two_declarations_share_a_name_only_across_stages():
    for stage in options.STAGES:
        names = [o.parameter for o in options.taken_by(stage)]
        assert len(names) == len(set(names)), stage
    with pytest.raises(KeyError, match="name the stage"):
        options.get("passages")
    assert options.get("passages", "embed").env == "RAG_EMBED_PASSAGES"


def _dataclass_differences(cls: type, declared: tuple[Option, ...], holds: tuple[str, ...] = ()) -> list[str]:
    """The names where a written-out dataclass and the declarations disagree: field order, type or
    default (but the fields named in `holds`, which hold another such class)."""
    hints = typing.get_type_hints(cls)
    got = [(f.name, hints[f.name], f.default) for f in dataclasses.fields(cls) if f.name not in holds]

    def kind(o: Option) -> object:
        if isinstance(o.choices, tuple):  # the choices as a Literal type (`options.Rerank`), as mypy checks them
            return typing.Literal[o.choices]
        return tuple[o.type, ...] if o.multiple else o.type if o.default is not None or o.required else o.type | None

    def default(o: Option) -> object:
        return dataclasses.MISSING if o.required else () if o.multiple else o.default

    want = [(o.parameter, kind(o), default(o)) for o in declared]
    differ = {name for name, *_ in set(got) ^ set(want)}
    return sorted(differ) or (["(order)"] if [g[0] for g in got] != [w[0] for w in want] else [])


def _model_differences(model: type, declared: tuple[Option, ...]) -> list[str]:
    """The same for a written-out request model: field order, type (choices as a Literal), range, help, default None."""
    from typing import Literal

    import annotated_types

    got = {name: (f.annotation, f.metadata, f.description, f.default) for name, f in model.model_fields.items()}
    want = {
        o.name: (
            Literal[o.choices] if o.choices is not None else o.type,
            [] if o.range is None else [annotated_types.Ge(o.type(o.range[0])), annotated_types.Le(o.type(o.range[1]))],
            o.summary or o.help,
            None,
        )
        for o in declared
    }
    differ = {n for n in got.keys() | want.keys() if got.get(n) != want.get(n)}
    return sorted(differ) or (["(order)"] if list(got) != list(want) else [])


def test_config_and_search_args_are_the_declarations():
    assert _dataclass_differences(options.Config, options.retrieval()) == []
    searching = options.declared_for(options.SEARCHING)
    assert set(options.retrieval()) <= set(searching)  # the SearchArgs that `search_options` makes holds them as a Config
    assert typing.get_type_hints(cli.SearchArgs)["retrieval"] is options.Config
    own = tuple(o for o in searching if o not in options.retrieval())
    assert _dataclass_differences(cli.SearchArgs, own, holds=("retrieval",)) == []
    assert _dataclass_differences(cli.AnswerArgs, options.declared_for(options.ANSWERING)) == []
    assert options.Config() == options.Config(**{o.name: o.default for o in options.retrieval()})
    import rag_answer

    assert tuple(o.name for o in options.retrieval()) == rag_answer.RETRIEVAL_OPTIONS
    for bad, message in (
        ({"k": 0}, "--k must be between 1 and 1000, got 0"),
        ({"dense_weight": 1.5}, "--dense-weight must be between 0 and 1, got 1.5"),
        ({"fusion": "max"}, "--fusion must be one of rrf, score, got 'max'"),
        ({"dense": False, "sparse": False}, "both retrievers are off"),
    ):
        with pytest.raises(ValueError, match=message):
            options.Config(**bad).check()


def test_the_request_models_are_the_declarations():
    pytest.importorskip("pydantic")
    from ragline import api

    assert _model_differences(api.Options, options.served("retrieval")) == []
    assert _model_differences(api.Answering, options.served("answer")) == []
    assert tuple(o.name for o in options.retrieval()) == api.RETRIEVAL


def test_the_request_fields_hold_the_declared_ranges_and_choices():
    pydantic = pytest.importorskip("pydantic")
    from ragline import api

    class Model(api.Answering, api.Options):
        pass

    assert list(Model.model_fields) == [o.name for o in (*options.served("retrieval"), *options.served("answer"))]
    assert Model().dense_weight is None  # left out: the server's default
    for option in (*options.served("retrieval"), *options.served("answer")):
        if option.range is not None:
            low, high = option.range
            Model(**{option.name: low})
            Model(**{option.name: high})
            step = 1 if option.type is int else 0.01
            for outside in (low - step, high + step):
                with pytest.raises(pydantic.ValidationError):
                    Model(**{option.name: outside})
        if option.choices is not None:
            with pytest.raises(pydantic.ValidationError):
                Model(**{option.name: "nope"})


def test_the_configuration_keys_are_the_recorded_options():
    keys = {k.name: k for k in evalruns.CONFIG_KEYS}
    assert set(keys) == {o.name for o in options.recorded()} | {"features", "questions", "rerank_depth"}
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
    takes it, the configuration key and the docs row; the written-out Config and request
    model are held to it, so a field left out of them is named."""
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
    key = next(k for k in evalruns._keys() if k.name == "min_score")
    assert (key.stages, key.absent, key.flags(0.5)) == (("search",), 0.0, ["--min-score", "0.5"])
    assert "| `--min-score` | `RAG_MIN_SCORE` | 0 | 0 to 1 | search, answer, serve | Drop the hits scoring under this. |" in (
        options.markdown_table()
    )
    # the written-out classes are not derived: the checks that hold them to the declarations name the new field
    assert _dataclass_differences(options.Config, options.retrieval()) == ["min_score"]
    own = tuple(o for o in options.declared_for(options.SEARCHING) if o not in options.retrieval())
    assert _dataclass_differences(cli.SearchArgs, own, holds=("retrieval",)) == []  # it holds a Config, not the fields again
    if importlib.util.find_spec("pydantic") is not None:
        from ragline import api

        assert _model_differences(api.Options, options.served("retrieval")) == ["min_score"]


def test_the_table_has_a_row_per_option_and_variable():
    table = options.markdown_table()
    assert table.count("\n| `--") == len(options.OPTIONS)
    assert table.count("\n| `RAG_") == len(options.VARIABLES)


def test_the_docs_show_the_table():
    page = (ROOT / "docs" / "options.md").read_text(encoding="utf-8")
    assert f"<!-- options:begin -->\n{options.markdown_table()}\n<!-- options:end -->" in page


def test_docstring_examples():
    failed, tried = doctest.testmod(options)
    assert tried and not failed
