"""Every error a user can see, in one place.

Each error says what is wrong, where (YAML line and key, or rank) and how to fix it.
``_render_traceback_`` makes IPython show only that message, not our internals, for any
subclass (IPython itself hides the traceback only for exactly ``UsageError``), while the
cell still fails, so nbclient and tests see the failure. No IPython import here: the pure
modules (spec, template, layout) raise these too.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable
from typing import Any

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def strip_ansi(text: str) -> str:
    """``text`` without terminal colour codes."""
    return _ANSI.sub("", text)


class DistcompError(Exception):
    """Base class of all user-facing errors of jupyter-distcomp."""

    def _render_traceback_(self) -> list[str]:
        name = type(self).__name__
        return [
            f"{name}: {line}" if i == 0 else line for i, line in enumerate(str(self).splitlines())
        ]


class SpecError(DistcompError, ValueError):
    """A component spec (or a value bound to it) is invalid.

    ``line`` and ``column`` are 1-based positions in the YAML text of the offending key or
    value (None when the error is not about a place in the text); ``path`` is the dotted key
    path such as ``inputs.lr.default``. ``offset`` is the 0-based character offset in the
    command template for template errors (core/spec_parsing/loader.py maps it to a YAML line).

    A spec with several mistakes raises one SpecError for all of them: the first (by line)
    gives ``message``, ``line``, ``column`` and ``path``; ``errors`` lists every one of them,
    and ``str()`` has a line for each, as the editor marks them.
    """

    def __init__(
        self,
        message: str,
        *,
        line: int | None = None,
        column: int | None = None,
        path: str | None = None,
        source_name: str | None = None,
        offset: int | None = None,
        others: Iterable[SpecError] = (),
    ):
        self.message = message
        self.offset = offset  # 0-based character offset in a command template, if about one
        self.line = line
        self.column = column
        self.path = path
        self.source_name = source_name
        self.errors: list[SpecError] = [self, *others]
        if len(self.errors) == 1:
            super().__init__(self._format())
        else:
            where = f" in {source_name}" if source_name else ""
            lines = [f"{len(self.errors)} errors{where}:"]
            lines += [f"  {e._format(with_source=False)}" for e in self.errors]
            super().__init__("\n".join(lines))

    @classmethod
    def of(cls, errors: list[SpecError]) -> SpecError:
        """One error for ``errors`` (not empty): the first by line, carrying the others."""
        unique = list({(e.line, e.message): e for e in errors}.values())
        unique.sort(key=lambda e: (e.line or 0, e.column or 0))
        first = unique[0]
        if len(unique) == 1:
            return first
        return cls(
            first.message,
            line=first.line,
            column=first.column,
            path=first.path,
            source_name=first.source_name,
            others=unique[1:],
        )

    def _format(self, with_source: bool = True) -> str:
        where = []
        if self.source_name and with_source:
            where.append(self.source_name)
        if self.line is not None:
            where.append(f"line {self.line}" + (f", column {self.column}" if self.column else ""))
        if self.path:
            where.append(f"key '{self.path}'")
        prefix = f"{', '.join(where)}: " if where else ""
        return prefix + self.message


class SpecWarning(UserWarning):
    """Something in a spec that still loads but is probably a mistake (say, an unknown key)."""


class LayoutError(DistcompError, ValueError):
    """Invalid run settings (instance_count, process_count_per_node, ...)."""


class RankError(DistcompError, RuntimeError):
    """Something went wrong on one or more local ranks.

    ``sections`` are ``(heading, lines)`` pairs under the message: one per distinct failure
    ("ranks 1-3" and their traceback, a dead rank and why, a stuck rank's stack). IPython
    shows them in colour through ``_render_traceback_``; ``str()`` has them as plain text.
    """

    #: the outcome of a ``%distcomp command`` run that failed (a ``CommandResult``)
    result: Any = None

    def __init__(
        self,
        message: str = "",
        *,
        sections: Iterable[tuple[str, Iterable[str]]] | None = None,
        fix: str | None = None,
    ):
        self.summary = message
        self.sections = [(heading, list(lines)) for heading, lines in sections or []]
        self.fix = fix
        plain = [message]
        for heading, lines in self.sections:
            plain.append(f"--- {heading} ---")
            plain.extend(strip_ansi(line) for line in lines)
        if fix:
            plain.append(fix)
        super().__init__("\n".join(plain))

    def _render_traceback_(self) -> list[str]:
        if not self.sections:
            return super()._render_traceback_()
        lines = [f"\x1b[0;31m{type(self).__name__}\x1b[0m: {self.summary}"]
        for heading, body in self.sections:
            lines.append(f"\x1b[1m--- {heading} ---\x1b[0m")
            lines.extend(body)
        if self.fix:
            lines.append(self.fix)
        return lines


class RankInterrupt(RankError, KeyboardInterrupt):
    """The user interrupted a cell on the ranks (Ctrl-C, the toolbar, the ranks panel).

    A ``KeyboardInterrupt``, so code that handles Ctrl-C still does; shown as a
    :class:`RankError`: the line, then where each rank was when it stopped, grouped.
    """


class InternalError(DistcompError, RuntimeError):
    """An error raised inside jupyter-distcomp that is not one of ours: shown as its message
    alone, never the package's frames; the full traceback stays on ``__cause__``, which
    ``%tb`` shows. A system error (a path that does not exist, a full disk) is the user's to
    fix and says only what the system said; anything else is a bug to report."""

    def __init__(self, exc: BaseException):
        message = f"{type(exc).__name__}: {exc}"
        if not isinstance(exc, OSError):
            message += (
                "\n(an unexpected error inside jupyter-distcomp: please report it with the "
                "traceback that `%tb` shows)"
            )
        super().__init__(message)


class AzureMLError(DistcompError, RuntimeError):
    """Export or submission to Azure ML failed.

    ``status_code`` is the HTTP status the service answered, if any; ``job`` the job that was
    built but not submitted, so nothing the user prepared is lost.
    """

    status_code: int | None = None
    job: Any = None


class JobLogsError(DistcompError, ValueError):
    """A folder of a job's logs that ``%distcomp diagnose`` cannot read: missing, a file,
    or holding no rank's log."""


class AzureMLWarning(UserWarning):
    """A job that builds, but whose command on Azure ML will differ from the local run.

    ``input_name`` names the input whose value causes it.
    """

    def __init__(self, message: str, input_name: str | None = None):
        super().__init__(message)
        self.input_name = input_name


def closest(name: str, choices: Iterable[str], cutoff: float = 0.6) -> str | None:
    """The closest valid name to a misspelt one (case-insensitive), or None."""
    choices = list(choices)
    lowered = {c.lower(): c for c in choices}
    if name.lower() in lowered:
        return lowered[name.lower()]
    match = difflib.get_close_matches(name.lower(), list(lowered), n=1, cutoff=cutoff)
    return lowered[match[0]] if match else None


def did_you_mean(name: str, choices: Iterable[str]) -> str:
    """' Did you mean 'x'?' or an empty string."""
    best = closest(name, choices)
    return f" Did you mean '{best}'?" if best else ""
