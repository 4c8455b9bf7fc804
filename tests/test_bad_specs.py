"""Bad specs the kernel and the JupyterLab extension must place on the same line.

tests/data/bad_specs.json lists each spec with the 1-based line and the dotted key of its
error ("" for the spec as a whole: YAML syntax, a missing key). Here the kernel's
load_component must raise a SpecError there; labextension/test/badSpecs.spec.ts runs the
editor's diagnostics on the same file and expects an error on the same line.
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
        assert set(case) == {"name", "spec", "line", "key"}, case["name"]
        assert 1 <= case["line"] <= case["spec"].count("\n") + 1, case["name"]


@pytest.mark.parametrize("case", BAD_SPECS, ids=[case["name"] for case in BAD_SPECS])
def test_the_kernel_reports_the_line_and_key(case):
    with pytest.raises(SpecError) as raised:
        load_component(case["spec"])
    error = raised.value
    assert error.line == case["line"], error.message
    key, path = case["key"], error.path or ""
    assert path == key or (key != "" and path.startswith(key + ".")), (path, error.message)
