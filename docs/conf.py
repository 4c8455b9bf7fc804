"""Sphinx configuration of the documentation site (built by docs/build.py)."""

project = "jupyter-distcomp"
author = "the jupyter-distcomp developers"
extensions = ["myst_nb"]
# the pages are Markdown (MyST); the shipped notebooks are pages too, copied in by build.py
source_suffix = {".md": "myst-nb", ".ipynb": "myst-nb"}
exclude_patterns = ["_build", "build.py", "_readme.md", "**/.ipynb_checkpoints"]
myst_enable_extensions = ["colon_fence"]
myst_heading_anchors = 3
# the notebooks come executed: build.py runs them (docs/execute.py, which answers the
# debugging notebook's prompts), or the test suite passes the copies it has just run
nb_execution_mode = "off"
# a `%%distcomp` cell is YAML below a magic line: Pygments highlights it in relaxed mode
suppress_warnings = ["misc.highlighting_failure"]
html_theme = "pydata_sphinx_theme"
html_title = "jupyter-distcomp"
# the header holds the two sections (guides, notebooks); the sidebar lists the pages of the
# one a page is in, with their sections; "On this page" the page's own sub-headings
html_theme_options = {
    "navigation_with_keys": False,
    "show_toc_level": 2,
    "show_nav_level": 1,
    "navigation_depth": 2,
}
# the landing page is its own guide to the site: no sidebar beside it
html_sidebars = {"index": []}
