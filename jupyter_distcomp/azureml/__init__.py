"""Azure ML v2: the component a user debugged locally, as an azure-ai-ml job or component.

azure-ai-ml takes seconds to import, so no module here imports it at module level: each
function imports what it needs of it when first called. ``%load_ext`` never imports this
package.

- :func:`to_azureml_job` / :func:`to_azureml_component`: build and validate (``convert``)
- :func:`export`: the job or component as YAML for ``az ml job create -f`` (``exporter``)
- :func:`make_ml_client`, :func:`submit`, :func:`wait_for_job`: talk to a workspace (``submission``)
- before submitting, the layout against the compute: max nodes, GPUs per node (``preflight``)
- ``submit(..., diagnose=True)``: the job's code snapshot carries our rank side and its command
  the prefix that loads it: each rank says where it is on a stall, SIGTERM or a failure
  (``snapshot``)
- ``submit(..., debug=True)``: the notebook can attach to the running job: the SSH service on
  every node, the rank side of attach in the snapshot (``debugged``); where each node's SSH
  service is once it runs (``attach``)
- :func:`find_credentials`: is anyone signed in? (offline check, for demos and CI)
- the values of a job follow ``core/bindings.py``, as local runs do (``values``)
"""

from __future__ import annotations

from .convert import to_azureml_component, to_azureml_job
from .exporter import export
from .submission import find_credentials, make_ml_client, submit, wait_for_job

__all__ = [
    "export",
    "find_credentials",
    "make_ml_client",
    "submit",
    "to_azureml_component",
    "to_azureml_job",
    "wait_for_job",
]
