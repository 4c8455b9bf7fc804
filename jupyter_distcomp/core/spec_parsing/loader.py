"""YAML text -> :class:`~jupyter_distcomp.core.model.Component`, or a SpecError that points at
the line.

Reads v1.5 ``DistributedComponent`` / ``CommandComponent`` specs and v2 command components with
a ``distribution:`` section into one model. Validation is the shipped JSON Schema (the
JupyterLab extension reads the same file) plus the checks a schema cannot express. Every
problem is reported with the 1-based line and column of the key or value concerned.
"""

from __future__ import annotations

import io
import os
from dataclasses import replace
from pathlib import Path
from typing import IO, Any

import yaml

from ...contracts import LAUNCHERS, V2_DATA_TYPES, V2_DISTRIBUTIONS, launcher_name
from ...errors import LayoutError, SpecError, closest, did_you_mean
from ..model import Component, Environment, Input, Launcher, Output
from ..template import check_azureml, from_azureml, undeclared_placeholders
from ..values import PARAM_TYPE_NAMES, PARAM_TYPES, coerce_value
from .positions import Context, DuplicateKey, Positions, TooComplex, compose_positions
from .schema import kind_of, validate


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
    ctx = Context(pos, source_name, [])
    validate(data, ctx)
    component = None
    try:
        component = _build(data, ctx, text, Path(base_dir))
    except SpecError as exc:
        ctx.report(exc)
    except (KeyError, TypeError, AttributeError, ValueError):
        # a part the schema rejected (a list where a mapping goes, ...): its errors say it
        if not ctx.errors:
            raise
    if ctx.errors:
        raise SpecError.of(ctx.errors)
    assert component is not None  # _build returns None only with an error reported
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
    except TooComplex as exc:
        raise SpecError(
            exc.message, line=exc.line, column=exc.column, source_name=source_name
        ) from None
    except DuplicateKey as exc:
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
            f"a spec must be a YAML mapping of keys (name:, type:, ...), not a {kind_of(data)}.",
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


# -- model ----------------------------------------------------------------------------------
def _build(data: dict, ctx: Context, text: str, base_dir: Path) -> Component | None:
    """The component of a spec the schema accepted; every error found is reported to
    ``ctx`` (the build goes on past one) and None returned when there is any."""
    raw_type = str(data["type"]).split("@")[0]
    distribution = data.get("distribution")
    is_v2 = raw_type.lower() == "command"
    comp_type, launcher, template = "CommandComponent", None, None
    try:
        comp_type, launcher, template = _kind(data, ctx, raw_type, is_v2)
    except SpecError as exc:
        ctx.report(exc)
        section = data.get("launcher")
        written = section.get("additional_arguments") if isinstance(section, dict) else None
        if not is_v2 and isinstance(written or data.get("command"), str):
            template = written or data.get("command")  # its placeholders are checked still

    inputs = {}
    for name, spec in _section(data, "inputs").items():
        try:
            inputs[str(name)] = _input(str(name), spec, ctx, is_v2)
        except SpecError as exc:
            if not _reported(ctx, f"inputs.{name}"):
                ctx.report(exc)
            inputs[str(name)] = Input(str(name), "")  # still declared, for the template check
    outputs = {}
    for name, spec in _section(data, "outputs").items():
        try:
            outputs[str(name)] = _output(str(name), spec, ctx)
        except SpecError as exc:
            if not _reported(ctx, f"outputs.{name}"):
                ctx.report(exc)
            outputs[str(name)] = Output(str(name), "")
    template_key = ("launcher", "additional_arguments") if "launcher" in data else ("command",)
    raw_template = data.get(template_key[0]) if is_v2 else template
    if isinstance(template, str):
        try:
            _check_template(template, inputs, outputs, ctx, template_key, text, raw_template)
        except SpecError as exc:
            ctx.report(exc)
    try:
        variables = _environment_variables(data.get("environment_variables"), ctx)
    except SpecError as exc:
        ctx.report(exc)
    if ctx.errors or template is None:
        return None

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
        environment_variables=variables,
        schema=data.get("$schema"),
        spec_format="v2" if is_v2 else "v1.5",
        source=text,
        base_dir=base_dir,
        warnings=tuple(ctx.warnings),
        spec_layout=_spec_layout(data, distribution) if is_v2 else {},
    )
    try:
        component.runsettings.resource_layout.configure(**component.spec_layout)
    except LayoutError as exc:
        message = str(exc).replace("process_count_per_node", "process_count_per_instance")
        given = [_SPEC_LAYOUT_KEYS[key] for key in component.spec_layout]
        culprits = [key for key in given if message.startswith(key[-1])] or given
        raise ctx.error(message, culprits[0], at="value") from None
    return component


def _kind(data: dict, ctx: Context, raw_type: str, is_v2: bool) -> tuple[str, Launcher | None, str]:
    """The component's type, its launcher (None for one process) and its command template."""
    launcher = None
    if is_v2:
        if data.get("command") is None:
            raise ctx.error(
                "a v2 command component needs `command:`. Fix: add `command: python train.py ...`.",
                ("type",),
            )
        template = from_azureml(data.get("command"))
        distribution = data.get("distribution")
        if distribution:
            kind = V2_DISTRIBUTIONS[str(distribution["type"]).lower()]
            launcher = Launcher(kind, template, str(distribution["type"]))
        return ("DistributedComponent" if launcher else "CommandComponent"), launcher, template
    if raw_type.lower() in ("commandcomponent",):
        if "command" not in data:
            raise ctx.error(
                "a CommandComponent needs a `command:` (the command template). "
                "Fix: add `command: python script.py --arg {inputs.x}`.",
                ("type",),
            )
        if "launcher" in data:
            raise ctx.error(
                "a CommandComponent runs one process and takes no launcher. "
                "Fix: use `type: DistributedComponent`, or remove the launcher.",
                ("launcher",),
            )
        return "CommandComponent", None, data["command"]
    if "launcher" not in data:
        hint = " (move `command:` into launcher.additional_arguments)" if "command" in data else ""
        kinds = f"{', '.join(LAUNCHERS[:-1])} or {LAUNCHERS[-1]}"
        raise ctx.error(
            f"a DistributedComponent needs a `launcher:` with `type` ({kinds}) and "
            f"`additional_arguments` (the command){hint}.",
            ("type",),
        )
    section = data["launcher"]
    raw_launcher = str(section["type"])
    named = launcher_name(raw_launcher)
    if named is None:
        raise ctx.error(
            f"unknown launcher type {raw_launcher!r}.{did_you_mean(raw_launcher, LAUNCHERS)}"
            f" Allowed: {', '.join(LAUNCHERS)}.",
            ("launcher", "type"),
            at="value",
        )
    template = section["additional_arguments"]
    return "DistributedComponent", Launcher(named, template, raw_launcher), template


def _reported(ctx: Context, path: str) -> bool:
    """Whether an error about ``path`` or a key inside it is reported already."""
    return any(e.path == path or str(e.path or "").startswith(f"{path}.") for e in ctx.errors)


def _section(data: dict, key: str) -> dict:
    """``data[key]`` when it is a mapping; else empty (the schema reports what it is)."""
    section = data.get(key)
    return section if isinstance(section, dict) else {}


_SPEC_LAYOUT_KEYS = {
    "instance_count": ("resources", "instance_count"),
    "process_count_per_node": ("distribution", "process_count_per_instance"),
    "worker_count": ("distribution", "worker_count"),
    "parameter_server_count": ("distribution", "parameter_server_count"),
}


def _spec_layout(data: dict, distribution: dict | None) -> dict[str, int]:
    """The run settings a v2 spec sets itself (``resources``, ``distribution``)."""
    resources = data.get("resources") or {}
    given = {
        "instance_count": resources.get("instance_count"),
        "process_count_per_node": (distribution or {}).get("process_count_per_instance"),
        "worker_count": (distribution or {}).get("worker_count"),
        "parameter_server_count": (distribution or {}).get("parameter_server_count"),
    }
    return {key: value for key, value in given.items() if value is not None}


def _environment_variables(section: Any, ctx: Context) -> dict[str, str]:
    """The spec's variables as text; names and values a process environment can hold."""
    result = {}
    for key, value in (section or {}).items():
        name, text = str(key), str(value)
        path = ("environment_variables", name)
        if not name or "=" in name or "\x00" in name:
            raise ctx.error(
                f"{name!r} cannot be the name of an environment variable (it is empty or holds "
                "'=' or a NUL character). Fix: use letters, digits and '_'.",
                path,
            )
        if "\x00" in text:
            raise ctx.error(
                f"environment variable {name} contains a NUL character, which no environment "
                "can hold. Fix: remove it.",
                path,
                at="value",
            )
        result[name] = text
    return result


def _param_type(name: str, type_value: Any, ctx: Context, is_v2: bool) -> str | None:
    if isinstance(type_value, list):
        return None
    lowered = str(type_value).lower()
    if lowered in PARAM_TYPES:
        if lowered == "int" and not is_v2:
            ctx.warn("type 'Int' is a legacy alias; write 'Integer'.", ("inputs", name, "type"))
        return PARAM_TYPES[lowered]
    if lowered in V2_DATA_TYPES or lowered.endswith(("directory", "file", "folder", "path")):
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


def _input(name: str, spec: dict, ctx: Context, is_v2: bool) -> Input:
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


def _output(name: str, spec: dict, ctx: Context) -> Output:
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


def _check_template(
    template: str, inputs: dict, outputs: dict, ctx: Context, key: tuple, text: str, raw: Any
) -> None:
    """The template parses and names only declared inputs and outputs; errors get a line.

    ``raw`` is the template as the spec writes it: a v2 command is checked in its own syntax
    first, so its errors quote and point at what the user wrote.
    """
    if raw is not template and isinstance(raw, str):
        try:
            check_azureml(raw)
        except SpecError as exc:
            raise _located(exc, raw, ctx, key, text) from None
    try:
        v2 = raw is not template and isinstance(raw, str)
        errors = undeclared_placeholders(template, inputs, outputs, v2=v2)
    except SpecError as exc:
        errors = [exc]
    for error in errors:
        ctx.report(_located(error, template, ctx, key, text))


def _located(error: SpecError, checked: str, ctx: Context, key: tuple, text: str) -> SpecError:
    """``error``, at an offset of ``checked``, with the YAML line and column of that place."""
    if error.offset is None:
        return error
    needle = checked[error.offset :].split(None, 1)
    word = needle[0] if needle else ""
    before = _occurrences(checked, word, error.offset)
    line, column = ctx.pos.find_in_value(key, word, text, before)
    return SpecError(
        error.message, line=line, column=column, path=".".join(key), source_name=ctx.source_name
    )


def _occurrences(text: str, word: str, end: int) -> int:
    """How many times ``word`` starts in ``text`` before ``end``."""
    count, found = 0, text.find(word) if word else -1
    while 0 <= found < end:
        count += 1
        found = text.find(word, found + 1)
    return count


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


def carry_over_settings(old: Component, new: Component) -> Component:
    """``new`` with the user's run settings of ``old``, when a definition cell runs again.

    The result keeps the old settings object (so a panel or ranks bound to it stay bound);
    input and output bindings the new spec no longer allows are dropped.
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
    settings.resource_layout.configure(**new.spec_layout)
    return replace(new, runsettings=settings)
