"""What a rank's text may hold once it carries a rank label: one rule for the output of
``%%distcomp run`` cells and of ``%distcomp command`` processes.

A label is only worth something if the rank's own text cannot move it or draw another one.
So a Unicode line break (U+2028, U+2029, NEL, vertical tab, form feed, the C0 separators),
which a browser or terminal breaks the line at, starts a new labelled line; a backspace and
the other C0 controls, a cursor move or erase (any CSI sequence but colour), and an OSC
sequence (a hyperlink, a window title) are removed, the text inside a hyperlink kept. Colour
(SGR) stays, and so does ``\\r``: the labeller puts the label after it (commands) or shows
what the redrawn line shows (run cells).
"""

from __future__ import annotations

import re

#: one scan of the text finds anything the slow path has to change (the common case: none)
_UNSAFE = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\x85\u2028\u2029]")
#: OSC: ESC ] ... ended by BEL or ESC \ (or cut off at the end of the text)
_OSC = re.compile(r"\x1b\][^\x07\x1b]*(?:\x07|\x1b\\|$)")
#: CSI but colour (SGR: ESC [ digits and ; then m), and the other ESC sequences
_CONTROL_SEQUENCE = re.compile(r"\x1b\[(?![0-9;]*m)[0-?]*[ -/]*[@-~]?|\x1b(?!\[)[ -/]*[0-~]?")
_BREAKS = dict.fromkeys(map(ord, "\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"), "\n")
_REMOVED = {c: None for c in [*range(0x00, 0x09), *range(0x0E, 0x1C), 0x1F, 0x7F] if c != 0x1B}


def label_safe(text: str) -> str:
    """``text`` with every line break a line break and nothing that moves the cursor back
    over a label (see the module's text); unchanged when it holds none of them."""
    if _UNSAFE.search(text) is None:
        return text
    if "\x1b" in text:
        text = _CONTROL_SEQUENCE.sub("", _OSC.sub("", text))
    return text.translate(_BREAKS).translate(_REMOVED)


def labelled_lines(label: str, text: str) -> list[str]:
    """``text`` (no newline in it, or made safe first) as lines each starting with
    ``label``: a new line at each line break, and the label again after each ``\\r`` (a
    redrawn line shows its label too)."""
    prefix = label + " "
    redrawn = "\r" + prefix
    return [prefix + line.replace("\r", redrawn) for line in label_safe(text).split("\n")]


__all__ = ["label_safe", "labelled_lines"]
