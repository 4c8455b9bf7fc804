"""How the notebook shows things, in one place.

Our messages mark code with backticks; ``code_marks`` turns that into plain text (no
backticks) and HTML (``<code>``), so no view shows markdown.

Each view renders data the layers below compute (``core/summary.py``, ``core/rank_view.py``,
the rank backend's records) as HTML and plain text, so a notebook, a terminal and nbconvert
say the same thing.

- ``component``: the component's summary below its definition; its ``%distcomp list`` line
- ``live``: that summary kept true (redrawn through its display id) when the layout changes
- ``env``: ``%distcomp env``: the variables each rank sees
- ``status``: ``%distcomp status``: what each rank is doing
- ``progress``: the "ranks ready n of N" line while a world starts
- ``preview``: the run-settings panel's preview and its text fallback
- ``job``: a submitted job: name, status, layout, the studio link
- ``code_marks``: code in our messages drawn as code in HTML, plain in text (no backticks)
- ``diagnosis``: ``%distcomp diagnose``: a finished job's diagnosis from its logs
"""
