"""Names and message shapes the kernel and the JupyterLab extension share, read from
``contracts.json``.

The extension bundles the same file (``labextension/src/contracts.ts`` and ``messages.ts``),
so a subcommand, a launcher, a component type, a rank state or a comm message defined here is
known to the other side. The comm's messages are a JSON Schema (``COMM_SCHEMA``): the kernel
checks the requests it receives against it, the extension the messages it receives, and its
TypeScript types are generated from it.
"""

from __future__ import annotations

import json
from enum import StrEnum
from pathlib import Path
from typing import Any

_DATA = json.loads((Path(__file__).with_name("contracts.json")).read_text(encoding="utf-8"))

#: ``%distcomp`` subcommands; any other first word of ``%%distcomp`` names a component
SUBCOMMANDS: tuple[str, ...] = tuple(_DATA["subcommands"])
#: launcher types, as the model names them
LAUNCHERS: tuple[str, ...] = tuple(_DATA["launchers"])
#: other spellings of a launcher (lower case) -> its name
LAUNCHER_ALIASES: dict[str, str] = dict(_DATA["launcher_aliases"])
#: v2 ``distribution.type`` (lower case) -> launcher
V2_DISTRIBUTIONS: dict[str, str] = dict(_DATA["v2_distributions"])
#: the ``type:`` of a component spec (v1.5 names, then v2's ``command``)
COMPONENT_TYPES: tuple[str, ...] = tuple(_DATA["component_types"])
#: how a spec may spell a parameter type (lower case) -> the normalised type
PARAMETER_TYPES: dict[str, str] = dict(_DATA["parameter_types"])
#: the parameter types as messages name them
PARAMETER_TYPE_NAMES: tuple[str, ...] = tuple(_DATA["parameter_type_names"])
#: v2 data types that are not parameters (besides names ending in directory, file, folder, path)
V2_DATA_TYPES: frozenset[str] = frozenset(_DATA["v2_data_types"])

#: the JupyterLab ranks panel's comm: its target name and the JSON Schema of its messages
COMM_TARGET: str = _DATA["comm"]["target"]
COMM_SCHEMA: dict[str, Any] = _DATA["comm"]["schema"]
_DEFINITIONS: dict[str, Any] = COMM_SCHEMA["definitions"]
#: what the panel may ask of a component's ranks
COMM_ACTIONS: tuple[str, ...] = tuple(_DEFINITIONS["RankAction"]["enum"])
#: the ``type`` of each message the kernel sends
COMM_MESSAGES: tuple[str, ...] = tuple(
    _DEFINITIONS[ref["$ref"].rsplit("/", 1)[1]]["properties"]["type"]["const"]
    for ref in _DEFINITIONS["KernelMessage"]["oneOf"]
)


class RankState(StrEnum):
    """The state of one rank, as every view and the JupyterLab panel name it."""

    STARTING = "starting"
    IDLE = "idle"
    BUSY = "busy"
    DEBUGGING = "debugging"  # stopped at a debugger prompt
    DEAD = "dead"


RANK_STATES: tuple[str, ...] = tuple(_DEFINITIONS["RankState"]["enum"])
if tuple(RankState) != RANK_STATES:  # as the extension's `named`: fails at load, and in tests
    raise RuntimeError(
        f"contracts.json lists the rank states {RANK_STATES}, RankState {tuple(RankState)}: "
        "edit both together."
    )


def launcher_name(text: str) -> str | None:
    """The launcher a spelling names (``Pytorch`` -> ``torch.distributed``), or None."""
    lowered = str(text).strip().lower()
    if lowered in LAUNCHERS:
        return lowered
    return LAUNCHER_ALIASES.get(lowered)
