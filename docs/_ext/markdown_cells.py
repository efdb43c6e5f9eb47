"""Text from the code (a comment, a docstring line) as a cell of a Markdown table, shown as it is written."""

from __future__ import annotations

import re


def cell(text: str) -> str:
    """``text`` with what Markdown would take for markup escaped outside its code spans: a pipe would end the
    cell, ``<x>`` would be raw HTML, ``*`` and ``_`` emphasis, brackets a link. A pipe ends a cell even inside
    a code span, so it is escaped there too."""
    out = []
    for part in re.split(r"(`[^`]+`)", text):
        if part.startswith("`") and part.endswith("`") and len(part) > 1:
            out.append(part.replace("|", "\\|"))
        else:
            out.append(re.sub(r"([\\|<>*_\[\]])", r"\\\1", part))
    return "".join(out)
