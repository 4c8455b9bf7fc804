"""One control per input and output of the spec, bound to ``runsettings.inputs`` / ``outputs``.

Why not ``ipywidgets.link``: the settings hold one dict for all inputs, a value set from Python
may be one the control cannot show (out of the spec's range, a wrong type), and an input can be
unset. So each field observes both sides itself: a change in the control writes the dict, a
change of the dict updates the control, and a value the control cannot show is left in the
settings untouched and marked at the control with the reason (never clamped behind the user's
back). Parameter defaults are pre-filled but not written to the settings: the spec applies them.
"""

from __future__ import annotations

from html import escape
from pathlib import Path
from typing import TYPE_CHECKING, Any

import ipywidgets as w

from ...core.bindings import default_output, is_remote
from ...core.secrets import (
    MASK,
    mask_secrets,
    masked_variable,
    masked_variable_repr,
)
from ...core.summary import bounds_text
from ...core.values import coerce_value
from ...errors import SpecError

if TYPE_CHECKING:
    from ...core.model import Input, Output
    from ...core.run_settings import RunSettings

LABEL_WIDTH = "150px"
#: an unbounded side of a BoundedIntText / BoundedFloatText (the largest exact JS integer)
UNBOUNDED = 2**53 - 1


def _value_widget(inp: Input) -> w.ValueWidget:
    kind = inp.param_type
    wide = w.Layout(width="260px", max_width="100%")
    if kind == "integer":
        low = -UNBOUNDED if inp.min is None else int(inp.min)
        high = UNBOUNDED if inp.max is None else int(inp.max)
        return w.BoundedIntText(value=max(low, min(0, high)), min=low, max=high, layout=wide)
    if kind == "number":
        lowest = -float(UNBOUNDED) if inp.min is None else float(inp.min)
        highest = float(UNBOUNDED) if inp.max is None else float(inp.max)
        return w.BoundedFloatText(
            value=max(lowest, min(0.0, highest)), min=lowest, max=highest, layout=wide
        )
    if kind == "boolean":
        return w.Checkbox(value=False, indent=False, layout=w.Layout(width="auto"))
    if kind == "enum":
        return w.Dropdown(options=list(inp.enum or ()), value=None, layout=wide)
    hint = "local path or azureml:// URI" if inp.is_data else (inp.description or "text")
    return w.Text(placeholder=hint, layout=w.Layout(width="360px", max_width="100%"))


def _shows(control: w.ValueWidget, value: Any) -> bool:
    """Can ``control`` show ``value`` exactly (no clamping, no coercion)?"""
    if isinstance(control, w.Dropdown):
        return value in control.options
    if isinstance(control, (w.BoundedIntText, w.BoundedFloatText)):
        return control.min <= value <= control.max
    return True


def _label(name: str, kind: str, tooltip: str) -> w.HTML:
    label = w.HTML(
        f"<span title='{escape(tooltip, quote=True)}'><b>{escape(name)}</b> "
        f"<small>{escape(kind)}</small></span>",
        layout=w.Layout(width=LABEL_WIDTH),
    )
    return label


class _Field:
    """What inputs and outputs share: a row with a label, an optional set/unset box, the
    control and a message (the reason a value is invalid, or a hint)."""

    css_prefix = "distcomp-input"
    trait = "inputs"

    def __init__(self, name: str, settings: RunSettings, control: w.ValueWidget, unsettable: bool):
        self.name, self.settings, self.control = name, settings, control
        control.add_class(f"{self.css_prefix}-{name}")
        self.toggle = w.Checkbox(
            value=False,
            indent=False,
            description="set",
            tooltip=f"checked: the run settings bind {name} to the value beside; unchecked: "
            + self.unset_meaning(),
            layout=w.Layout(width="auto"),
        )
        self.toggle.add_class(f"{self.css_prefix}-set-{name}")
        self.toggle.layout.visibility = "visible" if unsettable else "hidden"
        self.unsettable = unsettable
        self.message = w.HTML(layout=w.Layout(width="auto"))
        self.message.add_class("distcomp-message")
        self._syncing = False
        self.invalid = ""
        control.observe(self._from_control, names="value")
        self.toggle.observe(self._toggled, names="value")
        settings.observe(self._from_settings, names=self.trait)

    def row(self, label: w.HTML) -> w.HBox:
        box = w.HBox(
            [label, self.toggle, self.control, self.message],
            layout=w.Layout(flex_flow="row wrap", align_items="center"),
        )
        box.add_class("distcomp-field")
        return box

    # -- the settings side --------------------------------------------------------------
    def bound(self) -> dict[str, Any]:
        return getattr(self.settings, self.trait)

    def _write(self, value: Any) -> None:
        setter = self.settings.set_input if self.trait == "inputs" else self.settings.set_output
        setter(self.name, value)

    def close(self) -> None:
        self.settings.unobserve(self._from_settings, names=self.trait)

    # -- the control side ---------------------------------------------------------------
    def _from_control(self, change: Any) -> None:
        if self._syncing:
            return
        value = change["new"]
        held = self.bound().get(self.name)
        if isinstance(value, str) and self.masked(held) != held and MASK in value:
            # the box shows the held value with its credential masked: unchanged, nothing to
            # write; edited around the mask, the value must be typed again in full
            if value != self.masked(held):
                self.message.value = (
                    "<span style='color:#c00'>&#10007; the value's credential is shown as "
                    f"{MASK}: type or paste the whole value again</span>"
                )
            return
        if isinstance(value, str) and self.clears_when_empty() and not value.strip():
            value = None
        self._write(value)

    def _toggled(self, change: Any) -> None:
        if self._syncing:
            return
        if not change["new"]:
            self._write(None)
            return
        value = self.unmasked(self.control.value)
        if value is None or (isinstance(value, str) and self.clears_when_empty() and not value):
            value = self.value_when_set()
        if value is None:
            self._refresh()  # nothing to bind yet: the message says what is needed
        else:
            self._write(value)

    def _from_settings(self, change: Any = None) -> None:
        if change is not None and change["old"].get(self.name) == change["new"].get(self.name):
            return
        self._refresh()

    def _refresh(self) -> None:
        bound = self.bound()
        is_set = self.name in bound
        self._syncing = True
        try:
            self.toggle.value = is_set
            problem = ""
            if is_set:
                value = bound[self.name]
                try:
                    shown = self.check(value)
                except SpecError as exc:
                    problem = f"the settings hold {self.masked_repr(value)}: {exc.message}"
                else:
                    if _shows(self.control, shown):
                        self.control.value = self.masked(shown)
                    else:
                        problem = (
                            f"the settings hold {self.masked_repr(value)}, outside what this "
                            "control allows"
                        )
            else:
                self.show_unset()
            self.control.disabled = self.unsettable and not is_set and self.disable_when_unset()
        finally:
            self._syncing = False
        self.invalid = problem = mask_secrets(problem)
        self.control.remove_class("distcomp-invalid")
        if problem:
            self.control.add_class("distcomp-invalid")
            self.message.value = f"<span style='color:#c00'>&#10007; {escape(problem)}</span>"
        else:
            hint = mask_secrets(self.hint(bound.get(self.name), is_set))
            self.message.value = f"<span style='color:#888'>{escape(hint)}</span>" if hint else ""

    # -- what the control shows: credentials masked, by the field's name or the value ----
    def masked(self, value: Any) -> Any:
        """``value`` as the control (and so the saved widget state) holds it."""
        return masked_variable(self.name, value) if isinstance(value, str) else value

    def masked_repr(self, value: Any) -> str:
        return masked_variable_repr(self.name, value)

    def unmasked(self, value: Any) -> Any:
        """What the control's ``value`` stands for when the box is checked: itself, unless
        it is a masked value the field showed (then the value it masks)."""
        return value

    # -- per kind -----------------------------------------------------------------------
    def check(self, value: Any) -> Any:
        return value

    def unset_meaning(self) -> str:
        return "not set: the spec's default, if any"

    def value_when_set(self) -> Any:
        """What checking the box binds when the control holds nothing (None: nothing)."""
        return None

    def show_unset(self) -> None:
        if isinstance(self.control, w.Text):
            self.control.value = ""

    def clears_when_empty(self) -> bool:
        return True

    def disable_when_unset(self) -> bool:
        return not isinstance(self.control, w.Text)

    def hint(self, value: Any, is_set: bool) -> str:
        return ""


class InputField(_Field):
    """A spec input: Text, bounded number, Checkbox, Dropdown or a path Text (data inputs)."""

    def __init__(self, inp: Input, settings: RunSettings):
        self.inp = inp
        unsettable = inp.optional or (inp.default is None)
        super().__init__(inp.name, settings, _value_widget(inp), unsettable)
        kind = inp.param_type or f"data ({inp.data_type})"
        if inp.min is not None or inp.max is not None:
            kind += f" ({bounds_text(inp.min, inp.max)})"
        tip = (inp.description or "") + (" (optional)" if inp.optional else "")
        self.box = self.row(_label(inp.name, kind + (" optional" if inp.optional else ""), tip))
        self._refresh()

    def check(self, value: Any) -> Any:
        return coerce_value(self.inp, value)

    def show_unset(self) -> None:
        default = self.inp.default
        if default is not None and self.inp.is_parameter:
            try:
                default = coerce_value(self.inp, default)
            except SpecError:
                return
            if _shows(self.control, default):
                self.control.value = self.masked(default)
        else:
            super().show_unset()

    def unmasked(self, value: Any) -> Any:
        default = self.inp.default
        if isinstance(value, str) and MASK in value and self.inp.is_parameter:
            try:
                default = coerce_value(self.inp, default)
            except SpecError:
                return value
            if isinstance(default, str) and value == self.masked(default) != default:
                return default  # the spec's default, shown masked
        return value

    def clears_when_empty(self) -> bool:
        # an empty path means nothing; an empty string may be a value the user wants
        return self.inp.is_data or not self.inp.optional

    def hint(self, value: Any, is_set: bool) -> str:
        inp = self.inp
        if not is_set:
            if inp.is_parameter and inp.default is not None:
                return f"default {self.masked_repr(inp.default)}"
            return "unset (optional)" if inp.optional else "required: give a value"
        if inp.is_data and isinstance(value, str) and not is_remote(value):
            path = Path(value).expanduser()
            if not path.is_absolute():
                path = Path.cwd() / path
            if not path.exists():
                return f"no such file or folder here ({path}); a local run needs one"
        return ""


class OutputField(_Field):
    """A spec output: a local folder (or URI for Azure ML); unset means the default folder."""

    css_prefix = "distcomp-output"
    trait = "outputs"

    def __init__(self, out: Output, component_name: str, settings: RunSettings):
        self.out = out
        self.default = str(default_output(component_name, out.name))
        control = w.Text(placeholder=self.default, layout=w.Layout(width="360px", max_width="100%"))
        super().__init__(out.name, settings, control, unsettable=True)
        tip = (out.description or "") + f" (default: ./{self.default})"
        self.box = self.row(_label(out.name, f"output ({out.data_type})", tip))
        self._refresh()

    def hint(self, value: Any, is_set: bool) -> str:
        return "" if is_set else f"default ./{self.default}"

    def unset_meaning(self) -> str:
        return "the default folder"

    def value_when_set(self) -> Any:
        return self.default
