#!/usr/bin/env bash
# Builds the documentation site (docs/, Sphinx + MyST + sphinx-click) into docs/_build/html, with warnings as
# errors: a broken internal link, a page missing from the toctree, a bad cross-reference or a command or
# setting the reference cannot generate fails the build (--keep-going: every warning is printed first).
# Installs the `docs` extra unless --no-install. scripts/test.sh runs it, so CI builds the docs.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

if [ "${1:-}" != "--no-install" ]; then
    python3 -m pip install --quiet --disable-pip-version-check -e '.[docs]' || { echo "docs.sh: pip install failed" >&2; exit 1; }
fi
# -E: read every page again (a stale environment could hide a page's warning); -q: only warnings print.
python3 -m sphinx -W --keep-going -E -q -b html docs docs/_build/html
echo "docs.sh: built docs/_build/html/index.html"
