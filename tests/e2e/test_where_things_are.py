"""The list "Where things are" (docs/architecture/layout.md, once in the README) names every package and
sub-package, and nothing else."""

from __future__ import annotations

import re

from tests.support.pages import named
from tests.support.paths import ROOT


def _listed() -> list[str]:
    text = named("docs/architecture/layout.md").read_text()
    section = text.split("## Where things are", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^- `([\w/]+)/` — ", section, re.MULTILINE)


def _packages() -> set[str]:
    return {
        str(init.parent.relative_to(ROOT))
        for top in ("taskqueues", "matcher", "pilot")
        for init in (ROOT / top).rglob("__init__.py")
    }


def test_every_package_is_listed_once_and_every_listed_package_exists() -> None:
    listed = _listed()
    assert len(listed) == len(set(listed)), listed
    assert set(listed) == _packages()
