#!/usr/bin/env bash
# Installs Chromium (Debian package `chromium`) when it is missing, for the one test that renders the request
# page headless (tests/e2e/test_page_browser.py). Without it that test is skipped with the reason. Called by
# scripts/test.sh.
set -uo pipefail
bash "$(dirname "${BASH_SOURCE[0]}")/apt_install.sh" chromium chromium && exit 0
echo "chromium.sh: chromium is not installed and could not be installed (not root, or apt unreachable):" \
    "the request page's browser test is skipped" >&2
exit 1
