#!/usr/bin/env bash
# The static checks CI runs with the tests (through scripts/test.sh): ruff's lint on the whole tree, ruff's
# formatter and mypy --strict on the three packages. Every check runs; the exit status is non-zero if any
# of them found something, and no commit since main's head when the rule began has a subject over 72
# characters (scripts/commit_subjects.py; skipped outside a git checkout or in a shallow clone). Needs the
# test extras (`pip install -e '.[test]'`).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

PACKAGES=(taskqueues matcher pilot)
status=0
run() {
    echo "lint.sh: $*"
    "$@" || { echo "lint.sh: FAILED: $*" >&2; status=1; }
}
run python3 -m ruff check .
run python3 -m ruff format --check --output-format concise "${PACKAGES[@]}"
run python3 -m mypy --strict "${PACKAGES[@]}"
run python3 scripts/commit_subjects.py
exit "$status"
