"""What a rank's text may hold once it carries a rank label: one rule for the output of
``%%distcomp run`` cells and of ``%distcomp command`` processes.

A label is only worth something if the rank's own text cannot move it or draw another one.
So a Unicode line break (U+2028, U+2029, NEL, vertical tab, form feed, the C0 separators),
which a browser or terminal breaks the line at, starts a new labelled line; a backspace and
the other C0 controls, a cursor move or erase (any CSI sequence but colour), and an OSC
sequence (a hyperlink, a window title) are removed, the text inside a hyperlink kept. Colour
(SGR) stays, and so does ``\\r``: the labeller puts the label after it (commands) or shows
what the redrawn line shows (run cells).

Colour carries from line to line in a notebook's stream output (JupyterLab renders a stream's
text as one), so a colour a rank leaves on would draw the next label (white on white, the line
read as another rank's). A labelled line whose text leaves a colour on ends with a reset, and
the rank's next line starts with its colours again after the label: every label is drawn in
the default colours, and a rank's colour still spans its lines.
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
#: a colour (SGR) sequence, and one that only resets (``ESC [ m``, ``ESC [ 0 m``, ``ESC [ 0;0 m``)
_SGR = re.compile(r"\x1b\[[0-9;]*m")
_RESET_ONLY = re.compile(r"\x1b\[[0;]*m")
RESET = "\x1b[0m"
#: characters of colour sequences carried to a rank's next line at most (the latest kept)
_CARRIED_CHARS = 200


def label_safe(text: str) -> str:
    """``text`` with every line break a line break and nothing that moves the cursor back
    over a label (see the module's text); unchanged when it holds none of them."""
    if _UNSAFE.search(text) is None:
        return text
    if "\x1b" in text:
        text = _CONTROL_SEQUENCE.sub("", _OSC.sub("", text))
    return text.translate(_BREAKS).translate(_REMOVED)


class OpenColours:
    """The colours a rank's text left on at the end of its last line, per rank and stream:
    what :meth:`close` puts back after the next label."""

    def __init__(self) -> None:
        self._open: dict[object, str] = {}

    def open(self, key: object) -> bool:
        """Did ``key``'s last line leave a colour on?"""
        return key in self._open

    def close(self, key: object, text: str) -> str:
        """``text`` (what follows a label: no line break, no ``\\r``) starting in the colours
        ``key``'s last line left on, and ending with a reset while a colour is on."""
        carried = self._open.get(key, "")
        if not carried and "\x1b[" not in text:
            return text  # the common case: no colour
        still = carried
        for match in _SGR.finditer(text):
            code = match.group()
            still = "" if _RESET_ONLY.fullmatch(code) else still + code
        if len(still) > _CARRIED_CHARS:
            start = still.find("\x1b[", len(still) - _CARRIED_CHARS)
            still = still[start:] if start >= 0 else ""
        if still:
            self._open[key] = still
        else:
            self._open.pop(key, None)
        return carried + text + (RESET if still else "")


def labelled_lines(
    label: str, text: str, colours: OpenColours | None = None, key: object = None
) -> list[str]:
    """``text`` (no newline in it, or made safe first) as lines each starting with
    ``label``: a new line at each line break, and the label again after each ``\\r`` (a
    redrawn line shows its label too). Every label is drawn in the default colours:
    ``colours`` carries a colour left on to the next call's lines (of ``key``)."""
    prefix = label + " "
    if "\x1b[" not in text and (colours is None or not colours.open(key)):
        redrawn = "\r" + prefix
        return [prefix + line.replace("\r", redrawn) for line in label_safe(text).split("\n")]
    colours = colours or OpenColours()
    return [
        prefix + ("\r" + prefix).join(colours.close(key, piece) for piece in line.split("\r"))
        for line in label_safe(text).split("\n")
    ]


__all__ = ["RESET", "OpenColours", "label_safe", "labelled_lines"]
