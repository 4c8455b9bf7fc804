"""Property test: a mutated public spec either loads or raises SpecError with a line, nothing else."""

from __future__ import annotations

import os
import warnings

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jupyter_distcomp import SpecError, SpecWarning, load_component

from .conftest import PUBLIC_SPECS

TEXTS = [p.read_text() for p in PUBLIC_SPECS]

values = st.one_of(
    st.text(max_size=12),
    st.integers(-5, 10**6).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(str),
    st.sampled_from(
        ["true", "False", "null", "~", "[]", "{}", "[a, b]", "{a: 1}", "'", '"', "[", "{", "- x",
         "&a x", "*a", "!!binary x", "|", ">-", "{inputs.x}", "[--x {inputs.nope}]", "mpi",
         "tensorflow", "Enum", "Integer", "AnyFile", "DistributedComponent", "command", ": :"]
    ),
)  # fmt: skip


@st.composite
def mutated(draw) -> str:
    lines = draw(st.sampled_from(TEXTS)).splitlines()
    for _ in range(draw(st.integers(1, 4))):
        if not lines:
            break
        i = draw(st.integers(0, len(lines) - 1))
        line = lines[i]
        indent = len(line) - len(line.lstrip(" "))
        op = draw(
            st.sampled_from(["delete", "duplicate", "indent", "value", "rename", "insert", "swap"])
        )
        if op == "delete":
            del lines[i]
        elif op == "duplicate":
            lines.insert(i, line)
        elif op == "indent":
            shift = draw(st.integers(-4, 4))
            lines[i] = " " * max(0, indent + shift) + line.lstrip(" ")
        elif op == "value" and ":" in line:
            key = line.split(":", 1)[0]
            lines[i] = f"{key}: {draw(values)}"
        elif op == "rename" and ":" in line:
            rest = line.split(":", 1)[1]
            name = draw(
                st.text(alphabet="abcdefghijklmnopqrstuvwxyz_.-$ ", min_size=1, max_size=10)
            )
            lines[i] = " " * indent + name + ":" + rest
        elif op == "insert":
            lines.insert(i, " " * draw(st.integers(0, 6)) + draw(values))
        elif op == "swap" and i + 1 < len(lines):
            lines[i], lines[i + 1] = lines[i + 1], lines[i]
    return "\n".join(lines) + "\n"


@settings(
    max_examples=int(os.environ.get("DISTCOMP_FUZZ_EXAMPLES", "400")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(mutated())
def test_mutated_spec_loads_or_raises_spec_error_with_line(text: str):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SpecWarning)
        try:
            component = load_component(text)
        except SpecError as error:
            assert error.line is not None and error.line >= 1, str(error)
            assert error.line <= max(1, text.count("\n") + 1), str(error)
            return
    assert component.name and component.type in ("DistributedComponent", "CommandComponent")
