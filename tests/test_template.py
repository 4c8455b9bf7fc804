"""The command template (jupyter_distcomp.core.template): local argv, v2 syntax, Azure's expansion."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jupyter_distcomp.core.spec_parsing import load_component
from jupyter_distcomp.core.template import expand_azureml, placeholders, to_azureml
from jupyter_distcomp.core.template import render as template
from jupyter_distcomp.errors import SpecError

from .conftest import PUBLIC_SPECS, public_spec_ids

SPEC = """\
name: t
type: DistributedComponent
inputs:
  data: {type: AnyDirectory}
  table: {type: AnyFile, optional: true}
  a: {type: String, optional: true}
  b: {type: String, optional: true}
  lr: {type: Float, default: 0.1}
  epochs: {type: Integer, default: 3}
  flag: {type: Boolean, default: false}
  name: {type: String}
outputs:
  model: {type: path}
launcher:
  type: mpi
  additional_arguments: TEMPLATE
"""
HOSTILE = [
    "a b; touch pwned",
    "$(touch pwned)",
    "`touch pwned`",
    "'; touch pwned; '",
    '"|touch pwned',
    'it\'s "quoted"',
    "*",
    "x\ny",
    "",
    "-v",
    "\\",
    "~",
    "$HOME",
    "--lr=${x}",
]
PRINT_ARGS = "import json, sys\nprint(json.dumps(sys.argv[1:]))\n"


def make(tpl: str, spec: str = SPEC):
    return load_component(spec.replace("TEMPLATE", json.dumps(tpl)))


def render(tpl: str, inputs=None, outputs=None) -> list[str]:
    return make(tpl).render_command(inputs or {}, outputs or {})


def run(argv: list[str], cwd: Path, split: str = "\n") -> list[str]:
    """Execute an argv for real (no shell unless it is the bash form); its output lines."""
    done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, check=True, timeout=30)
    return done.stdout.split(split)[:-1]


@pytest.fixture(scope="module")
def printer_dir(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("printer")
    (folder / "printargs.py").write_text(PRINT_ARGS)
    return folder


@pytest.fixture
def printer(tmp_path) -> Path:
    (tmp_path / "printargs.py").write_text(PRINT_ARGS)
    return tmp_path


# -- placeholders, defaults, values ---------------------------------------------------------
def test_placeholders_lists_kind_name_offset_and_optional():
    tpl = "run {inputs.data} [--t {inputs.table}] -o {outputs.model}"
    found = placeholders(tpl)
    assert [(p.kind, p.name, p.optional, p.text) for p in found] == [
        ("inputs", "data", False, "{inputs.data}"),
        ("inputs", "table", True, "{inputs.table}"),
        ("outputs", "model", False, "{outputs.model}"),
    ]
    assert [tpl[p.offset : p.offset + len(p.text)] for p in found] == [p.text for p in found]


def test_defaults_apply_and_given_values_win():
    tpl = "run --lr {inputs.lr} --epochs {inputs.epochs} --flag {inputs.flag} {inputs.name}"
    expected = ["run", "--lr", "0.1", "--epochs", "3", "--flag", "False", "n"]
    assert render(tpl, {"name": "n"}) == expected
    given_values = {"name": "n", "lr": 1e-05, "epochs": 10, "flag": True}
    assert render(tpl, given_values)[1:7] == ["--lr", "1e-05", "--epochs", "10", "--flag", "True"]
    assert render(tpl, {"name": "n", "lr": None})[2] == "0.1", "None means not given"


@pytest.mark.parametrize(
    ("value", "text"),
    [(True, "True"), (False, "False"), (1e-05, "1e-05"), (0.1, "0.1"), (1.0, "1.0"), (100, "100"),
     (2.5e20, "2.5e+20"), (Path("/d/x"), "/d/x"), ("0", "0")],
)  # fmt: skip
def test_value_rendering(value, text):
    assert render("run {inputs.name}", {"name": value}) == ["run", text]


def test_adjacent_text_and_placeholders_make_one_argv_item():
    tpl = "run --lr={inputs.lr} {inputs.a}{inputs.b} x{inputs.name}y"
    assert render(tpl, {"a": "A", "b": "B", "name": "N"}) == ["run", "--lr=0.1", "AB", "xNy"]


def test_folded_and_literal_yaml_strings_split_on_line_breaks():
    folded = SPEC.replace(
        "TEMPLATE", ">-\n    run\n    --name {inputs.name}\n    [--a {inputs.a}]\n    -x"
    )
    literal = SPEC.replace(
        "TEMPLATE", "|\n    run\n      --name {inputs.name}\n    [--a\n    {inputs.a}]\n    -x\n"
    )
    for text in (folded, literal):
        assert load_component(text).render_command({"name": "n", "a": "v"}, {}) == [
            "run", "--name", "n", "--a", "v", "-x"
        ]  # fmt: skip


@pytest.mark.parametrize(
    "tpl",
    ["""run 'a b' "c d" e\\ f '' "" "x"'y'z""", """run "a \\"b\\" \\$c" 'd\\e' f\\\\g""",
     "run\t--x\n  y  ", """run --json '{{"a": 1}}' "it's" """],
)  # fmt: skip
def test_literal_text_is_split_like_a_posix_shell(tpl):
    """The real /bin/sh is the reference (shlex differs: it keeps the backslash of \\$ in "...")."""
    literal = tpl.replace("{{", "{").replace("}}", "}").replace("\n", " ")  # line breaks: spaces
    words = run(["/bin/sh", "-c", f"printf '%s\\0' {literal}"], Path("."), split="\0")
    assert render(tpl) == words


# -- optional blocks and escapes -------------------------------------------------------------
def test_optional_blocks_drop_or_lose_their_brackets():
    tpl = "run [--a {inputs.a}] [--ab {inputs.a} {inputs.b}] [--const] [--t={inputs.table}]"
    assert render(tpl) == ["run", "--const"]
    assert render(tpl, {"a": "1"}) == ["run", "--a", "1", "--const"]
    assert render(tpl, {"a": "1", "b": "2", "table": "/t"}) == [
        "run", "--a", "1", "--ab", "1", "2", "--const", "--t=/t"
    ]  # fmt: skip


def test_a_required_input_inside_a_block_drops_the_block():
    assert render("run [--name {inputs.name}]") == ["run"]


def test_an_optional_input_outside_a_block_renders_as_nothing():
    assert render("run {inputs.a} --x={inputs.a}") == ["run", "--x="]


def test_escapes_give_literal_brackets_and_braces():
    tpl = "run [[0,1]] {{inputs.name}} {{{inputs.name}}} a{{b}}c ]]x[[ {lone} }"
    # '[' makes the literal text a glob pattern for a shell, so this one runs under bash
    assert render(tpl, {"name": "N"}) == [
        "bash", "-c", "run [0,1] {inputs.name} {N} a{b}c ]x[ {lone} }"
    ]  # fmt: skip
    assert render("run {{a}} }}{{", {"name": "N"}) == ["run", "{a}", "}{"]


def test_brackets_are_template_syntax_even_inside_quotes():
    assert render("run '[--a {inputs.a}]' '[[x]]'", {"a": "v"})[1:] == ["--a v", "[x]"]


# -- values are never interpreted ------------------------------------------------------------
@pytest.mark.parametrize("value", HOSTILE, ids=repr)
def test_hostile_values_reach_the_program_as_one_argument(value, printer):
    tpl = "{inputs.data} printargs.py --name {inputs.name} --x={inputs.name} '{inputs.name}'"
    argv = render(tpl, {"data": sys.executable, "name": value})
    assert argv[0] == sys.executable
    assert json.loads(run(argv, printer)[0]) == ["--name", value, f"--x={value}", value]
    assert not (printer / "pwned").exists()


@pytest.mark.parametrize("value", HOSTILE, ids=repr)
def test_hostile_values_stay_one_argument_in_the_shell_form(value, printer):
    tpl = (
        "{inputs.data} printargs.py {inputs.name} \"d {inputs.name} q\" 's {inputs.name} q' "
        "$HOME{inputs.name} && echo done; touch {outputs.model} | cat > /dev/null"
    )
    canary = printer / "pwned"
    argv = render(tpl, {"data": sys.executable, "name": value}, {"model": str(printer / "ok")})
    assert argv[:2] == ["bash", "-c"]
    out = run(argv, printer)
    home = subprocess.run(["/bin/sh", "-c", "echo $HOME"], capture_output=True, text=True).stdout
    expected = [value, f"d {value} q", f"s {value} q", home.strip() + value]
    assert json.loads(out[0]) == expected and out[1] == "done"
    assert (printer / "ok").exists() and not canary.exists()


@settings(max_examples=40, deadline=None)
@given(value=st.text(st.characters(blacklist_characters="\x00", blacklist_categories=("Cs",))))
def test_any_text_value_is_one_argument_under_bash(printer_dir, value):
    argv = render(
        "{inputs.data} printargs.py {inputs.name} ; true", {"data": sys.executable, "name": value}
    )
    assert argv[:2] == ["bash", "-c"]
    assert json.loads(run(argv, printer_dir)[0]) == [value]


def test_a_command_that_needs_a_shell_runs_under_bash_as_on_azure(tmp_path):
    # $BASH_VERSION is set by bash only: a POSIX sh (dash) prints an empty value
    (line,) = run(render("echo shell=$BASH_VERSION"), tmp_path)
    assert line.startswith("shell=") and len(line) > len("shell=")


@pytest.mark.parametrize(
    ("tpl", "reason"),
    [("a && b", "&&"), ("a || b", "||"), ("a; b", ";"), ("a | b", "|"), ("a > f", ">"),
     ("a < f", "<"), ("a `b`", "`"), ("a $(b)", "$("), ("a $HOME", "$H"), ('a "$HOME"', "$H"),
     ("a *.csv", "*"), ("a ~/x", "~"), ("a # note", "#"), ("X=1 a", "NAME=value"), ("a &", "&")],
)  # fmt: skip
def test_shell_operators_in_the_template_select_the_shell_form(tpl, reason):
    assert render(tpl)[:2] == ["bash", "-c"]
    assert template._lex(tpl, frozenset()).shell == reason


@pytest.mark.parametrize("tpl", ["a 'x && y' \"p;q\" r\\;s", "a --b=c,d:e@f%g+h", "a x=1"])
def test_quoted_or_harmless_characters_need_no_shell(tpl):
    assert render(tpl)[0] == "a"


# -- errors ----------------------------------------------------------------------------------
def test_missing_required_input_and_output_say_how_to_fix():
    component = make("run {inputs.data} -o {outputs.model} {inputs.name}")
    with pytest.raises(SpecError) as info:
        component.render_command({}, {"model": "/m"})
    assert "input 'data' has no value. Fix: pass --input data=PATH" in str(info.value)
    assert info.value.path == "inputs.data" and info.value.line == 4
    with pytest.raises(
        SpecError, match=re.escape("input 'name' has no value. Fix: pass --input name=VALUE")
    ):
        component.render_command({"data": "/d"}, {"model": "/m"})
    with pytest.raises(
        SpecError, match=re.escape("output 'model' has no value. Fix: pass --output model=PATH")
    ):
        component.render_command({"data": "/d", "name": "n"}, {})


def test_a_nul_character_in_a_value_is_refused():
    with pytest.raises(SpecError, match="input 'name' contains a NUL character"):
        render("run {inputs.name}", {"name": "a\x00b"})


def test_undeclared_placeholders_name_the_closest_declared_one():
    component = make("run {inputs.data}")
    component = replace(component, command_template="run {inputs.dta} {outputs.model}")
    with pytest.raises(
        SpecError,
        match=r"placeholder \{inputs.dta\} names no declared input. Did you mean \{inputs.data\}\?",
    ):
        component.render_command({"data": "/d"}, {"model": "/m"})
    component = replace(component, command_template="run {inputs.model}")
    with pytest.raises(
        SpecError, match=r"'model' is declared under outputs: write \{outputs.model\}"
    ):
        component.render_command({}, {"model": "/m"})


@pytest.mark.parametrize(
    ("tpl", "offset", "text"),
    [("run [--a {inputs.a}", 4, "'[' opens an optional block that is never closed"),
     ("run --a]", 7, "']' closes no optional block. Fix: write ']]'"),
     ("run [--a [x] {inputs.a}]", 9, "optional blocks cannot be nested"),
     ("run {inputs.a --b", 4, "placeholder '{inputs.a' is not closed with '}'"),
     ("run {inputs.}", 4, "placeholder '{inputs.' has no name"),
     ("run {input.a}", 4, "'{input.a}' is not a placeholder. Did you mean {inputs.a}?"),
     ("run 'a b", 4, "the quote ' is never closed"),
     ("run a\\", 5, "a backslash at the end of the text escapes nothing")],
)  # fmt: skip
def test_malformed_templates_raise_with_the_offset(tpl, offset, text):
    with pytest.raises(SpecError) as info:
        placeholders(tpl)
    assert text in str(info.value) and "in the command template" in str(info.value)
    assert info.value.offset == offset


# -- Azure ML v2 -----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("tpl", "v2"),
    [("run  --a {inputs.a}\n  -o {outputs.model}", "run --a ${{inputs.a}} -o ${{outputs.model}}"),
     ("run [--a {inputs.a}] x", "run $[[--a ${{inputs.a}}]] x"),
     ("run [ --a {inputs.a} ]x", "run $[[--a ${{inputs.a}}]] x"),
     ("run[ --a {inputs.a}] x", "run $[[--a ${{inputs.a}}]] x"),
     ("run [--const] [[0]] {{x}}", "run --const [0] {x}"),
     ("run '  two  spaces  ' \"{inputs.a}\"", "run '  two  spaces  ' \"${{inputs.a}}\""),
     ("run [--t={inputs.table}]", "run $[[--t=${{inputs.table}}]]")],
)  # fmt: skip
def test_to_azureml(tpl, v2):
    assert to_azureml(tpl) == v2


def test_to_azureml_leaves_out_unbound_blocks_that_azure_ai_ml_cannot_see_as_optional():
    tpl = (
        "run [--t={inputs.table}] [--a {inputs.a}] [--ab {inputs.a} {inputs.b}] -o {outputs.model}"
    )
    assert to_azureml(tpl, bound=["a"]) == "run $[[--a ${{inputs.a}}]] -o ${{outputs.model}}"
    assert to_azureml(tpl, bound=["a", "b", "table"]) == to_azureml(tpl)


def test_literal_text_that_would_read_as_v2_syntax_is_refused():
    with pytest.raises(SpecError, match="would read as Azure ML v2 syntax"):
        to_azureml("run $[[[[x]]]]")


def test_expand_azureml_follows_azure_rules():
    command = "run $[[--a ${{inputs.a}}]] --n ${{inputs.n}} -o ${{outputs.o}}"
    assert expand_azureml(command, {"n": 3}, {"o": "/o"}) == ["run", "--n", "3", "-o", "/o"]
    # Azure substitutes raw text: a value with a space becomes two words there
    assert expand_azureml(command, {"n": "x y", "a": True}, {"o": "/o"})[1:5] == [
        "--a", "True", "--n", "x"
    ]  # fmt: skip
    assert expand_azureml("a ${{inputs.n}} && b", {"n": 1}, {}) == ["bash", "-c", "a 1 && b"]
    with pytest.raises(SpecError, match=r"\$\{\{inputs.n\}\} has no value"):
        expand_azureml(command, {}, {"o": "/o"})


def test_an_empty_value_is_one_argument_locally_but_vanishes_on_azure():
    """A known difference, kept visible: Azure ML substitutes values without quoting."""
    component = make("run --name {inputs.name} x")
    assert component.render_command({"name": ""}, {}) == ["run", "--name", "", "x"]
    assert expand_azureml(component.azureml_command(), {"name": ""}, {}) == ["run", "--name", "x"]


# -- every public spec -------------------------------------------------------------------------
def spec_values(component, fill: str) -> tuple[dict, dict, dict]:
    """(values for the local run, the same as Azure would see them, outputs).

    ``fill`` "unset": only non-optional inputs; those with a usable default keep it.
    "all": every input. Values carry no spaces and are not empty (Azure does not quote them).
    """
    local: dict = {}
    for name, inp in component.inputs.items():
        if fill == "unset" and inp.optional:
            continue
        if fill == "unset" and inp.default not in (None, ""):
            continue
        if inp.is_data:
            local[name] = f"/mnt/inputs/{name}"
        elif inp.param_type == "boolean":
            local[name] = True
        elif inp.param_type == "enum":
            local[name] = inp.enum[-1]
        elif inp.param_type in ("integer", "number"):
            local[name] = max(inp.min or 0, 7) if inp.param_type == "integer" else 0.25
        else:
            local[name] = f"text_{name}"
    on_azure = {n: i.default for n, i in component.inputs.items() if i.default is not None}
    on_azure.update(local)
    outputs = {name: f"/mnt/outputs/{name}" for name in component.outputs}
    return local, on_azure, outputs


@pytest.mark.filterwarnings("ignore::jupyter_distcomp.errors.SpecWarning")
@pytest.mark.parametrize("fill", ["unset", "all"])
@pytest.mark.parametrize("path", PUBLIC_SPECS, ids=public_spec_ids())
def test_local_argv_equals_azure_expansion_on_public_specs(path, fill):
    component = load_component(path)
    local, on_azure, outputs = spec_values(component, fill)
    argv = component.render_command(local, outputs)
    assert argv == expand_azureml(to_azureml(component.command_template), on_azure, outputs)
    assert len(argv) > 3 and not any("{" in a or "[" in a for a in argv)


@pytest.fixture(scope="module")
def azure_ml():
    return pytest.importorskip("azure.ai.ml")


def validate_with_azure_ml(azure_ml, command: str, component, values: dict, tmp_path) -> None:
    """azure-ai-ml's own client-side validation of a job (raises ValidationException)."""
    inputs = {}
    for name, inp in component.inputs.items():
        value = values.get(name)
        kind = inp.data_type or {"enum": "string"}.get(inp.param_type, inp.param_type)
        if value is None:
            inputs[name] = azure_ml.Input(type=kind, optional=True)
        elif inp.is_data:
            inputs[name] = azure_ml.Input(type=kind, path=f"azureml://datastores/ws/paths/{name}/")
        else:
            inputs[name] = value
    job = azure_ml.command(
        code=str(tmp_path),
        command=command,
        inputs=inputs,
        outputs={name: azure_ml.Output(type="uri_folder") for name in component.outputs},
        environment="azureml:AzureML-Minimal@latest",
        compute="cpu-cluster",
        instance_count=2,
        distribution=azure_ml.MpiDistribution(process_count_per_instance=2),
    )
    assert job._validate().passed
    job._to_job()._validate()


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("fill", ["unset", "all"])
@pytest.mark.parametrize("path", PUBLIC_SPECS, ids=public_spec_ids())
def test_public_specs_pass_azure_ml_validation(azure_ml, path, fill, tmp_path):
    component = load_component(path)
    _, on_azure, _ = spec_values(component, fill)  # command() fills no defaults: pass them
    validate_with_azure_ml(
        azure_ml, to_azureml(component.command_template), component, on_azure, tmp_path
    )


@pytest.mark.filterwarnings("ignore")
def test_azure_ml_validation_rejects_padded_and_equals_blocks(azure_ml, tmp_path):
    """The check above can fail: the forms azure-ai-ml rejects, and how to_azureml avoids them."""
    from azure.ai.ml.exceptions import ValidationException

    component = make("run {inputs.data} [--b={inputs.b}] [--a {inputs.a}] -o {outputs.model}")
    values = {"data": "/d", "name": "n"}
    for bad in (
        "run ${{inputs.data}} $[[ --a ${{inputs.a}} ]]",
        to_azureml(component.command_template),
    ):
        with pytest.raises(ValidationException, match="Inputs to job does not contain"):
            validate_with_azure_ml(azure_ml, bad, component, values, tmp_path)
    bound = [n for n, v in values.items() if v is not None]
    validate_with_azure_ml(
        azure_ml, to_azureml(component.command_template, bound), component, values, tmp_path
    )


def test_rendering_is_cached():
    component = make("run --name {inputs.name} [--a {inputs.a}]")
    template._lex.cache_clear()
    for value in ("x", "y", "z"):
        component.render_command({"name": value}, {})
    assert template._lex.cache_info().hits == 2
