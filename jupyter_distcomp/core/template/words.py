"""Split a command into words the way a POSIX shell would, with values kept whole.

Why not ``shlex.split``: a value must never be split or interpreted, so values are opaque
parts glued to the literal text around them, and the same pass must also say whether the
literal text needs a real shell (``&&``, ``$VAR``, globs ...), build the one-line script for
``bash -c`` (values quoted for the quote state they sit in), and, for Azure ML, write the
v2 form of the same command with the same whitespace rules. One pass keeps all three in step.
"""

from __future__ import annotations

import re
import shlex
from typing import Any

from ...errors import SpecError

_WS = " \t\r\n"
_SHELL_CHARS = set(";&|<>()*?[`")
_DOLLAR_NEXT = set("({_@*#?$!-") | set(
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
)
_ASSIGN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*$")


def template_error(message: str, template: str, offset: int) -> SpecError:
    """A SpecError quoting the text around ``offset``; the spec loader turns ``.offset`` into
    a line of the YAML."""
    start = max(0, offset - 20)
    near = " ".join(template[start : offset + 20].split())
    return SpecError(f"{message} (near '{near}' in the command template)", offset=offset)


def offset_in(segments: tuple, k: int) -> int:
    """Offset in the template of character ``k`` of a literal made of escaped segments."""
    best = segments[0]
    for seg in segments:
        if seg[0] <= k:
            best = seg
    return best[1] + k - best[0]


class CommandWords:
    """POSIX-shell word splitting of literal text, with values as opaque, unsplittable parts.

    Builds at once the argv words, the one-line script for ``bash -c`` (unquoted
    whitespace collapsed to one space) and the reason a real shell is needed, if any. With
    ``v2=True`` it writes Azure ML v2 syntax instead of value slots.
    """

    def __init__(self, template: str, v2: bool = False):
        self.template, self.v2 = template, v2
        self.words: list[str | tuple] = []
        self.cur: list = []
        self.exists = False  # the current word exists (even if empty: '')
        self.plain = True  # the current word so far: unquoted literal characters only
        self.quote: str | None = None
        self.quote_at = 0
        self.shell: str | None = None
        self.script: list = []
        self.space = False  # unquoted whitespace is pending
        self.fresh = False  # just after "$[[": padding is moved outside the block
        self.block_at: int | None = None  # where "$[[" of the open block is in the script

    def _emit(self, part: Any) -> None:
        if self.v2 and part in ("[", "]", "{"):
            self._check_v2_literal(part)
        if self.fresh:
            if self.space and self.block_at and self.script[self.block_at - 1] != " ":
                self.script.insert(self.block_at, " ")
            self.fresh = False
        elif self.space and self.script:
            self.script.append(" ")
        self.space = False
        self.script.append(part)

    def _end_word(self) -> None:
        if self.exists:
            parts = _compact(self.cur)
            self.words.append(
                parts[0]
                if parts and isinstance(parts[0], str) and len(parts) == 1
                else tuple(parts)
            )
        self.cur, self.exists, self.plain = [], False, True

    def _needs_shell(self, what: str) -> None:
        self.shell = self.shell or what

    def text(self, text: str, segments: tuple) -> None:
        i, n = 0, len(text)
        while i < n:
            ch = text[i]
            nxt = text[i + 1] if i + 1 < n else ""
            if self.quote == "'":
                if ch == "'":
                    self.quote = None
                else:
                    self.cur.append(ch)
                self._emit(ch)
                i += 1
                continue
            if ch == "\\" and (self.quote is None or nxt in '$`"\\\n'):
                if not nxt:
                    raise template_error(
                        "a backslash at the end of the text escapes nothing. Fix: write '\\\\'"
                        " for a literal backslash",
                        self.template,
                        offset_in(segments, i),
                    )
                if nxt != "\n":  # backslash-newline is a line continuation
                    self.cur.append(nxt)
                    self._emit(ch + nxt)
                    self.exists, self.plain = True, False
                i += 2
                continue
            if self.quote == '"':
                if ch == '"':
                    self.quote = None
                else:
                    if ch == "`" or (ch == "$" and nxt in _DOLLAR_NEXT):
                        self._needs_shell(ch + nxt)
                    self.cur.append(ch)
                self._emit(ch)
                i += 1
                continue
            if ch in _WS:
                self._end_word()
                self.space = True
                i += 1
                continue
            if ch in "'\"":
                self.quote, self.quote_at = ch, offset_in(segments, i)
                self.exists, self.plain = True, False
                self._emit(ch)
                i += 1
                continue
            if ch in _SHELL_CHARS or (ch == "$" and nxt in _DOLLAR_NEXT):
                doubled = ch in "&|" and nxt == ch  # && and || read better than & and |
                self._needs_shell(ch + nxt if ch == "$" or doubled else ch)
            elif ch in "#~" and not self.exists:
                self._needs_shell(ch)
            elif ch == "=" and self.plain and not self.words and _ASSIGN.match("".join(self.cur)):
                self._needs_shell("NAME=value")
            self.cur.append(ch)
            self.exists = True
            self._emit(ch)
            i += 1

    def _check_v2_literal(self, ch: str) -> None:
        """Refuse literal text that Azure ML would read as ``${{``, ``$[[`` or a block's end."""
        tail = "".join(p for p in self.script[-2:] if isinstance(p, str) and len(p) == 1) + ch
        if tail in ("${{", "$[[") or (tail.endswith("]]") and self.block_at is not None):
            raise SpecError(
                f"the literal text '{tail}' would read as Azure ML v2 syntax. Fix: put a space "
                "between the characters"
            )

    def value(self, index: int, reference: str) -> None:
        """A value slot (argv, script), or in v2 mode its ``${{inputs.x}}`` reference."""
        self.cur.append(index)
        self.exists, self.plain = True, False
        if self.v2:
            self._emit(reference)
            return
        if self.script and self.script[-1] == "$" and self.quote != "'":
            self.script[-1] = "\\$"  # "$'...'" would be bash's escape-decoding quote
        self._emit((index, self.quote))

    def open_block(self) -> None:
        self._emit("$[[")
        self.block_at = len(self.script) - 1
        self.fresh = True

    def close_block(self) -> None:
        if self.script[-1] == "]":
            self._check_v2_literal("]")
        self.script.append("]]")  # pending padding stays pending: it moves outside the block
        self.block_at = None

    def finish(self) -> CommandWords:
        if self.quote:
            raise template_error(
                f"the quote {self.quote} is never closed. Fix: add the closing {self.quote}",
                self.template,
                self.quote_at,
            )
        self._end_word()
        self.script = _compact(self.script)
        return self


def _compact(parts: list) -> list:
    """Runs of literal characters joined into one string (values and slots stay apart)."""
    out: list = []
    for part in parts:
        if isinstance(part, str) and out and isinstance(out[-1], str):
            out[-1] += part
        else:
            out.append(part)
    return out


def quoted(value: str, quote: str | None) -> str:
    """``value`` for a shell script, inside ``quote`` (None, ' or ") at that point."""
    safe = shlex.quote(value)
    if quote is None:
        return safe
    if safe == value or not value:
        return value
    return f"{quote}{safe}{quote}"  # close the quote, insert the quoted value, reopen


def lex_text(text: str) -> CommandWords:
    """Words of plain text (no values), e.g. a v2 command after Azure's substitution."""
    lexer = CommandWords(text)
    lexer.text(text, ((0, 0),))
    return lexer.finish()
