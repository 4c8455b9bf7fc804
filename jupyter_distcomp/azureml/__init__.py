"""Azure ML v2: the component a user debugged locally, as an azure-ai-ml job or component.

azure-ai-ml takes seconds to import, so no module here imports it at module level: each
function imports what it needs of it when first called. ``%load_ext`` never imports this
package. Its public names: :func:`to_azureml_job`, :func:`to_azureml_component`,
:func:`export`, :func:`make_ml_client`, :func:`submit`, :func:`wait_for_job`,
:func:`find_credentials` (is anyone signed in? an offline check, for demos and CI).

- ``convert``: Component + run settings -> an azure-ai-ml job or component, validated
- ``checks``: what a conversion refuses or warns about, before anything is uploaded
- ``environment``: the spec's ``environment:`` section as azure-ai-ml sees it
- ``values``: a job's input and output values, bound by ``core/bindings.py`` as local runs are
- ``exporter``: the job or component as YAML for ``az ml job create -f``
- ``submission``: the client, ``submit`` and ``wait_for_job``: talk to a workspace
- ``preflight``: before submitting, the layout against the compute (max nodes, GPUs per node)
- ``snapshot``: ``submit(..., diagnose=True)``: the job's code snapshot carries our rank side
  and its command the prefix that loads it, so each rank says where it is on a stall, SIGTERM
  or a failure
- ``failures``: azure-core, azure-identity and azure-ai-ml exceptions -> one clear AzureMLError
- ``interactive``: the job's interactive services (JupyterLab, VS Code, SSH) on every node
- ``logs``: every rank's log of a submitted job: read, followed, fetched
- ``diagnose``: ``%distcomp diagnose``: a finished job's downloaded logs, read and diagnosed
- ``flight_recorder``: Flight Recorder dumps among a job's outputs, given to torch's analyser
- ``debugged``: ``submit(..., debug=True)``: the SSH service on every node and the rank side of
  attach in the job's snapshot, so the notebook can attach to the running job
- ``attach``: where each node's SSH service of a running job is (``%distcomp attach``)
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
