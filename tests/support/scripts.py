"""``scripts/*.py`` imported as the modules they are when they run, for the tests of benchmarks and checkers.

A script finds its sibling scripts (``workloads``, ``bench_match``) because Python puts the script's own
directory on ``sys.path``; :func:`script` does the same once, so a test imports a script and the scripts it
imports the same way, by name.
"""

from __future__ import annotations

import importlib
import sys
from types import ModuleType

from tests.support.paths import ROOT

SCRIPTS = ROOT / "scripts"


def script(name: str) -> ModuleType:
    """The module ``scripts/<name>.py`` (imported once, like any module)."""
    if str(SCRIPTS) not in sys.path:
        sys.path.append(str(SCRIPTS))
    return importlib.import_module(name)
