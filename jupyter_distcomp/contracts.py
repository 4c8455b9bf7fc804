"""Names the kernel and the JupyterLab extension share, read from ``contracts.json``.

The extension bundles the same file (``labextension/src/contracts.ts``), so a subcommand, a
launcher, a component type or a comm message named in one is known to the other.
"""

from __future__ import annotations

import json
from pathlib import Path

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
#: the JupyterLab ranks panel's comm: target name, actions, message types, rank states
COMM_TARGET: str = _DATA["comm"]["target"]
COMM_ACTIONS: tuple[str, ...] = tuple(_DATA["comm"]["actions"])
COMM_MESSAGES: tuple[str, ...] = tuple(_DATA["comm"]["messages"])
RANK_STATES: tuple[str, ...] = tuple(_DATA["comm"]["rank_states"])


def launcher_name(text: str) -> str | None:
    """The launcher a spelling names (``Pytorch`` -> ``torch.distributed``), or None."""
    lowered = str(text).strip().lower()
    if lowered in LAUNCHERS:
        return lowered
    return LAUNCHER_ALIASES.get(lowered)
