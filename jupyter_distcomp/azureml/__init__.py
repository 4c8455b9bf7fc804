"""Azure ML v2: the component a user debugged locally, as an azure-ai-ml job or component.

azure-ai-ml takes seconds to import, so nothing here imports it at module level: the functions
below import their submodule (and with it azure-ai-ml) when first called. ``%load_ext`` never
touches this package.

- :func:`to_azureml_job` / :func:`to_azureml_component`: build and validate (``convert``)
- :func:`export`: the job or component as YAML for ``az ml job create -f`` (``exporter``)
- :func:`make_ml_client`, :func:`submit`, :func:`wait_for_job`: talk to a workspace (``submission``)
- :func:`find_credentials`: is anyone signed in? (offline check, for demos and CI)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..model import Component


def to_azureml_job(component: Component, *args: Any, **kwargs: Any):
    from .convert import to_azureml_job as build

    return build(component, *args, **kwargs)


def to_azureml_component(component: Component, *args: Any, **kwargs: Any):
    from .convert import to_azureml_component as build

    return build(component, *args, **kwargs)


def export(component: Component, path: Any, **kwargs: Any):
    from .exporter import export as write

    return write(component, path, **kwargs)


def make_ml_client(*args: Any, **kwargs: Any):
    from .submission import make_ml_client as make

    return make(*args, **kwargs)


def submit(component: Component, ml_client: Any, **kwargs: Any):
    from .submission import submit as send

    return send(component, ml_client, **kwargs)


def find_credentials() -> list[str]:
    from .submission import find_credentials as find

    return find()


def wait_for_job(ml_client: Any, name: str, **kwargs: Any):
    from .submission import wait_for_job as wait

    return wait(ml_client, name, **kwargs)


__all__ = [
    "export",
    "find_credentials",
    "make_ml_client",
    "submit",
    "to_azureml_component",
    "to_azureml_job",
    "wait_for_job",
]
