"""Runs a shipped notebook top to bottom in a real kernel, as a person runs it, for the
documentation site (docs/build.py) and the test suite (tests/test_notebooks.py).

nbclient runs the cells; a cell that asks for input (the debugger's prompts of
notebooks/debugging.ipynb) is answered with the lines its metadata scripts
(``"distcomp": {"answers": [...]}``), each shown in the output as a notebook shows an
answered prompt (``(Pdb ranks 0-2) p x``). A cell that asks more or fewer times than it
scripts fails the run. Then the outputs are made to read as JupyterLab shows them: the lines
one stream printed in a row are one output (each rank's line arrives as its own message),
and the status line of a silent run cell (emptied at its end) is left out.

    python docs/execute.py NOTEBOOK OUT   # writes the executed notebook to OUT
"""

from __future__ import annotations

import asyncio
import shutil
import sys
from pathlib import Path
from typing import Any

#: seconds the kernel's output before a prompt gets to arrive before the answer is shown
PROMPT_SETTLE = 0.3
CELL_TIMEOUT = 600


def answers_of(cell: Any) -> list[str]:
    """The lines a cell's metadata scripts for its prompts."""
    return list(cell.get("metadata", {}).get("distcomp", {}).get("answers", []))


def tidy(notebook: Any) -> Any:
    """Each cell's outputs as JupyterLab shows them: consecutive text of one stream as one
    output, and no emptied status line of a silent cell."""
    for cell in notebook.cells:
        if cell.cell_type != "code":
            continue
        merged: list[Any] = []
        for output in cell.get("outputs", []):
            if output.get("metadata", {}).get("distcomp_status") and not output.get("data"):
                continue
            last = merged[-1] if merged else None
            if (
                output.output_type == "stream"
                and last is not None
                and last.output_type == "stream"
                and last.name == output.name
            ):
                last.text += output.text
            else:
                merged.append(output)
        cell.outputs = merged
    return notebook


def execute(path: Path, workdir: Path, copy_folder: bool = True) -> Any:
    """The notebook at ``path`` executed in ``workdir`` (a copy of its folder unless
    ``copy_folder`` is False), tidied; raises on a failed cell or a prompt not scripted."""
    import nbformat

    if copy_folder:
        shutil.copytree(path.parent, workdir, ignore=shutil.ignore_patterns("outputs", ".ipynb_*"))
    notebook = nbformat.read(workdir / path.name, as_version=4)
    client = _answering_client()(
        notebook,
        timeout=CELL_TIMEOUT,
        kernel_name="python3",
        resources={"metadata": {"path": str(workdir)}},
    )
    client.execute()
    return tidy(notebook)


class UnscriptedPrompt(RuntimeError):
    """A cell asked for input more or fewer times than its metadata scripts."""


def _answering_client() -> Any:
    """nbclient's client, with the kernel's stdin answered from each cell's scripted lines
    (nbclient imported here, on first use)."""
    import nbformat
    from nbclient import NotebookClient

    class AnsweringClient(NotebookClient):
        async def async_start_new_kernel_client(self) -> Any:
            client = await super().async_start_new_kernel_client()
            client.allow_stdin = True
            return client

        async def async_execute_cell(
            self, cell: Any, cell_index: int, *args: Any, **kwargs: Any
        ) -> Any:
            scripted, asked = answers_of(cell), []
            answering = asyncio.ensure_future(self._answer(cell, scripted, asked))
            try:
                result = await super().async_execute_cell(cell, cell_index, *args, **kwargs)
            finally:
                answering.cancel()
            if len(asked) != len(scripted):
                raise UnscriptedPrompt(
                    f"cell {cell_index} ({cell.source[:40]!r}) asked {len(asked)} time(s) "
                    f"({asked}); its metadata scripts {len(scripted)} answer(s): {scripted}"
                )
            return result

        async def _answer(self, cell: Any, scripted: list[str], asked: list[str]) -> None:
            while True:
                message = await self.kc.get_stdin_msg()
                prompt = message["content"].get("prompt", "")
                answer = scripted[len(asked)] if len(asked) < len(scripted) else "c"
                asked.append(prompt)
                await asyncio.sleep(PROMPT_SETTLE)  # what came before the prompt shows first
                cell.outputs.append(
                    nbformat.v4.new_output("stream", name="stdout", text=f"{prompt}{answer}\n")
                )
                self.kc.input(answer)

    return AnsweringClient


def main() -> None:
    import nbformat

    if len(sys.argv) != 3:
        sys.exit(__doc__.splitlines()[-1].strip())
    path, out = Path(sys.argv[1]).resolve(), Path(sys.argv[2]).resolve()
    workdir = out.parent / f".{path.stem}-run"
    shutil.rmtree(workdir, ignore_errors=True)
    nbformat.write(execute(path, workdir), out)


if __name__ == "__main__":
    main()
