"""The ``pilotfish-settings`` directive: the settings reference, generated from :mod:`taskqueues.settings`.

One row per field of :class:`taskqueues.settings.Settings`, in the code's order: its name, type and default
(read from the dataclass itself), the ``PILOTFISH_*`` variable that overrides it, and what it means: the
comment written above the field in ``settings.py``, else the comment beside it in the configuration
example of ``operator/configuration.md``. The module's docstring comes first. A setting the code has and the
table lacks cannot happen: the table is the code.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import re
from pathlib import Path
from typing import Any

from docutils import nodes
from docutils.statemachine import StringList
from markdown_cells import cell
from sphinx.application import Sphinx
from sphinx.util.docutils import SphinxDirective

EXAMPLE_PAGE = "operator/configuration.md"


def field_comments(source: str, class_name: str) -> dict[str, str]:
    """The comment lines written directly above each field of ``class_name`` in ``source``, joined."""
    lines = source.splitlines()
    tree = ast.parse(source)
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == class_name)
    comments: dict[str, str] = {}
    for node in cls.body:
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
            continue
        above: list[str] = []
        row = node.lineno - 2
        while row >= 0 and lines[row].strip().startswith("#"):
            above.insert(0, lines[row].strip().lstrip("#").strip())
            row -= 1
        # a comment of three words or fewer titles the fields below it ("# pilots"): it says nothing of one
        above = [line for line in above if len(line.split()) > 3]
        if above:
            comments[node.target.id] = " ".join(above)
    return comments


def example_comments(page: Path) -> dict[str, str]:
    """``name = value  # comment`` lines of the first TOML block of the configuration page."""
    block = re.search(r"```toml\n(.*?)```", page.read_text(), re.S)
    found: dict[str, str] = {}
    for line in block.group(1).splitlines() if block else []:
        match = re.match(r"(\w+)\s*=.*?#\s*(.+)$", line)
        if match:
            found[match.group(1)] = match.group(2).strip()
    return found


def shown_default(name: str, value: Any) -> str:
    if name == "state_dir":
        return "`~/.pilotfish`"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return f"`{value!r}`" if isinstance(value, str) else f"`{value}`"


def markdown(text: str) -> str:
    """reStructuredText of a docstring as the Markdown the page is parsed as: roles and ``literals`` become
    code spans (the API itself is not documented on this site, so a role has nothing to link to)."""
    text = re.sub(r":\w+:`~?([^`]+)`", r"`\1`", text)
    return re.sub(r"``([^`]+)``", r"`\1`", text)


class SettingsDirective(SphinxDirective):
    has_content = False

    def run(self) -> list[nodes.Node]:
        from taskqueues import settings as module

        source = inspect.getsource(module)
        comments = field_comments(source, "Settings")
        examples = example_comments(Path(self.env.srcdir) / EXAMPLE_PAGE)
        self.env.note_dependency(module.__file__ or "")
        self.env.note_dependency(str(Path(self.env.srcdir) / EXAMPLE_PAGE))
        defaults = module.Settings()
        rows = ["| setting | type | default | environment variable | what it is |", "|---|---|---|---|---|"]
        for f in dataclasses.fields(module.Settings):
            if f.name == "sources":
                continue
            meaning = comments.get(f.name) or examples.get(f.name) or ""
            env = f"{module.ENV_PREFIX}{f.name.upper()}"
            default = shown_default(f.name, getattr(defaults, f.name))
            rows.append(f"| `{f.name}` | {f.type} | {default} | `{env}` | {cell(meaning)} |")
        text = [*markdown(inspect.cleandoc(module.__doc__ or "")).splitlines(), "", *rows]
        container = nodes.container()
        self.state.nested_parse(StringList(text, source="taskqueues/settings.py"), self.content_offset, container)
        return list(container.children)


def setup(app: Sphinx) -> dict[str, Any]:
    app.add_directive("pilotfish-settings", SettingsDirective)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
