"""Bad specs the kernel and the JupyterLab extension must place on the same line.

tests/data/bad_specs.json lists each spec with the 1-based line and the dotted key of its
first error ("" for the spec as a whole: YAML syntax, a missing key) and the messages of all
its errors, word for word (none listed for YAML syntax, which each side's parser words). Here
the kernel's load_component must raise one SpecError there that carries every one of those
messages; labextension/test/badSpecs.spec.ts runs the editor's diagnostics on the same file
and expects an error on the same line and exactly the same messages: one rule set.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from jupyter_distcomp.core.spec_parsing import load_component
from jupyter_distcomp.errors import SpecError

BAD_SPECS = json.loads((Path(__file__).parent / "data" / "bad_specs.json").read_text("utf-8"))


def test_the_bad_specs_are_well_formed():
    names = [case["name"] for case in BAD_SPECS]
    assert len(names) == len(set(names)) >= 10
    for case in BAD_SPECS:
        assert set(case) == {"name", "spec", "line", "key", "messages"}, case["name"]
        assert 1 <= case["line"] <= case["spec"].count("\n") + 1, case["name"]


@pytest.mark.parametrize("case", BAD_SPECS, ids=[case["name"] for case in BAD_SPECS])
def test_the_kernel_reports_the_line_and_key(case):
    with pytest.raises(SpecError) as raised:
        load_component(case["spec"])
    error = raised.value
    assert error.line == case["line"], error.message
    key, path = case["key"], error.path or ""
    assert path == key or (key != "" and path.startswith(key + ".")), (path, error.message)
    if case["messages"]:
        assert [e.message for e in error.errors] == case["messages"]


def test_every_error_of_a_spec_is_reported_at_once():
    """Three mistakes in one spec: one run of the cell names all three, each with its line."""
    (case,) = [case for case in BAD_SPECS if case["name"] == "three_mistakes_at_once"]
    with pytest.raises(SpecError) as raised:
        load_component(case["spec"], source_name="%%distcomp demo")
    text = str(raised.value)
    assert text.startswith("3 errors in %%distcomp demo:"), text
    for line, words in [
        (7, "optional must be true or false"),
        (15, "unknown launcher type 'mpii'"),
        (16, "placeholder {inputs.rate}"),
    ]:
        assert any(f"line {line}," in row and words in row for row in text.splitlines()), text
