"""The ``pilotfish-docstring`` directive: a module's docstring, rendered where a reference page needs it.

``taskqueues.requirements`` and ``matcher.limits`` state their rules and limits, with the reasons, in their
docstrings (reStructuredText tables). A reference page includes them as they are written, so the page and
the code cannot disagree. Cross-reference roles (``:mod:``, ``:func:``...) are shown as code: this site does
not document the Python API, so they would have nothing to link to.
"""

from __future__ import annotations

import importlib
import inspect
import re
from typing import Any

from docutils import nodes
from docutils.parsers.rst import Parser
from docutils.utils import new_document
from sphinx.application import Sphinx
from sphinx.util import logging
from sphinx.util.docutils import SphinxDirective

logger = logging.getLogger(__name__)


def flattened(text: str) -> str:
    """``:role:`target``` (or ``:role:`~target```) as a literal ``target``."""
    return re.sub(r":[\w:]+:`~?([^`<]+?)`", r"``\1``", text)


class DocstringDirective(SphinxDirective):
    required_arguments = 1
    has_content = False

    def run(self) -> list[nodes.Node]:
        module = importlib.import_module(self.arguments[0])
        self.env.note_dependency(module.__file__ or "")
        text = flattened(inspect.cleandoc(module.__doc__ or ""))
        if not text:
            raise self.error(f"{self.arguments[0]} has no docstring")
        document = new_document(f"{self.arguments[0]} (docstring)", self.state.document.settings)
        document.reporter.stream = None  # its messages go through Sphinx's log below, so -W fails on them
        Parser().parse(text, document)
        for message in list(document.findall(nodes.system_message)):
            if message["level"] >= 2:
                logger.warning(
                    "docstring of %s, line %s: %s",
                    self.arguments[0],
                    message.get("line", "?"),
                    message.astext().splitlines()[0],
                    location=self.get_location(),
                )
            message.parent.remove(message)
        return list(document.children)


def setup(app: Sphinx) -> dict[str, Any]:
    app.add_directive("pilotfish-docstring", DocstringDirective)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
