"""The request page in a real browser: ``pilotfish serve`` in its own process, headless Chromium (Debian's
``chromium``, installed by scripts/chromium.sh) opening the page with a token once in the address, following the
page's move to the address without it (the HttpOnly cookie then carries the token), and printing the DOM it built
and a screenshot. Chromium over Playwright: Debian's package installs in ~10 s with apt, with no second browser
download and no Node; ``--dump-dom`` and ``--screenshot`` are all this test needs."""

from __future__ import annotations

import re
import shutil
import struct
import subprocess
from pathlib import Path

import httpx
import pytest

from taskqueues.store import Store

from ..matcher.api.pages_support import submit_graph
from .test_api_e2e import Served, served  # noqa: F401 - the fixture

CHROMIUM = shutil.which("chromium")

pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="no chromium: scripts/chromium.sh installs it with apt (unreachable here?)"
)


def _chromium(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    assert CHROMIUM is not None
    return subprocess.run(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",  # root in a container: Chromium's own sandbox needs user namespaces it may not get
            "--disable-gpu",
            "--no-first-run",
            f"--user-data-dir={tmp_path / 'chromium'}",
            "--virtual-time-budget=5000",  # run the page (and its move to the address without the token) out
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _png_size(path: Path) -> tuple[int, int]:
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n", head
    width, height = struct.unpack(">II", head[16:24])
    return width, height


def test_the_request_page_renders_in_headless_chromium(
    served: Served,  # noqa: F811 - the fixture
    redis_url: str,
    tmp_path: Path,
) -> None:
    alice = served.token("alice", "--group", "prod")
    with httpx.Client(base_url=served.url) as http:
        made = submit_graph(http, alice, Store.from_url(redis_url))
    page = f"{served.url}/v1/requests/{made['request']}/page?token={alice}"
    shot = tmp_path / "page.png"
    dom = _chromium(tmp_path, "--dump-dom", page)
    assert dom.returncode == 0, dom.stderr[-2000:]
    html = dom.stdout
    assert alice not in html and "<script>" not in html and "&lt;script&gt;" in html  # the request's name
    rules = dict(re.findall(r'<g class="rule" data-rule="([^"]+)" data-jobs="(\d+)"', html))
    assert rules == {"fetch": "3", "fit": "1", "add": "1", "(no rule)": "1"}, html[:3000]
    counts = dict(re.findall(r'<span class="count" data-state="([a-z-]+)">.*?<b>(\d+)</b>', html))
    assert counts == {"done": "1", "failed": "1", "dep-failed": "2", "matched": "2"}
    assert len(re.findall(r'<rect class="bucket"', html)) == 3 and '<svg id="progress"' in html
    assert len(re.findall(r'<tr class="job"', html)) == 6
    drawn = _chromium(tmp_path, f"--screenshot={shot}", "--window-size=1000,1400", page)
    assert drawn.returncode == 0 and shot.exists(), drawn.stderr[-2000:]
    assert _png_size(shot) == (1000, 1400) and shot.stat().st_size > 20_000  # a page drawn, not a blank one
