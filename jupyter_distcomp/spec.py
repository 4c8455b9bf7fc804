"""YAML text -> :class:`~jupyter_distcomp.model.Component`, or a SpecError that points at the line.

Reads v1.5 ``DistributedComponent`` / ``CommandComponent`` specs and v2 command components with
a ``distribution:`` section into one model. Validation is the shipped JSON Schema (the
JupyterLab extension reads the same file) plus the checks a schema cannot express. Every
problem is reported with the 1-based line and column of the key or value concerned.
"""

from __future__ import annotations

import functools
import io
import json
import os
import re
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import yaml

from .errors import SpecError, SpecWarning, closest, did_you_mean
from .model import Component, Environment, Input, Launcher, Output
from .positions import DuplicateKey as _DuplicateKey
from .positions import Positions, compose_positions
from .settings import LAUNCHERS

SCHEMA_PATH = Path(__file__).parent / "schema" / "component.schema.json"

LAUNCHER_ALIASES = {
    "mpi": "mpi",
    "torch.distributed": "torch.distributed",
    "pytorch": "torch.distributed",
    "tensorflow": "tensorflow",
    "deepspeed": "deepspeed",
}
V2_DISTRIBUTIONS = {"mpi": "mpi", "pytorch": "torch.distributed", "tensorflow": "tensorflow"}
PARAM_TYPES = {
    "string": "string",
    "str": "string",
    "integer": "integer",
    "int": "integer",
    "float": "number",
    "number": "number",
    "double": "number",
    "boolean": "boolean",
    "bool": "boolean",
    "enum": "enum",
}
PARAM_TYPE_NAMES = ("String", "Integer", "Float", "Boolean", "Enum", "Number")
V2_PORT_TYPES = {
    "uri_folder",
    "uri_file",
    "mltable",
    "mlflow_model",
    "custom_model",
    "triton_model",
}
_PLACEHOLDER = re.compile(r"(?<!\{)\{(inputs|outputs)\.([^{}\s]*)\}(?!\})")
_V2_PLACEHOLDER = re.compile(r"\$\{\{\s*(inputs|outputs)\.([A-Za-z0-9_]+)\s*\}\}")


@functools.lru_cache(maxsize=1)
def schema() -> dict:
    """The JSON Schema of a spec, as shipped in the package."""
    return json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))


@functools.lru_cache(maxsize=1)
def _fast_check():
    """A compiled validator (fastjsonschema) for the common case: a spec that is valid."""
    import fastjsonschema

    return fastjsonschema.compile(schema())


@functools.lru_cache(maxsize=1)
def _validator():
    """jsonschema's validator, used only to explain a failure: it lists every error."""
    import jsonschema

    cls = jsonschema.validators.validator_for(schema())
    return cls(schema())


@dataclass
class _Ctx:
    """What the builder needs to point at a place in the text."""

    pos: Positions
    source_name: str | None
    warnings: list[str]

    def error(self, message: str, path: tuple, *, at: str = "key") -> SpecError:
        line, column = self.pos.locate(path, at=at)
        return SpecError(
            message,
            line=line,
            column=column,
            path=".".join(str(p) for p in path) or None,
            source_name=self.source_name,
        )

    def warn(self, message: str, path: tuple) -> None:
        line, _ = self.pos.locate(path)
        where = f"line {line}, " if line else ""
        text = f"{where}key '{'.'.join(map(str, path))}': {message}"
        self.warnings.append(text)
        warnings.warn(SpecWarning(text), stacklevel=4)


# -- entry point ----------------------------------------------------------------------------
def load_component(
    source: str | os.PathLike | IO[str],
    base_dir: str | os.PathLike | None = None,
    source_name: str | None = None,
) -> Component:
    """Load a component from YAML text, a path to a YAML file, or an open file.

    ``base_dir`` is where relative paths in the spec (``code``, Dockerfiles) start from:
    the spec file's folder by default, else the current folder.
    """
    text, origin = _read(source)
    if base_dir is None:
        base_dir = origin.parent if origin else Path.cwd()
    if source_name is None and origin is not None:
        source_name = str(origin)
    data, pos = _parse(text, source_name)
    ctx = _Ctx(pos, source_name, [])
    _validate_schema(data, ctx)
    component = _build(data, ctx, text, Path(base_dir))
    return component


def _read(source: Any) -> tuple[str, Path | None]:
    if isinstance(source, io.IOBase) or hasattr(source, "read"):
        name = getattr(source, "name", None)
        return source.read(), Path(name).resolve() if isinstance(name, str) else None
    if isinstance(source, os.PathLike):
        path = Path(source)
        return path.read_text(encoding="utf-8"), path.resolve()
    if isinstance(source, str):
        if "\n" not in source and source.strip().lower().endswith((".yaml", ".yml")):
            path = Path(source).expanduser()
            if not path.is_file():
                raise SpecError(
                    f"spec file {source!r} not found. Fix: check the path "
                    f"(relative paths start at {Path.cwd()})."
                )
            return path.read_text(encoding="utf-8"), path.resolve()
        return source, None
    raise SpecError(
        f"load_component takes YAML text, a path or an open file, not {type(source).__name__}."
    )


def _parse(text: str, source_name: str | None) -> tuple[dict, Positions]:
    try:
        data, pos = compose_positions(text)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        problem = exc.problem or "invalid YAML"
        context = f" ({exc.context})" if exc.context else ""
        line_text = (
            text.splitlines()[mark.line] if mark and mark.line < len(text.splitlines()) else ""
        )
        hint = " Fix: indent with spaces, not tabs." if "\t" in line_text else _yaml_hint(problem)
        raise SpecError(
            f"YAML syntax error: {problem}{context}.{hint}",
            line=mark.line + 1 if mark else None,
            column=mark.column + 1 if mark else None,
            source_name=source_name,
        ) from None
    except yaml.reader.ReaderError as exc:
        index = exc.position
        raise SpecError(
            f"character {exc.character!r} is not allowed in YAML ({exc.reason}). "
            "Fix: delete it or put the value in quotes with an escape.",
            line=text.count("\n", 0, index) + 1,
            column=index - (text.rfind("\n", 0, index) + 1) + 1,
            source_name=source_name,
        ) from None
    except yaml.YAMLError as exc:
        raise SpecError(f"YAML syntax error: {exc}", line=1, source_name=source_name) from None
    except _DuplicateKey as exc:
        raise SpecError(
            f"key '{exc.key}' appears twice in the same mapping (first on line {exc.first_line})."
            " Fix: keep one of them.",
            line=exc.line,
            column=exc.column,
            path=exc.path,
            source_name=source_name,
        ) from None
    if data is None:
        raise SpecError(
            "the spec is empty. Fix: write a component spec (name, type, inputs, outputs, "
            "launcher or command).",
            line=1,
            column=1,
            source_name=source_name,
        )
    if not isinstance(data, dict):
        raise SpecError(
            f"a spec must be a YAML mapping of keys (name:, type:, ...), not a {_kind(data)}.",
            line=1,
            column=1,
            source_name=source_name,
        )
    return data, pos


def _yaml_hint(problem: str) -> str:
    if "mapping values are not allowed" in problem:
        return " Fix: check the indentation, or quote a value that contains ': '."
    if "could not find expected ':'" in problem or "expected <block end>" in problem:
        return " Fix: check the indentation of this line against the lines above."
    return ""


def _kind(value: Any) -> str:
    return {list: "list", str: "string", int: "number", float: "number", bool: "boolean"}.get(
        type(value), type(value).__name__
    )


# -- schema ---------------------------------------------------------------------------------
def _validate_schema(data: dict, ctx: _Ctx) -> None:
    known = schema()["properties"]
    for key in data:
        if key not in known:
            ctx.warn(f"unknown top-level key, ignored.{did_you_mean(str(key), known)}", (str(key),))
    import fastjsonschema

    try:
        _fast_check()(data)
        return
    except fastjsonschema.JsonSchemaException:
        pass
    errors = list(_validator().iter_errors(data))
    if not errors:
        return
    located = [(_describe(e, ctx), e) for e in errors]
    located.sort(key=lambda item: (item[0].line or 0, item[0].column or 0))
    first = located[0][0]
    if len(located) > 1:
        others = "; ".join(f"line {e.line}: {e.message}" for e, _ in located[1:4])
        more = f" (+{len(located) - 4} more)" if len(located) > 4 else ""
        first = SpecError(
            f"{first.message}\nAlso: {others}{more}",
            line=first.line,
            column=first.column,
            path=first.path,
            source_name=ctx.source_name,
        )
    raise first


def _describe(error: Any, ctx: _Ctx) -> SpecError:
    """Turn a jsonschema error into a message that says what, where and the fix."""
    path = tuple(error.absolute_path)
    validator = error.validator
    where = ".".join(map(str, path)) or "the spec"
    if validator == "additionalProperties":
        allowed = list(error.schema.get("properties", {}))
        extra = [k for k in error.instance if k not in allowed]
        key = extra[0]
        return ctx.error(
            f"unknown key '{key}' in {where}.{did_you_mean(key, allowed)}"
            f" Allowed keys: {', '.join(allowed)}.",
            (*path, key),
        )
    if validator == "required":
        missing = [k for k in error.validator_value if k not in error.instance]
        key = missing[0]
        example = {"name": "my_component", "type": "DistributedComponent"}.get(key, "...")
        return ctx.error(
            f"missing required key '{key}' in {where}. Fix: add `{key}: {example}`.", path
        )
    if validator == "enum":
        options = list(dict.fromkeys(str(o).lower() for o in error.validator_value))
        if path[-1:] == ("type",) and "torch.distributed" in options:
            options = [o for o in options if o != "pytorch"]  # suggest the canonical name
        return ctx.error(
            f"{error.instance!r} is not allowed for {where}."
            f"{did_you_mean(str(error.instance), options)} Allowed: {', '.join(options)}.",
            path,
            at="value",
        )
    if validator in ("type", "oneOf", "anyOf"):
        expected = error.schema.get("type")
        if validator != "type":
            expected = "a string or a list of strings"
        elif isinstance(expected, list):
            expected = " or ".join(t for t in expected if t != "null")
        return ctx.error(
            f"{where} must be {_article(expected)}, got {_kind(error.instance)} "
            f"{_short(error.instance)}.",
            path,
            at="value",
        )
    if validator == "pattern" and path and path[-1] == "type":
        return ctx.error(
            f"unknown component type {error.instance!r}."
            f"{did_you_mean(str(error.instance).split('@')[0], ['DistributedComponent', 'CommandComponent', 'command'])}"
            " Use DistributedComponent (with a launcher), CommandComponent (with a command),"
            " or v2 'command' (with an optional distribution).",
            path,
            at="value",
        )
    if validator == "pattern" and path == ("name",):
        return ctx.error(
            f"name {error.instance!r} may only contain letters, digits and '-', '_', '.'. "
            f"Fix: name: {re.sub(r'[^A-Za-z0-9_.-]+', '_', str(error.instance)) or 'component'}",
            path,
            at="value",
        )
    if validator in ("minimum", "minLength", "minItems"):
        return ctx.error(f"{where}: {error.message}.", path, at="value")
    return ctx.error(f"{where}: {error.message}", path, at="value")


def _article(noun: Any) -> str:
    noun = str(noun)
    return ("an " if noun[:1] in "aeiou" else "a ") + noun


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


# -- model ----------------------------------------------------------------------------------
def _build(data: dict, ctx: _Ctx, text: str, base_dir: Path) -> Component:
    raw_type = str(data["type"]).split("@")[0]
    distribution = data.get("distribution")
    is_v2 = raw_type.lower() == "command"
    launcher = None
    if is_v2:
        template = _v2_template(data.get("command"), ctx)
        if distribution:
            kind = V2_DISTRIBUTIONS[str(distribution["type"]).lower()]
            launcher = Launcher(kind, template, str(distribution["type"]))
        comp_type = "DistributedComponent" if launcher else "CommandComponent"
    elif raw_type.lower() in ("commandcomponent",):
        comp_type = "CommandComponent"
        if "command" not in data:
            raise ctx.error(
                "a CommandComponent needs a `command:` (the command template). "
                "Fix: add `command: python script.py --arg {inputs.x}`.",
                ("type",),
            )
        template = data["command"]
        if "launcher" in data:
            raise ctx.error(
                "a CommandComponent runs one process and takes no launcher. "
                "Fix: use `type: DistributedComponent`, or remove the launcher.",
                ("launcher",),
            )
    else:
        comp_type = "DistributedComponent"
        if "launcher" not in data:
            hint = (
                " (move `command:` into launcher.additional_arguments)" if "command" in data else ""
            )
            raise ctx.error(
                "a DistributedComponent needs a `launcher:` with `type` (mpi, torch.distributed,"
                f" tensorflow or deepspeed) and `additional_arguments` (the command){hint}.",
                ("type",),
            )
        section = data["launcher"]
        raw_launcher = str(section["type"])
        kind = LAUNCHER_ALIASES.get(raw_launcher.lower())
        if kind is None:
            raise ctx.error(
                f"unknown launcher type {raw_launcher!r}.{did_you_mean(raw_launcher, LAUNCHERS)}"
                f" Use one of: {', '.join(LAUNCHERS)}.",
                ("launcher", "type"),
                at="value",
            )
        template = section["additional_arguments"]
        launcher = Launcher(kind, template, raw_launcher)
    if is_v2 and data.get("command") is None:
        raise ctx.error(
            "a v2 command component needs `command:`. Fix: add `command: python train.py ...`.",
            ("type",),
        )

    inputs = {
        str(name): _input(str(name), spec, ctx, is_v2)
        for name, spec in (data.get("inputs") or {}).items()
    }
    outputs = {
        str(name): _output(str(name), spec, ctx)
        for name, spec in (data.get("outputs") or {}).items()
    }
    template_key = ("launcher", "additional_arguments") if "launcher" in data else ("command",)
    _check_placeholders(template, inputs, outputs, ctx, template_key, text)

    component = Component(
        name=str(data["name"]),
        version=None if data.get("version") is None else str(data["version"]),
        display_name=data.get("display_name"),
        description=data.get("description"),
        type=comp_type,
        inputs=inputs,
        outputs=outputs,
        launcher=launcher,
        environment=_environment(data.get("environment")),
        code=data.get("code"),
        command_template=template,
        tags=dict(data.get("tags") or {}),
        is_deterministic=data.get("is_deterministic"),
        successful_return_code=data.get("successful_return_code"),
        environment_variables={
            str(k): str(v) for k, v in (data.get("environment_variables") or {}).items()
        },
        schema=data.get("$schema"),
        spec_format="v2" if is_v2 else "v1.5",
        source=text,
        base_dir=base_dir,
        warnings=tuple(ctx.warnings),
    )
    layout = component.runsettings.resource_layout
    if is_v2:
        resources = data.get("resources") or {}
        layout.configure(
            instance_count=resources.get("instance_count"),
            process_count_per_node=(distribution or {}).get("process_count_per_instance"),
            worker_count=(distribution or {}).get("worker_count"),
            parameter_server_count=(distribution or {}).get("parameter_server_count"),
        )
    return component


def _param_type(name: str, type_value: Any, ctx: _Ctx, is_v2: bool) -> str | None:
    if isinstance(type_value, list):
        return None
    lowered = str(type_value).lower()
    if lowered in PARAM_TYPES:
        if lowered == "int" and not is_v2:
            ctx.warn("type 'Int' is a legacy alias; write 'Integer'.", ("inputs", name, "type"))
        return PARAM_TYPES[lowered]
    if lowered in V2_PORT_TYPES or lowered.endswith(("directory", "file", "folder", "path")):
        return None
    guess = closest(str(type_value), PARAM_TYPE_NAMES, cutoff=0.75)
    if guess:
        raise ctx.error(
            f"unknown input type {type_value!r}. Did you mean '{guess}'? Parameter types are "
            f"{', '.join(PARAM_TYPE_NAMES)}; any other name (path, AnyDirectory, AnyFile, ...) "
            "is a data input.",
            ("inputs", name, "type"),
            at="value",
        )
    return None


def _input(name: str, spec: dict, ctx: _Ctx, is_v2: bool) -> Input:
    path = ("inputs", name)
    if spec is None or not isinstance(spec, dict):
        raise ctx.error(
            f"input '{name}' must be a mapping with at least `type:`. Fix: `{name}: {{type: String}}`.",
            path,
        )
    type_value = spec["type"]
    param = _param_type(name, type_value, ctx, is_v2)
    enum = spec.get("enum", spec.get("enum_values"))
    if enum is not None:
        enum = tuple(str(v) for v in enum)
    minimum, maximum, default = spec.get("min"), spec.get("max"), spec.get("default")
    if param is None:
        for key in ("min", "max", "enum"):
            if spec.get(key) is not None:
                raise ctx.error(
                    f"'{key}' applies to parameters, but input '{name}' has data type "
                    f"{type_value!r}. Fix: remove '{key}', or use a parameter type "
                    "(Integer, Float, Enum).",
                    (*path, key),
                )
    else:
        if (minimum is not None or maximum is not None) and param not in ("integer", "number"):
            key = "min" if minimum is not None else "max"
            raise ctx.error(
                f"'{key}' applies to Integer and Float inputs, not {type_value!r}. "
                f"Fix: remove '{key}' or change the type.",
                (*path, key),
            )
        if minimum is not None and maximum is not None and minimum > maximum:
            raise ctx.error(
                f"min ({minimum}) is greater than max ({maximum}) for input '{name}'. "
                "Fix: swap them.",
                (*path, "min"),
                at="value",
            )
        if param == "enum" and not enum:
            raise ctx.error(
                f"Enum input '{name}' lists no values. Fix: add `enum: [a, b]`.", (*path, "type")
            )
        if default is not None:
            probe = Input(name, type_value, param, min=minimum, max=maximum, enum=enum)
            try:
                default = coerce_value(probe, default)
            except SpecError as exc:
                raise ctx.error(
                    f"default {default!r}: {exc.message}", (*path, "default"), at="value"
                )
    line, _ = ctx.pos.locate(path)
    return Input(
        name=name,
        type=tuple(type_value) if isinstance(type_value, list) else str(type_value),
        param_type=param,
        optional=bool(spec.get("optional", False)),
        default=default,
        description=spec.get("description"),
        min=minimum,
        max=maximum,
        enum=enum,
        is_control=bool(spec.get("is_control", False)),
        line=line,
    )


def _output(name: str, spec: dict, ctx: _Ctx) -> Output:
    path = ("outputs", name)
    if spec is None or not isinstance(spec, dict):
        raise ctx.error(
            f"output '{name}' must be a mapping with `type:`. Fix: `{name}: {{type: AnyDirectory}}`.",
            path,
        )
    type_value = spec["type"]
    line, _ = ctx.pos.locate(path)
    return Output(
        name=name,
        type=tuple(type_value) if isinstance(type_value, list) else str(type_value),
        description=spec.get("description"),
        is_link_mode=spec.get("is_link_mode"),
        datastore_mode=spec.get("datastore_mode"),
        optional=bool(spec.get("optional", False)),
        line=line,
    )


def coerce_value(inp: Input, value: Any) -> Any:
    """Check (and, for strings from a command line or a text box, convert) one input value.

    Raises SpecError saying what is wrong and what would be accepted.
    """
    if value is None or inp.is_data:
        return value
    kind = inp.param_type
    if kind == "boolean":
        if isinstance(value, bool):
            return value
        text = str(value).strip().lower()
        if text in ("true", "1", "yes"):
            return True
        if text in ("false", "0", "no"):
            return False
        raise SpecError(f"input '{inp.name}' is Boolean: use True or False, not {value!r}.")
    if kind in ("integer", "number"):
        if isinstance(value, bool):
            raise SpecError(f"input '{inp.name}' is {kind}: got a boolean {value!r}.")
        try:
            if kind == "integer":
                number = value if isinstance(value, int) else _to_int(value)
            else:
                number = value if isinstance(value, (int, float)) else float(str(value).strip())
        except ValueError:
            example = "3" if kind == "integer" else "0.01"
            raise SpecError(
                f"input '{inp.name}' is {'Integer' if kind == 'integer' else 'Float'}: "
                f"{value!r} is not a number. Fix: give a value such as {example}."
            ) from None
        if inp.min is not None and number < inp.min:
            raise SpecError(f"input '{inp.name}' must be at least {inp.min}, got {number}.")
        if inp.max is not None and number > inp.max:
            raise SpecError(f"input '{inp.name}' must be at most {inp.max}, got {number}.")
        return number
    if kind == "enum":
        text = str(value)
        if inp.enum and text not in inp.enum:
            raise SpecError(
                f"input '{inp.name}' must be one of {', '.join(inp.enum)}; got {text!r}."
                f"{did_you_mean(text, inp.enum)}"
            )
        return text
    return value if isinstance(value, str) else str(value)


def _to_int(value: Any) -> int:
    if isinstance(value, float):
        if not value.is_integer():
            raise ValueError(value)
        return int(value)
    return int(str(value).strip())


def _check_placeholders(
    template: str, inputs: dict, outputs: dict, ctx: _Ctx, key: tuple, text: str
) -> None:
    for match in _PLACEHOLDER.finditer(template):
        kind, name = match.group(1), match.group(2)
        declared = inputs if kind == "inputs" else outputs
        if name in declared:
            continue
        line, column = ctx.pos.find_in_value(key, match.group(0), text)
        other = outputs if kind == "inputs" else inputs
        if name in other:
            fix = f" '{name}' is declared under {'outputs' if kind == 'inputs' else 'inputs'}:"
            fix += f" write {{{'outputs' if kind == 'inputs' else 'inputs'}.{name}}}."
        else:
            suggestion = closest(name, declared)
            fix = (
                f" Did you mean {{{kind}.{suggestion}}}?"
                if suggestion
                else f" Fix: declare '{name}' under {kind}:, or correct the name."
            )
        raise SpecError(
            f"placeholder {match.group(0)} names no declared {kind[:-1]}.{fix}",
            line=line,
            column=column,
            path=".".join(key),
            source_name=ctx.source_name,
        )


def _v2_template(command: Any, ctx: _Ctx) -> str:
    """v2 ``${{inputs.x}}`` / ``$[[...]]`` syntax -> the v1.5 template syntax of the model."""
    if command is None:
        return ""
    text = str(command)
    text = text.replace("[", "[[").replace("]", "]]")
    text = text.replace("$[[[[", "[").replace("]]]]", "]")
    out = []
    last = 0
    for match in _V2_PLACEHOLDER.finditer(text):
        out.append(text[last : match.start()].replace("{", "{{").replace("}", "}}"))
        out.append(f"{{{match.group(1)}.{match.group(2)}}}")
        last = match.end()
    out.append(text[last:].replace("{", "{{").replace("}", "}}"))
    return "".join(out)


def _environment(section: Any) -> Environment | None:
    if section is None:
        return None
    if isinstance(section, str):
        name, version = section, None
        if section.startswith("azureml:"):
            ref = section[len("azureml:") :]
            if "@" in ref:
                name, version = ref.split("@", 1)[0], None
            elif ":" in ref:
                name, version = ref.rsplit(":", 1)
            else:
                name = ref
        return Environment(name=name, version=version, raw={"ref": section})
    docker = section.get("docker") or {}
    conda = section.get("conda") or {}
    build = docker.get("build") or {}
    dockerfile = build.get("dockerfile")
    if isinstance(dockerfile, str) and dockerfile.startswith("file:"):
        dockerfile = dockerfile[len("file:") :]
    if section.get("build"):
        dockerfile = section["build"].get("dockerfile_path") or "Dockerfile"
        context = section["build"].get("path")
        dockerfile = str(Path(context or ".") / dockerfile) if context else dockerfile
    conda_deps = conda.get("conda_dependencies", conda.get("condaDependencies"))
    conda_file = conda.get("conda_dependencies_file", conda.get("condaDependenciesFile"))
    if isinstance(section.get("conda_file"), str):
        conda_file = section["conda_file"]
    elif isinstance(section.get("conda_file"), dict):
        conda_deps = section["conda_file"]
    return Environment(
        name=section.get("name"),
        version=None if section.get("version") is None else str(section["version"]),
        image=section.get("image") or docker.get("image"),
        dockerfile=dockerfile,
        base_dockerfile=docker.get("base_dockerfile"),
        conda_file=conda_file,
        conda_dependencies=conda_deps if isinstance(conda_deps, dict) else None,
        pip_requirements_file=conda.get("pip_requirements_file"),
        user_managed=bool(
            conda.get("userManagedDependencies", conda.get("user_managed_dependencies", False))
        ),
        os=str(section.get("os", "Linux")).capitalize(),
        raw=dict(section),
    )


def carry_over_settings(old: Component, new: Component) -> None:
    """Keep the user's run settings when a definition cell runs again.

    The new component takes over the old settings object (so a panel or ranks bound to it
    stay bound); input and output bindings the new spec no longer allows are dropped.
    """
    settings = old.runsettings
    kept = {}
    for name, value in settings.inputs.items():
        inp = new.inputs.get(name)
        if inp is None:
            continue
        try:
            kept[name] = coerce_value(inp, value)
        except SpecError:
            continue
    settings.inputs = kept
    settings.outputs = {k: v for k, v in settings.outputs.items() if k in new.outputs}
    if new.spec_format == "v2":
        fresh = new.runsettings.resource_layout
        settings.resource_layout.configure(**{k: v for k, v in fresh.as_dict().items() if v})
    object.__setattr__(new, "runsettings", settings)


__all__ = ["SpecError", "carry_over_settings", "coerce_value", "load_component", "schema"]
