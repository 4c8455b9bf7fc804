"""The spec model: every public spec loads and matches its file; each error points at its line."""

from __future__ import annotations

import io
import warnings
from pathlib import Path

import pytest
import yaml

from jupyter_distcomp import SpecError, SpecWarning, load_component
from jupyter_distcomp.core.values import coerce_value

from .conftest import PUBLIC_SPECS, public_spec_ids

PARAM = {
    "string": "string",
    "integer": "integer",
    "int": "integer",
    "float": "number",
    "number": "number",
    "boolean": "boolean",
    "enum": "enum",
}


@pytest.mark.parametrize("path", PUBLIC_SPECS, ids=public_spec_ids())
def test_public_spec_model_matches_file(path: Path):
    raw = yaml.safe_load(path.read_text())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SpecWarning)
        component = load_component(path)

    assert component.name == raw["name"]
    assert component.version == str(raw["version"])
    assert component.display_name == raw.get("display_name")
    assert component.description == raw.get("description")
    assert component.type == raw["type"].split("@")[0]
    assert component.tags == raw.get("tags", {})
    assert component.base_dir == path.parent.resolve()
    if "launcher" in raw:
        assert component.launcher.type == raw["launcher"]["type"].lower()
        assert component.command_template == raw["launcher"]["additional_arguments"]
    else:
        assert component.launcher is None
        assert component.command_template == raw["command"]

    assert list(component.inputs) == list(raw.get("inputs") or {})
    for name, spec in (raw.get("inputs") or {}).items():
        inp = component.inputs[name]
        written = spec["type"]
        assert inp.type == (tuple(written) if isinstance(written, list) else written)
        assert inp.param_type == (
            PARAM.get(written.lower()) if isinstance(written, str) else None
        ), name
        assert inp.optional == bool(spec.get("optional", False))
        assert inp.description == spec.get("description")
        assert inp.min == spec.get("min") and inp.max == spec.get("max")
        assert inp.enum == (tuple(spec["enum"]) if "enum" in spec else None)
        if "default" in spec and spec["default"] is not None:
            assert inp.default == spec["default"], name
        assert path.read_text().splitlines()[inp.line - 1].strip() == f"{name}:"
    assert list(component.outputs) == list(raw.get("outputs") or {})
    for name, spec in (raw.get("outputs") or {}).items():
        assert component.outputs[name].type == spec["type"]

    env = raw.get("environment", {})
    if "name" in env:
        assert component.environment.name == env["name"]
    if "docker" in env:
        assert component.environment.dockerfile == env["docker"]["build"]["dockerfile"][5:]
    if "conda" in env and "conda_dependencies_file" in env["conda"]:
        assert component.environment.conda_file == env["conda"]["conda_dependencies_file"]
    assert component.environment.os == env.get("os", "Linux")


def test_sources_text_path_and_open_file(tmp_path: Path):
    path = PUBLIC_SPECS[0]
    text = path.read_text()
    from_text = load_component(text)
    from_path = load_component(str(path))
    with open(path) as handle:
        from_file = load_component(handle)
    assert from_text.name == from_path.name == from_file.name
    assert from_file.base_dir == path.parent.resolve()
    assert load_component(io.StringIO(text)).inputs.keys() == from_text.inputs.keys()
    with pytest.raises(SpecError, match="not found"):
        load_component(str(tmp_path / "missing.yaml"))


def test_legacy_label_int_alias_and_warnings():
    legacy = next(p for p in PUBLIC_SPECS if "legacy" in p.name)
    assert load_component(legacy).type == "DistributedComponent"
    tune = next(p for p in PUBLIC_SPECS if "ray_tune" in p.name)
    with pytest.warns(SpecWarning, match=r"line 156.*'Int' is a legacy alias"):
        component = load_component(tune)
    assert component.inputs["lightgbm_ray_actors"].param_type == "integer"


V2 = """\
$schema: https://azuremlschemas.azureedge.net/latest/commandComponent.schema.json
name: train_ddp
type: command
version: 3
inputs:
  data: {type: uri_folder}
  epochs: {type: integer, default: 2, min: 1}
  lr: {type: number, optional: true}
outputs:
  model: {type: uri_folder}
code: ./src
environment: azureml:AzureML-acpt-pytorch-2.2-cuda12.1@latest
command: >-
  python train.py --data ${{inputs.data}} --epochs ${{inputs.epochs}}
  $[[--lr ${{inputs.lr}}]] --out ${{outputs.model}}
distribution:
  type: pytorch
  process_count_per_instance: 4
resources:
  instance_count: 2
"""


def test_v2_command_component_with_distribution():
    component = load_component(V2)
    assert component.type == "DistributedComponent"
    assert component.spec_format == "v2"
    assert component.launcher.type == "torch.distributed"
    assert component.inputs["data"].is_data and component.inputs["data"].data_type == "uri_folder"
    assert component.inputs["epochs"].param_type == "integer"
    assert component.inputs["epochs"].default == 2
    assert component.command_template.split() == [
        "python", "train.py", "--data", "{inputs.data}", "--epochs", "{inputs.epochs}",
        "[--lr", "{inputs.lr}]", "--out", "{outputs.model}",
    ]  # fmt: skip
    layout = component.runsettings.resource_layout
    assert (layout.instance_count, layout.process_count_per_node) == (2, 4)
    assert component.environment.name == "AzureML-acpt-pytorch-2.2-cuda12.1"
    assert component.code == "./src"


def test_v2_without_distribution_is_a_command_component():
    text = V2.split("distribution:")[0]
    component = load_component(text)
    assert component.type == "CommandComponent" and component.launcher is None


@pytest.mark.parametrize(
    ("raw", "normalised"),
    [("mpi", "mpi"), ("MPI", "mpi"), ("torch.distributed", "torch.distributed"),
     ("Pytorch", "torch.distributed"), ("tensorflow", "tensorflow"), ("DeepSpeed", "deepspeed")],
)  # fmt: skip
def test_launcher_types_are_normalised(raw, normalised):
    text = BASE.replace("type: mpi", f"type: {raw}")
    assert load_component(text).launcher.type == normalised


BASE = """\
name: demo
type: DistributedComponent
inputs:
  lr:
    type: Float
    default: 0.1
    min: 0
    max: 1
  data:
    type: path
  mode:
    type: Enum
    enum: [a, b]
    default: a
outputs:
  out:
    type: path
launcher:
  type: mpi
  additional_arguments: >-
    python train.py --data {inputs.data}
    [--lr {inputs.lr}] --out {outputs.out}
"""


# (what to change, expected line, column, path, words the message must contain)
ERRORS = {
    "misspelt input key": (
        ("default: 0.1", "defualt: 0.1"), 6, 5, "inputs.lr.defualt", ["unknown key", "'default'"]
    ),
    "unknown launcher": (
        ("type: mpi", "type: horovod"), 19, 9, "launcher.type", ["horovod", "torch.distributed"]
    ),
    "misspelt launcher": (
        ("type: mpi", "type: torch.distribute"), 19, 9, "launcher.type", ["'torch.distributed'"]
    ),
    "undeclared placeholder": (
        ("{inputs.data}", "{inputs.dta}"), 21, 28, "launcher.additional_arguments",
        ["{inputs.dta}", "{inputs.data}"],
    ),
    "input used as output": (
        ("{outputs.out}", "{inputs.out}"), 22, 30, "launcher.additional_arguments",
        ["declared under outputs", "{outputs.out}"],
    ),
    "default above max": (("default: 0.1", "default: 3"), 6, 14, "inputs.lr.default", ["at most 1"]),
    "default not in enum": (("default: a", "default: c"), 14, 14, "inputs.mode.default", ["one of a, b"]),
    "min above max": (("min: 0", "min: 5"), 7, 10, "inputs.lr.min", ["greater than max", "swap"]),
    "misspelt param type": (("type: Float", "type: Flaot"), 5, 11, "inputs.lr.type", ["'Float'"]),
    "wrong value type": (("default: 0.1", "default: [1]"), 6, 14, "inputs.lr.default", ["got a list"]),
    "duplicate key": (
        ("    type: path\n  mode", "    type: path\n    type: String\n  mode"), 11, 5,
        "inputs.data.type", ["appears twice", "line 10"],
    ),
    "yaml syntax": (("  data:\n", "  data:\n   x: : y\n"), 10, 7, None, ["YAML syntax error"]),
    "tab indentation": (("    type: Float", "\ttype: Float"), 5, 1, None, ["tabs"]),
    "misspelt component type": (
        ("type: DistributedComponent", "type: DistributedComponnt"), 2, 7, "type",
        ["'DistributedComponent'"],
    ),
    "missing launcher": (("launcher:", "launchr:"), 2, 1, "type", ["needs a `launcher:`"]),
    "enum without values": (("    enum: [a, b]\n    default: a\n", ""), 12, 5, "inputs.mode.type", ["no values"]),
    "min on a data input": (("    type: path\n  mode", "    type: path\n    min: 1\n  mode"), 11, 5,
                            "inputs.data.min", ["applies to parameters"]),
    "missing name": (("name: demo\n", ""), 1, 1, None, ["missing required key 'name'"]),
    "bad name": (("name: demo", "name: my demo!"), 1, 7, "name", ["letters, digits", "my_demo_"]),
}  # fmt: skip


@pytest.mark.parametrize("case", list(ERRORS), ids=list(ERRORS))
def test_error_points_at_line_and_column(case):
    (old, new), line, column, path, words = ERRORS[case]
    assert old in BASE
    with pytest.raises(SpecError) as info, warnings.catch_warnings():
        warnings.simplefilter("ignore", SpecWarning)
        load_component(BASE.replace(old, new, 1))
    error = info.value
    assert (error.line, error.column) == (line, column), str(error)
    assert error.path == path
    for word in words:
        assert word in str(error)
    assert f"line {line}" in str(error)


def test_unknown_top_level_key_is_a_warning_with_suggestion():
    with pytest.warns(SpecWarning, match=r"line 23.*'comand'.*Did you mean 'command'"):
        component = load_component(BASE + "comand: x\n")
    assert component.warnings and "comand" in component.warnings[0]


def test_non_mapping_and_empty_specs():
    for text in ("- a\n- b\n", "", "just text"):
        with pytest.raises(SpecError) as info:
            load_component(text)
        assert info.value.line == 1


def test_coerce_value_for_each_parameter_type():
    component = load_component(BASE)
    lr, mode = component.inputs["lr"], component.inputs["mode"]
    assert coerce_value(lr, "0.5") == 0.5
    with pytest.raises(SpecError, match="not a number"):
        coerce_value(lr, "abc")
    with pytest.raises(SpecError, match="at least 0"):
        coerce_value(lr, -1)
    with pytest.raises(SpecError, match="one of a, b"):
        coerce_value(mode, "z")
    assert coerce_value(component.inputs["data"], "/x y") == "/x y"


def test_render_traceback_is_the_message_only():
    with pytest.raises(SpecError) as info:
        load_component(BASE.replace("type: mpi", "type: horovod"))
    lines = info.value._render_traceback_()
    assert lines[0].startswith("SpecError: line 19, column 9")
    assert not any("Traceback" in line or ".py" in line for line in lines)


def test_shipped_schema_is_valid_and_accepts_every_public_spec():
    import jsonschema

    from jupyter_distcomp.core.spec_parsing import SCHEMA_PATH, schema

    assert SCHEMA_PATH.is_file()
    jsonschema.Draft7Validator.check_schema(schema())
    validator = jsonschema.Draft7Validator(schema())
    for path in PUBLIC_SPECS:
        assert not list(validator.iter_errors(yaml.safe_load(path.read_text()))), path.name
    bad = yaml.safe_load(BASE.replace("default: 0.1", "defualt: 0.1"))
    assert [e.validator for e in validator.iter_errors(bad)] == ["additionalProperties"]
