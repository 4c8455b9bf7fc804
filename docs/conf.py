"""Sphinx configuration of the documentation site (built by docs/build.py)."""

project = "jupyter-distcomp"
author = "the jupyter-distcomp developers"
extensions = ["myst_nb"]
# the pages are Markdown (MyST); the shipped notebooks are pages too, copied in by build.py
source_suffix = {".md": "myst-nb", ".ipynb": "myst-nb"}
exclude_patterns = ["_build", "build.py", "_readme.md", "**/.ipynb_checkpoints"]
myst_enable_extensions = ["colon_fence"]
myst_heading_anchors = 3
# build.py passes the mode: "off" for notebooks the test suite has already executed,
# "force" for `make docs`, which runs them here
nb_execution_mode = "off"
nb_execution_timeout = 600
nb_execution_raise_on_error = True
# its pdb prompts are answered through a kernel's stdin, which a notebook executor cannot do
nb_execution_excludepatterns = ["notebooks/debugging.ipynb"]
# a `%%distcomp` cell is YAML below a magic line: Pygments highlights it in relaxed mode
suppress_warnings = ["misc.highlighting_failure"]
html_theme = "pydata_sphinx_theme"
html_title = "jupyter-distcomp"
html_theme_options = {"navigation_with_keys": False, "show_toc_level": 2}
