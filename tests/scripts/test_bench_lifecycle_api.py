"""Smoke test of scripts/bench_lifecycle_api.py on a small request (real redis-server, the real app), so the
benchmark cannot rot. The figures are not checked (the machine may be busy); that both measures ran is."""

from __future__ import annotations

import re

import pytest

from tests.support.scripts import script


def test_bench_lifecycle_api_measures_a_request_and_its_job_ids(capsys: pytest.CaptureFixture[str]) -> None:
    script("bench_lifecycle_api").main(["--jobs", "20", "--rounds", "1"])
    out = capsys.readouterr().out
    for name in ("the request", "20 job ids"):
        figure = rf"^hold\+release of {name}: direct [\d.]+ ms, API [\d.]+ ms, API/direct [\d.]+$"
        assert re.search(figure, out, re.M), out
    assert re.search(r"^load average: [\d.]+ [\d.]+ [\d.]+$", out, re.M), out
