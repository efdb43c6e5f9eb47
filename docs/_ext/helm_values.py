"""The ``pilotfish-helm-values`` directive: every value of the Helm chart, from ``helm/pilotfish/values.yaml``.

``values.yaml`` documents each key with a ``# --`` comment above it (continued on ``#`` lines indented
further), as helm-docs reads them. One row per documented key: its dotted path, its default (read by a YAML
parser from the same file) and the comment. A key the chart adds with its comment appears here by itself.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml
from docutils import nodes
from docutils.statemachine import StringList
from markdown_cells import cell
from sphinx.application import Sphinx
from sphinx.util.docutils import SphinxDirective

VALUES = Path(__file__).resolve().parents[2] / "helm" / "pilotfish" / "values.yaml"
_KEY = re.compile(r"^(\s*)([A-Za-z_][\w-]*):(.*)$")


def documented(text: str) -> list[tuple[str, str]]:
    """(dotted path, comment) of every key headed by a ``# --`` comment, in the file's order."""
    found: list[tuple[str, str]] = []
    stack: list[tuple[int, str]] = []
    comment: list[str] | None = None
    block_indent: int | None = None  # inside a block scalar (``key: |``): lines indented deeper are its text
    for line in text.splitlines():
        indent = len(line) - len(line.lstrip())
        if block_indent is not None:
            if not line.strip() or indent > block_indent:
                continue
            block_indent = None
        stripped = line.strip()
        if stripped.startswith("# --"):
            comment = [stripped[4:].strip()]
            continue
        if stripped.startswith("#"):
            if comment is not None and re.match(r"#\s{2,}\S", stripped):
                comment.append(stripped[1:].strip())
            continue
        match = _KEY.match(line)
        if not match:
            comment = None
            continue
        while stack and stack[-1][0] >= indent:
            stack.pop()
        stack.append((indent, match.group(2)))
        if comment is not None:
            found.append((".".join(key for _, key in stack), " ".join(comment)))
        comment = None
        if match.group(3).strip() in ("|", "|-", ">", ">-"):
            block_indent = indent
    return found


def default(values: Any, path: str) -> str:
    for key in path.split("."):
        values = values[key]
    if isinstance(values, str) and "\n" in values:
        return "(a multi-line text: see values.yaml)"
    if isinstance(values, dict) and values:
        return "(the keys below)" if all(not isinstance(v, dict) or v for v in values.values()) else "…"
    return f"`{json.dumps(values)}`"


class HelmValuesDirective(SphinxDirective):
    has_content = False

    def run(self) -> list[nodes.Node]:
        self.env.note_dependency(str(VALUES))
        text = VALUES.read_text()
        values = yaml.safe_load(text)
        rows = ["| value | default | what it is |", "|---|---|---|"]
        for path, comment in documented(text):
            rows.append(f"| `{path}` | {cell(default(values, path))} | {cell(comment)} |")
        container = nodes.container()
        self.state.nested_parse(StringList(rows, source=str(VALUES)), self.content_offset, container)
        return list(container.children)


def setup(app: Sphinx) -> dict[str, Any]:
    app.add_directive("pilotfish-helm-values", HelmValuesDirective)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
