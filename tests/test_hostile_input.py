"""Input a hostile or careless user can give ends in a SpecError / LayoutError / RankError that
says where, never in a crash, a RecursionError, a MemoryError or a bare ValueError."""

from __future__ import annotations

from pathlib import Path

import pytest

from jupyter_distcomp.core.ranges import parse_ranks
from jupyter_distcomp.core.spec_parsing import load_component
from jupyter_distcomp.errors import LayoutError, RankError, SpecError

V15 = """\
name: hostile
type: DistributedComponent
inputs:
  x: {type: String, optional: true}
  n: {type: Integer, default: 1}
  data: {type: path, optional: true}
outputs:
  o: {type: path}
launcher:
  type: mpi
  additional_arguments: TEMPLATE
"""
V2 = """\
name: hostile
type: command
inputs:
  x: {type: string, optional: true}
command: TEMPLATE
distribution:
  type: mpi
  process_count_per_instance: 2
resources:
  instance_count: 1
"""
BOMB = "".join(
    f"  {name}: &{name} [{', '.join([f'*{prev}' if prev else 'lol'] * 9)}]\n"
    for prev, name in zip(["", *"abcdefgh"], "abcdefghi", strict=True)
)


def v15(template: str) -> str:
    return V15.replace("TEMPLATE", template)


def bomb_under(key_line: str) -> str:
    """A billion-laughs bomb whose anchors sit under an ignored key, used by ``key_line``."""
    return f"x-anchors:\n{BOMB}" + key_line


def raises_at(text: str, line: int, column: int | None = None) -> SpecError:
    with pytest.raises(SpecError) as raised:
        load_component(text)
    error = raised.value
    assert (error.line, error.column if column else None) == (line, column), str(error)
    return error


@pytest.mark.parametrize("depth", [5_000, 30_000])
def test_deep_nesting_is_refused_at_its_line(depth):
    text = "name: a\ntype: command\ncommand: python x\ntags: " + "[" * depth + "\n"
    error = raises_at(text, 4)
    assert "levels deep" in error.message


@pytest.mark.parametrize(
    "use",
    [
        "name: *i\n",
        "description: *i\n",
        "inputs:\n  x: {type: String, default: *i}\n",
        "additional_includes: *i\n",
    ],
)
def test_an_alias_bomb_is_refused_before_it_expands(use):
    error = raises_at(bomb_under(use) + "type: command\ncommand: python x\n", 6, 10)
    assert "*d" in error.message and "expand" in error.message


def test_a_small_alias_bomb_under_a_typed_key_gets_a_short_message():
    small = "x-a:\n  a: &a [" + ", ".join(["lolololol"] * 3000) + "]\n"
    error = raises_at(small + "name: hostile\ndescription: *a\ntype: command\ncommand: x\n", 4)
    assert len(str(error)) < 400, str(error)


def test_a_number_longer_than_python_converts():
    error = raises_at(v15("python a.py").replace("default: 1", "default: " + "9" * 5000), 5, 31)
    assert "5,000 digits" in error.message and "quote" in error.message


def test_a_lone_surrogate_is_not_text():
    error = raises_at(v15("python a.py").replace("optional: true}", "optional: true} \ud800", 1), 4)
    assert "surrogate" in error.message


@pytest.mark.parametrize(
    ("template", "line", "column", "says"),
    [
        ("python a.py [--x {inputs.x}", 11, 37, "never closed"),
        ("python a.py --x {inputs.x}]", 11, 51, "closes no optional block"),
        ("python a.py [--x [{inputs.x}]]", 11, 42, "cannot be nested"),
        ("python a.py --x {inputs.x", 11, 41, "not closed"),
        ("python a.py --x {input.x}", 11, 41, "Did you mean {inputs.x}"),
        ("python a.py '--x {inputs.x}", 11, 37, "quote"),
        ("python a.py --x {inputs. x}", 11, 41, "has no name"),
        ("python a.py [--x {inputs.x}] --y {inputs.x}]", 11, 68, "closes no optional block"),
        (">-\n    python a.py [--x {inputs.x}]\n    [--x {inputs.x}", 13, 5, "never closed"),
    ],
)
def test_a_broken_template_is_refused_at_its_line_and_column(template, line, column, says):
    error = raises_at(v15(template), line, column)
    assert says in error.message and error.path == "launcher.additional_arguments"


@pytest.mark.parametrize(
    ("template", "column", "says"),
    [
        ("python a.py $[[--x ${{inputs.x}}", 22, "'$[[' opens an optional block"),
        ("python a.py $[[--x ${{inputs.x}}]] $[[--y", 45, "'$[[' opens an optional block"),
        ("python a.py ${{inputs.x}", 22, "never closed"),
        ("python a.py ${{inputs. x}}", 22, "is not a placeholder"),
        ("python a.py ${{input.x}}", 22, "is not a placeholder"),
    ],
)
def test_a_broken_v2_command_is_refused_in_its_own_syntax(template, column, says):
    error = raises_at(V2.replace("TEMPLATE", template), 5, column)
    assert says in error.message


def test_a_huge_layout_is_refused_at_its_key():
    huge = V2.replace("TEMPLATE", "python a.py").replace(
        "process_count_per_instance: 2", "process_count_per_instance: 100000000000"
    )
    error = raises_at(huge, 8, 31)
    assert "at most" in error.message and error.path == "distribution.process_count_per_instance"
    wide = V2.replace("TEMPLATE", "python a.py").replace(
        "process_count_per_instance: 2", "process_count_per_instance: 1000"
    )
    error = raises_at(wide.replace("instance_count: 1", "instance_count: 1000"), 10)
    assert "1,000,000 ranks" in error.message


def test_a_huge_layout_is_refused_from_python():
    component = load_component(v15("python a.py"))
    layout = component.runsettings.resource_layout
    with pytest.raises(LayoutError, match="process_count_per_node must be at most"):
        layout.configure(process_count_per_node=100_000_000_000)
    with pytest.raises(LayoutError, match="ranks; a layout has at most"):
        layout.configure(instance_count=1000, process_count_per_node=1000)
    layout.configure(instance_count=1000)
    with pytest.raises(LayoutError, match="ranks; a layout has at most"):
        layout.process_count_per_node = 1000
    assert layout.world_size == 1000


def test_a_huge_rank_range_is_refused_without_building_it():
    with pytest.raises(RankError, match="ranks 4-10000000000 outside the world of 4"):
        parse_ranks("0-10000000000", 4)


@pytest.mark.parametrize(
    ("extra", "line", "says"),
    [
        ('environment_variables:\n  A: "a\\0b"\n', 13, "NUL"),
        ('environment_variables:\n  "A=B": x\n', 13, "cannot be the name"),
        ("environment: {docker: 5}\n", 12, "environment.docker must be a mapping, got a number 5"),
        ("environment: 5\n", 12, "environment must be a string or a mapping"),
    ],
)
def test_environment_mistakes_name_the_key(extra, line, says):
    error = raises_at(v15("python a.py") + extra, line)
    assert says in error.message
    assert "an a " not in error.message


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("a" * 200_000, "200,000 bytes long"),
        ("a\0b", "NUL"),
        (b"abc", "not a bytes"),
        (["a", "b"], "not a list"),
        (10**5000, "more than 4,300 digits"),
    ],
    ids=["200KB", "NUL", "bytes", "list", "5000 digits"],
)
def test_a_value_no_program_can_take_names_the_input(value, says, tmp_path: Path):
    from jupyter_distcomp.core.bindings import local_inputs

    component = load_component(v15("python a.py [--x {inputs.x}] --n {inputs.n}"))
    name = "n" if isinstance(value, int) else "x"
    with pytest.raises(SpecError) as raised:
        local_inputs(component, {name: value}, tmp_path)
    assert f"input '{name}'" in str(raised.value) and says in str(raised.value)
    assert raised.value.path == f"inputs.{name}"


@pytest.mark.parametrize(("value", "says"), [("a\0b", "NUL"), (["a"], "a list")])
def test_a_data_path_no_program_can_take_names_the_input(value, says, tmp_path: Path):
    from jupyter_distcomp.core.bindings import local_inputs

    component = load_component(v15("python a.py [--d {inputs.data}]"))
    with pytest.raises(SpecError, match=f"'data'.*{says}|{says}.*'data'"):
        local_inputs(component, {"data": value}, tmp_path)


def test_magic_arguments_are_not_expanded_from_python_variables(ip, tmp_path, monkeypatch):
    from IPython.utils.capture import capture_output

    monkeypatch.chdir(tmp_path)
    ip.run_cell(f"%%distcomp hostile\n{v15('python a.py [--x {inputs.x}]')}")
    ip.user_ns.update(target="hostile", secret="s3cret-value")
    for line in ("%distcomp env {target}", "%distcomp env $target"):
        with capture_output():
            result = ip.run_cell(line)
        assert not result.success
        assert "No component named" in str(result.error_in_exec), line
    with capture_output():
        result = ip.run_cell("%distcomp export hostile job.yml --input 'x={secret}'")
    assert result.success, result.error_in_exec
    exported = (tmp_path / "job.yml").read_text()
    assert "{secret}" in exported and "s3cret-value" not in exported


@pytest.mark.parametrize(
    ("value", "says"),
    [("a" * 200_000, "200,000 bytes long"), (b"abc", "not a bytes"), (["a", "b"], "not a list")],
    ids=["200KB", "bytes", "list"],
)
def test_render_command_refuses_a_value_no_program_can_take(value, says):
    component = load_component(v15("python a.py [--x {inputs.x}]"))
    with pytest.raises(SpecError) as raised:
        component.render_command({"x": value})
    assert raised.value.path == "inputs.x" and says in raised.value.message
