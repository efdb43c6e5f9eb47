#!/usr/bin/env bash
# Usage: apt_install.sh COMMAND PACKAGE. Installs the Debian package PACKAGE when COMMAND is missing: quietly,
# with apt as root (updating the package lists once if the first try fails). Exits 0 when COMMAND is there
# afterwards, 1 otherwise (not root, no apt, apt unreachable). Used by scripts/bwrap.sh and scripts/chromium.sh.
set -uo pipefail
command -v "$1" >/dev/null 2>&1 && exit 0
if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -qq --no-install-recommends "$2" >/dev/null 2>&1 \
        || { apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq --no-install-recommends "$2" >/dev/null 2>&1; }
fi
command -v "$1" >/dev/null 2>&1
