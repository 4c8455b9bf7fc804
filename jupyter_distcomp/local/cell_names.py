"""Which notebook cell a rank's cell file is: ``In [5]``, as the notebook numbers it.

A rank's IPython runs each ``%%distcomp run`` cell as a file named by the hash of the code
it got (ipykernel's ``get_file_name``: ``/tmp/ipykernel_PID/HASH.py``), the same on every
rank and computable here. Each cell the kernel sends is remembered by that name with the
notebook's label and the code, so a frame in a function defined in ``In [5]`` is named
``In [5], line 7`` while ``In [9]`` runs, and its source line is read from ``In [5]``.
"""

from __future__ import annotations

import os
import re
from collections import OrderedDict

from ..rank_side.ledger_words import cell_place

#: What this module uses of ipykernel beyond its public API: how it names a cell's file
#: (a test checks each exists; without ipykernel the ranks' cells keep their plain names)
RELIES_ON = (
    "ipykernel.compiler.get_file_name",
    "ipykernel.compiler.get_tmp_hash_seed",
    "ipykernel.compiler.murmur2_x86",
)
KEPT = 2000  # cells remembered (a long session: the oldest go)
#: a rank's file name -> (label, code, the notebook cell's path as JupyterLab's debugger
#: names it, '' if not known)
_cells: OrderedDict[str, tuple[str, str, str]] = OrderedDict()


def is_cell_file(path: str) -> bool:
    return os.path.basename(os.path.dirname(path)).startswith("ipykernel_") or path.startswith(
        "<ipython-input"
    )


def label_of(cell: str) -> str:
    """The notebook's label for a cell: ``In [12]`` for ``Cell In[12]`` (what
    ``run.cell_name`` gives), '' for a cell without a number."""
    match = re.search(r"In ?\[(\d+)\]", cell)
    return f"In [{match[1]}]" if match else ""


def _file_name(code: str) -> str:
    from ipykernel.compiler import get_file_name, get_tmp_hash_seed, murmur2_x86

    if os.environ.get("IPYKERNEL_CELL_NAME"):  # the kernel's own cell name is not the ranks'
        return f"{murmur2_x86(code, get_tmp_hash_seed())}.py"
    return os.path.basename(get_file_name(code))


def remember(code: str, cell: str, source: str = "") -> None:
    """The ranks run ``code`` as the notebook's ``cell`` (``Cell In[12]``), whose whole text
    is ``source`` ('' if not known); a cell without a number does not replace the label the
    same code had."""
    label = label_of(cell)
    try:
        from ipykernel.compiler import get_file_name

        name = _file_name(code)
    except ImportError:  # no ipykernel here: the ranks' cells keep their plain names
        return
    if not label and name in _cells:
        return
    _cells[name] = (label, code, str(get_file_name(source)) if source else "")
    _cells.move_to_end(name)
    while len(_cells) > KEPT:
        _cells.popitem(last=False)


def cell_of(path: str) -> tuple[str, str] | None:
    """``(label, code)`` of the cell a rank ran as ``path``; None if not one of ours."""
    known = _cells.get(os.path.basename(path)) if is_cell_file(path) else None
    return known[:2] if known else None


def notebook_path(path: str) -> str:
    """The path JupyterLab's debugger knows the notebook cell by (its ``dumpCell``) for a
    rank's cell file; '' if not known."""
    known = _cells.get(os.path.basename(path)) if is_cell_file(path) else None
    return known[2] if known else ""


def where(path: str, line: int | str) -> str:
    """``In [5], line 7`` for a rank's cell file, ``cell line 7`` for a cell not known
    here; '' for any other file."""
    if not is_cell_file(path):
        return ""
    known = cell_of(path)
    return cell_place(known[0] if known else "", line)
