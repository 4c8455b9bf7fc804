"""Our messages mark code with backticks (``%distcomp restart NAME``, ``name: x``), one way of
writing for every layer. What a person reads never shows them: plain text drops the
backticks (:func:`plain`), HTML draws the code as code (:func:`rich`)."""

from __future__ import annotations

import re
from html import escape

#: code between backticks, on one line
_CODE = re.compile(r"`([^`\n]+)`")


def plain(text: str) -> str:
    """``text`` without the backticks around its code."""
    return _CODE.sub(r"\1", text)


def rich(text: str) -> str:
    """``text`` as HTML: escaped, its code in ``<code>``."""
    return _CODE.sub(lambda m: f"<code>{m[1]}</code>", escape(text))
