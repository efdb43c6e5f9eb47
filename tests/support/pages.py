"""The documentation as tests read it: the README, the contributing guide and every page of the docs site.

Tests that keep the documents true (``tests/e2e/test_readme.py``, ``test_docs_commands.py``,
``test_where_things_are.py``) find what they check here, wherever it lives, so a paragraph moved from one
page to another stays checked.
"""

from __future__ import annotations

import re
from pathlib import Path

from tests.support.paths import ROOT

DOCS = ROOT / "docs"


def pages() -> list[Path]:
    """Every Markdown document a reader meets: README.md, CONTRIBUTING.md and docs/**/*.md (not the build)."""
    site = sorted(p for p in DOCS.rglob("*.md") if "_build" not in p.relative_to(DOCS).parts)
    return [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *site]


def text(path: Path) -> str:
    return path.read_text()


def blocks(language: str, path: Path | None = None) -> list[str]:
    """The bodies of the fenced blocks of ``language`` (```` ```toml ````...), of one page or of every page."""
    found: list[str] = []
    for page in [path] if path else pages():
        found += re.findall(rf"^```{language}\n(.*?)^```", page.read_text(), re.S | re.M)
    return found


def named(relative: str) -> Path:
    """A page by its path from the repository root (``docs/operator/configuration.md``)."""
    path = ROOT / relative
    assert path.exists(), f"{relative} is gone: move what the test checks along with it"
    return path
