"""Property test: a mutated public spec either loads or raises SpecError with a line, nothing else.

Mutations include hostile shapes: deep nesting, alias bombs, numbers longer than Python
converts, lone surrogates and NUL characters. 10,000 cases by default (DISTCOMP_FUZZ_EXAMPLES).
"""

from __future__ import annotations

import os
import re
import warnings

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jupyter_distcomp import SpecError, SpecWarning, load_component

from .conftest import PUBLIC_SPECS

#: what YAML counts as a line break (and an editor too: a lone \r starts a line)
YAML_BREAK = re.compile("\r\n|[\r\n\x85\u2028\u2029]")

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
    st.integers(1, 400).map(lambda depth: "[" * depth + "]" * depth),  # deep nesting
    st.integers(4000, 6000).map(lambda digits: "9" * digits),  # longer than Python converts
    st.sampled_from(["\ud800", "\udfff x", '"\ud800"', '"a\0b"', '"\x00"', "a\x00b"]),
    st.sampled_from(["*a", "*b", "&x [*a, *a]", "{inputs.x", "${{inputs.x}", "$[[--x"]),
)  # fmt: skip

#: anchors for the aliases the values above use: small ones, or ones that expand tenfold per
#: level (a "billion laughs")
ANCHORS = "x-anchors:\n  a: &a [l, l, l]\n  b: &b [*a, *a, *a]\n"
BOMB = "x-laughs:\n  a: &a [l, l, l, l, l, l, l, l, l, l]\n" + "".join(
    f"  {name}: &{name} [{', '.join([f'*{prev}'] * 10)}]\n"
    for prev, name in zip("abcdefg", "bcdefgh", strict=True)
)


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
    prefix = draw(st.sampled_from(["", "", ANCHORS, ANCHORS, BOMB]))
    return prefix + "\n".join(lines) + "\n"


@settings(
    max_examples=int(os.environ.get("DISTCOMP_FUZZ_EXAMPLES", "10000")),
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
            assert error.line <= max(1, len(YAML_BREAK.findall(text)) + 1), str(error)
            return
    assert component.name and component.type in ("DistributedComponent", "CommandComponent")
