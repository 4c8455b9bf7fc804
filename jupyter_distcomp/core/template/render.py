"""The command template: one engine, two renderings (a local argv, and Azure ML v2 syntax).

Why one engine: the same spec must run the same command locally and on Azure ML, so the
local argv and the v2 ``command`` string come from the same parse, and ``expand_azureml``
(Azure's own expansion rules) lets tests prove they agree.

Template rules (v1.5, as the Component SDK defines them, made precise here):

- ``{inputs.NAME}`` / ``{outputs.NAME}`` are placeholders. A parameter without a value takes
  its ``default``. An unbound placeholder outside any block is an error unless the input is
  declared ``optional``, in which case it renders as nothing.
- ``[ ... ]`` is an optional block (no nesting): if any placeholder inside has no value
  (missing or None after defaults) the whole block disappears, else only the brackets go.
  A block without placeholders just loses its brackets. Brackets are template syntax even
  inside shell quotes (the template is expanded before any shell sees the command).
- Escapes, read left to right: ``[[`` -> ``[``, ``]]`` -> ``]``, ``{{`` -> ``{``,
  ``}}`` -> ``}``. So ``{{inputs.x}}`` is the literal text ``{inputs.x}``, ``[[0,1]]`` is
  ``[0,1]``. A lone ``{`` or ``}`` that starts no placeholder is literal.
- Line breaks (a folded ``>-`` YAML string) are whitespace.
- Literal text is split into words like a POSIX shell (quotes, backslashes); a value is
  never split or interpreted: it is always exactly one argv item (or part of one, when
  glued to literal text: ``--lr={inputs.lr}`` -> ``--lr=0.1``), even ``a b; rm -rf x``.
- If the literal text needs a shell (``&&``, ``||``, ``;``, ``|``, ``&``, ``<``, ``>``,
  parentheses, backticks, ``$VAR`` / ``$(...)``, globs ``* ? [``, ``~``, a ``#`` comment or a
  leading ``NAME=value``), ``render_command`` returns ``["bash", "-c", script]`` (bash, as
  Azure ML's runtime runs commands) with every value inserted ``shlex.quote()``-d, so values
  still reach the program uninterpreted.
- Values: booleans -> ``True`` / ``False`` (what azure-ai-ml sends), numbers -> ``str()``
  (Python's shortest round-trip form: ``1e-05``, ``0.1``, ``100``), paths -> ``os.fspath``.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ...errors import SpecError, closest
from ..values import check_argument, check_scalar
from .words import CommandWords, lex_text, quoted, template_error

if TYPE_CHECKING:
    from ..model import Component, Input, Output

#: the shell a command that needs one runs under: bash, as Azure ML runs commands
SHELL = ("bash", "-c")
KINDS = ("inputs", "outputs")
_SPECIAL = re.compile(r"[\[\]{}]")
_NAME = re.compile(r"[^\s{}\[\]]*")
_TYPO = re.compile(r"\{(\w+)\.([\w.-]+)\}")
_V2_BLOCK = re.compile(r"\$\[\[(.*?)\]\]", re.S)
_V2_PLACEHOLDER = re.compile(r"\$\{\{\s*(inputs|outputs)\.([\w.-]+)\s*\}\}")
# azure-ai-ml's own test for "this input is optional" (entities/_job/_input_output_helpers.py)
_V2_OPTIONAL = re.compile(r"\[[\w\.\s-]*\$\{\{inputs\.([\w\.-]+)\}\}\]")


@dataclass(frozen=True)
class Placeholder:
    """One ``{inputs.x}`` / ``{outputs.y}`` in a template; ``offset`` is its 0-based start."""

    kind: str
    name: str
    offset: int
    optional: bool  # inside a [ ... ] block
    text: str  # as written, e.g. "{inputs.lr}"

    @property
    def v2(self) -> str:
        """The Azure ML v2 form, ``${{inputs.lr}}``."""
        return f"${{{{{self.kind}.{self.name}}}}}"


@dataclass(frozen=True)
class _Parsed:
    tokens: tuple  # ("lit", text, segments) | ("ph", index) | ("open", offset) | ("close", offset)
    placeholders: tuple[Placeholder, ...]
    blocks: tuple[tuple[int, int, tuple[int, ...]], ...]  # (open token, close token, placeholders)


@functools.lru_cache(maxsize=512)
def _parse(template: str) -> _Parsed:
    tokens: list = []
    phs: list[Placeholder] = []
    blocks: list = []
    open_at: int | None = None  # token index of the open block
    lit: list[str] = []
    segs: list[tuple[int, int]] = []  # (index in the literal, offset in the template)

    def add_lit(text: str, offset: int) -> None:
        segs.append((sum(map(len, lit)), offset))
        lit.append(text)

    def flush() -> None:
        if lit:
            tokens.append(("lit", "".join(lit), tuple(segs)))
            lit.clear()
            segs.clear()

    i, n = 0, len(template)
    while i < n:
        match = _SPECIAL.search(template, i)
        if match is None:
            add_lit(template[i:], i)
            break
        j = match.start()
        if j > i:
            add_lit(template[i:j], i)
        ch, nxt = template[j], template[j + 1 : j + 2]
        if nxt == ch:  # [[ ]] {{ }}: a literal character
            add_lit(ch, j)
            i = j + 2
        elif ch == "[":
            if open_at is not None:
                raise template_error(
                    "optional blocks cannot be nested: '[' inside a [ ... ] block. "
                    "Fix: close the first block, or write '[[' for a literal '['",
                    template,
                    j,
                )
            flush()
            open_at = len(tokens)
            tokens.append(("open", j))
            i = j + 1
        elif ch == "]":
            if open_at is None:
                raise template_error(
                    "']' closes no optional block. Fix: write ']]' for a literal ']', "
                    "or add the missing '['",
                    template,
                    j,
                )
            flush()
            tokens.append(("close", j))
            inside = tuple(t[1] for t in tokens[open_at:] if t[0] == "ph")
            blocks.append((open_at, len(tokens) - 1, inside))
            open_at = None
            i = j + 1
        elif ch == "{" and template.startswith(KINDS, j + 1):
            kind = "inputs" if template.startswith("inputs.", j + 1) else "outputs"
            if not template.startswith(kind + ".", j + 1):
                add_lit(ch, j)
                i = j + 1
                continue
            start = j + len(kind) + 2
            found = _NAME.match(template, start)
            name = found.group(0) if found else ""
            end = start + len(name)
            if not name or template[end : end + 1] != "}":
                what = "has no name" if not name else "is not closed with '}'"
                raise template_error(
                    f"placeholder '{{{kind}.{name}' {what}. Fix: write {{{kind}.NAME}}, "
                    "or '{{' for a literal '{'",
                    template,
                    j,
                )
            flush()
            phs.append(Placeholder(kind, name, j, open_at is not None, template[j : end + 1]))
            tokens.append(("ph", len(phs) - 1))
            i = end + 1
        else:
            typo = _TYPO.match(template, j) if ch == "{" else None
            guess = closest(typo.group(1), KINDS, cutoff=0.7) if typo else None
            if typo and guess:
                raise template_error(
                    f"'{typo.group(0)}' is not a placeholder. Did you mean "
                    f"{{{guess}.{typo.group(2)}}}? (write '{{{{' for a literal '{{')",
                    template,
                    j,
                )
            add_lit(ch, j)
            i = j + 1
    if open_at is not None:
        raise template_error(
            "'[' opens an optional block that is never closed. Fix: add ']', or write '[[' "
            "for a literal '['",
            template,
            tokens[open_at][1],
        )
    flush()
    return _Parsed(tuple(tokens), tuple(phs), tuple(blocks))


def placeholders(template: str) -> list[Placeholder]:
    """Every placeholder of a template, in order.

    Raises SpecError (with ``.offset``) on a malformed template: unbalanced brackets, an
    unclosed placeholder or quote, a misspelt ``{input.x}``. The spec loader checks every
    template with it.
    """
    parsed = _parse(template)
    _lex(template, frozenset())  # quotes and backslashes, with every block kept
    return list(parsed.placeholders)


def _merged(parsed: _Parsed, skip: set[int]) -> list:
    """The tokens left after dropping, with adjacent literals merged into one."""
    out: list = []
    for index, token in enumerate(parsed.tokens):
        if index in skip:
            continue
        if token[0] == "lit" and out and out[-1][0] == "lit":
            text, segments = out[-1][1], out[-1][2]
            shifted = tuple((k + len(text), off) for k, off in token[2])
            out[-1] = ("lit", text + token[1], segments + shifted)
        else:
            out.append(token)
    return out


@functools.lru_cache(maxsize=1024)
def _lex(template: str, dropped: frozenset[int]) -> CommandWords:
    parsed = _parse(template)
    skip = {i for i, t in enumerate(parsed.tokens) if t[0] in ("open", "close")}
    skip |= {i for i, t in enumerate(parsed.tokens) if t[0] == "ph" and t[1] in dropped}
    for open_i, close_i, inside in parsed.blocks:
        if dropped.intersection(inside):
            skip.update(range(open_i, close_i + 1))
    lexer = CommandWords(template)
    for token in _merged(parsed, skip):
        if token[0] == "lit":
            lexer.text(token[1], token[2])
        else:
            lexer.value(token[1], parsed.placeholders[token[1]].v2)
    return lexer.finish()


def _render_value(value: Any) -> str:
    if isinstance(value, bool):
        return "True" if value else "False"
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    return value if isinstance(value, str) else str(value)


def _assemble(lexer: CommandWords, values: dict[int, str]) -> list[str]:
    if lexer.shell:
        script = "".join(
            p if isinstance(p, str) else quoted(values[p[0]], p[1]) for p in lexer.script
        )
        return [*SHELL, script]
    return [
        word
        if isinstance(word, str)
        else "".join(p if isinstance(p, str) else values[p] for p in word)
        for word in lexer.words
    ]


def render_command(
    component: Component, inputs: dict[str, Any], outputs: dict[str, Any]
) -> list[str]:
    """The argv a local rank executes for ``component.command_template`` (see the module doc)."""
    template = component.command_template
    parsed = _parse(template)
    values: dict[int, str] = {}
    unbound: set[int] = set()
    for index, ph in enumerate(parsed.placeholders):
        declared = component.inputs if ph.kind == "inputs" else component.outputs
        spec = declared.get(ph.name)
        if spec is None:
            raise _undeclared(ph, component.inputs, component.outputs)
        given = (inputs if ph.kind == "inputs" else outputs).get(ph.name)
        if given is None:
            given = getattr(spec, "default", None)
        if given is not None:
            what = ph.kind[:-1]
            try:
                values[index] = check_argument(
                    ph.name, _render_value(check_scalar(ph.name, given, what)), what
                )
            except SpecError as exc:
                raise SpecError(exc.message, path=f"{ph.kind}.{ph.name}") from None
        elif ph.optional or spec.optional:
            unbound.add(index)
        else:
            raise _missing(ph, spec)
    return _assemble(_lex(template, frozenset(unbound)), values)


def check_template(template: str, inputs: Mapping[str, Any], outputs: Mapping[str, Any]) -> None:
    """Raise SpecError (with ``.offset``) if the template is malformed or names an input or
    output that is not declared."""
    errors = undeclared_placeholders(template, inputs, outputs)
    if errors:
        raise errors[0]


def undeclared_placeholders(
    template: str, inputs: Mapping[str, Any], outputs: Mapping[str, Any], *, v2: bool = False
) -> list[SpecError]:
    """A SpecError (with ``.offset``) for each placeholder that names an input or output not
    declared; raises SpecError if the template is malformed. ``v2``: the spec wrote the
    template as an Azure ML v2 command, so its messages quote ``${{inputs.x}}``."""
    return [
        _undeclared(ph, inputs, outputs, f"${{{{{ph.text[1:-1]}}}}}" if v2 else ph.text)
        for ph in placeholders(template)
        if ph.name not in (inputs if ph.kind == "inputs" else outputs)
    ]


def _undeclared(
    ph: Placeholder, inputs: Mapping[str, Any], outputs: Mapping[str, Any], shown: str = ""
) -> SpecError:
    declared = inputs if ph.kind == "inputs" else outputs
    other_kind = "outputs" if ph.kind == "inputs" else "inputs"
    other = outputs if ph.kind == "inputs" else inputs
    if ph.name in other:
        fix = f" '{ph.name}' is declared under {other_kind}: write {{{other_kind}.{ph.name}}}."
    else:
        guess = closest(ph.name, declared)
        fix = (
            f" Did you mean {{{ph.kind}.{guess}}}?"
            if guess
            else f" Fix: declare '{ph.name}' under {ph.kind}:, or correct the name."
        )
    return SpecError(
        f"placeholder {shown or ph.text} names no declared {ph.kind[:-1]}.{fix}",
        offset=ph.offset,
    )


def _missing(ph: Placeholder, spec: Input | Output) -> SpecError:
    if ph.kind == "outputs":
        fix = f"pass --output {ph.name}=PATH (or set it in the run settings)"
    else:
        example = "VALUE" if getattr(spec, "is_parameter", False) else "PATH"
        fix = f"pass --input {ph.name}={example} (or set it in the run settings), or set a default"
    return SpecError(
        f"{ph.kind[:-1]} '{ph.name}' has no value. Fix: {fix}.",
        line=getattr(spec, "line", None),
        path=f"{ph.kind}.{ph.name}",
        offset=ph.offset,
    )


@functools.lru_cache(maxsize=256)
def _to_azureml(template: str) -> str:
    parsed = _parse(template)
    plain_blocks: set[int] = set()  # blocks without placeholders just lose their brackets
    for open_i, close_i, inside in parsed.blocks:
        if not inside:
            plain_blocks.update((open_i, close_i))
    lexer = CommandWords(template, v2=True)
    for token in _merged(parsed, plain_blocks):
        kind = token[0]
        if kind == "lit":
            lexer.text(token[1], token[2])
        elif kind == "ph":
            lexer.value(token[1], parsed.placeholders[token[1]].v2)
        elif kind == "open":
            lexer.open_block()
        else:
            lexer.close_block()
    return "".join(lexer.finish().script)


def to_azureml(template: str, bound: Iterable[str] | None = None) -> str:
    """The template in Azure ML v2 syntax: ``${{inputs.x}}``, ``$[[--opt ${{inputs.x}}]]``.

    Unquoted whitespace (line breaks of a folded string) becomes single spaces; padding inside
    a block moves outside it (azure-ai-ml rejects ``$[[ ... ]]``); escapes become the literal
    characters. azure-ai-ml's client-side check recognises an optional input only in the form
    ``$[[--opt ${{inputs.x}}]]`` (letters, digits, ``_.-`` and spaces before one placeholder
    that ends the block), so ``$[[--opt=${{inputs.x}}]]`` fails it when ``x`` is unbound. For a
    job, pass ``bound`` (the names of the inputs that have values): blocks that Azure would
    drop anyway and that the check would reject are then left out, which is exact.
    """
    command = _to_azureml(template)
    if bound is None:
        return command
    bound = set(bound)

    def keep(match: re.Match) -> str:
        refs = {n for k, n in _V2_PLACEHOLDER.findall(match.group(1)) if k == "inputs"}
        accepted = set(_V2_OPTIONAL.findall(match.group(0)))
        return match.group(0) if refs - bound <= accepted else ""

    trimmed = _V2_BLOCK.sub(keep, command)
    return command if trimmed == command else "".join(lex_text(trimmed).script)


def check_azureml(command: str) -> None:
    """Raise SpecError (with ``.offset``) if a v2 command has an unclosed or nested ``$[[``,
    an unclosed ``${{`` or a ``${{...}}`` that names no input or output."""
    block_end = -1
    for match in re.finditer(r"\$\[\[|\$\{\{", command):
        start = match.start()
        if match.group() == "$[[":
            if start < block_end:
                raise template_error(
                    "optional blocks cannot be nested: '$[[' inside a $[[ ... ]] block. "
                    "Fix: close the first block with ']]'",
                    command,
                    start,
                )
            block_end = command.find("]]", start + 3)
            if block_end < 0:
                raise template_error(
                    "'$[[' opens an optional block that is never closed. Fix: add ']]'",
                    command,
                    start,
                )
            continue
        end = command.find("}}", start + 3)
        if end < 0:
            raise template_error(
                "'${{' opens a placeholder that is never closed. Fix: write ${{inputs.NAME}}",
                command,
                start,
            )
        if not _V2_PLACEHOLDER.fullmatch(command, start, end + 2):
            raise template_error(
                f"'{command[start : end + 2]}' is not a placeholder. Fix: write "
                "${{inputs.NAME}} or ${{outputs.NAME}}",
                command,
                start,
            )


def from_azureml(command: Any) -> str:
    """A v2 command (``${{inputs.x}}``, ``$[[...]]``) in the template syntax of the model."""
    if command is None:
        return ""
    text = str(command).replace("[", "[[").replace("]", "]]")
    text = text.replace("$[[[[", "[").replace("]]]]", "]")
    out = []
    last = 0
    for match in _V2_PLACEHOLDER.finditer(text):
        out.append(text[last : match.start()].replace("{", "{{").replace("}", "}}"))
        out.append(f"{{{match.group(1)}.{match.group(2)}}}")
        last = match.end()
    out.append(text[last:].replace("{", "{{").replace("}", "}}"))
    return "".join(out)


def expand_azureml(command: str, inputs: dict[str, Any], outputs: dict[str, Any]) -> list[str]:
    """Expand a v2 command as Azure ML does, then split it as the shell on the compute would.

    ``$[[...]]`` blocks with an unbound input or output go, ``${{...}}`` are replaced by the
    raw values (which the shell then splits: Azure does not quote them), and the result is
    split into an argv, or ``["bash", "-c", command]`` when it needs a shell.
    """

    def value(kind: str, name: str) -> str | None:
        given = (inputs if kind == "inputs" else outputs).get(name)
        return None if given is None else _render_value(given)

    def block(match: re.Match) -> str:
        refs = _V2_PLACEHOLDER.findall(match.group(1))
        return "" if any(value(k, n) is None for k, n in refs) else match.group(1)

    def substitute(match: re.Match) -> str:
        found = value(match.group(1), match.group(2))
        if found is None:
            raise SpecError(
                f"{match.group(0)} has no value. Fix: bind {match.group(1)[:-1]} "
                f"'{match.group(2)}', or put it in a $[[...]] block if it is optional."
            )
        return found

    expanded = _V2_PLACEHOLDER.sub(substitute, _V2_BLOCK.sub(block, command))
    lexer = lex_text(expanded)
    if lexer.shell:
        return [*SHELL, "".join(lexer.script)]
    return [word if isinstance(word, str) else "".join(word) for word in lexer.words]
