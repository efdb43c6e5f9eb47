#!/usr/bin/env bash
# Installs bubblewrap (`bwrap`), the payload sandbox (payload_sandbox = "bwrap", the default), when it is
# missing: quietly, with apt as root (Debian package `bubblewrap`). Without it local pilots refuse to start;
# says so and how to go on when it cannot install. Called by scripts/run.sh and scripts/test.sh.
set -uo pipefail
bash "$(dirname "${BASH_SOURCE[0]}")/apt_install.sh" bwrap bubblewrap && exit 0
echo "bwrap.sh: bubblewrap (bwrap) is not installed and could not be installed: install the bubblewrap package," \
    "or set payload_sandbox = \"none\" (payloads then run unconfined)" >&2
exit 1
