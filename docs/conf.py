"""Sphinx configuration of the Pilotfish documentation (``bash scripts/docs.sh`` builds it).

Markdown pages (MyST), the command reference generated from the click commands (sphinx-click), the
settings reference generated from :mod:`taskqueues.settings` (``_ext/settings_reference.py``). The build
runs with ``-W --keep-going``: a broken internal link, a page missing from the toctree or any other
warning fails it.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE / "_ext")]

from taskqueues import __version__  # noqa: E402  (after the path is set)

project = "Pilotfish"
author = "the Pilotfish developers"
copyright = "the Pilotfish developers"
version = release = __version__

extensions = ["myst_parser", "sphinx_click", "settings_reference", "docstring_page", "helm_values"]
source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "Thumbs.db", ".DS_Store"]
templates_path: list[str] = []

# Broken references are errors: every internal link, and every cross-reference Sphinx resolves.
nitpicky = True
# A Markdown link to a heading of another page ([text](page.md#heading)) resolves through these anchors.
myst_heading_anchors = 3
myst_enable_extensions = ["colon_fence", "deflist"]

html_theme = "alabaster"
html_title = f"Pilotfish {version}"
html_static_path: list[str] = []


def _notes_toctree(app: Any, docname: str, source: list[str]) -> None:
    """Lists the notes written beside the site (``docs/<topic>-notes.md``) on the index page until they are
    folded into their pages, so a notes file is built (and checked) instead of failing as a page outside
    every toctree; with none, the index has no such section. A notes file headed by a second-level heading
    gets a title of its own (MyST wants a page to start at the first level)."""
    if docname.endswith("-notes") and "/" not in docname:
        first = next((line for line in source[0].splitlines() if line.strip()), "")
        if not first.startswith("# "):
            source[0] = f"# Notes: {docname.removesuffix('-notes')}\n\n{source[0]}"
        return
    if docname != root_doc:
        return
    notes = sorted(path.stem for path in HERE.glob("*-notes.md"))
    toctree = "```{toctree}\n:caption: Notes to fold in\n:hidden:\n\n" + "\n".join(notes) + "\n```\n" if notes else ""
    source[0] = source[0].replace(NOTES_MARK, toctree)


NOTES_MARK = "<!-- the notes to fold in are listed here by conf.py -->"


def setup(app: Any) -> None:
    app.connect("source-read", _notes_toctree)
