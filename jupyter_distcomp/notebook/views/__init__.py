"""How the notebook shows things, in one place: the component's summary (kept live below its
definition), ``%distcomp env`` and ``status`` tables, the start-up progress line, the
run-settings panel's preview and text fallback, a submitted job, and a finished job's
diagnosis from its logs (``diagnosis``).

Our messages mark code with backticks; ``code_marks`` turns that into plain text (no
backticks) and HTML (``<code>``), so no view shows markdown.

Each view renders data the layers below compute (``core/summary.py``, ``core/rank_view.py``,
the rank backend's records) as HTML and plain text, so a notebook, a terminal and nbconvert
say the same thing.
"""
