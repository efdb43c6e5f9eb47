"""MJF over HTTP: a real http.server in a thread, with cache headers, ETags and request counting."""

from __future__ import annotations

import hashlib
import threading
import time
from collections import Counter
from collections.abc import Iterator
from email.utils import formatdate
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from pilot.mjf.source import FeatureReader, HttpSource


class MJFServer:
    """Serves ``files[path] = (body, headers)``; validators are honoured as a real server would."""

    def __init__(self) -> None:
        self.files: dict[str, tuple[str, dict[str, str]]] = {}
        self.requests: Counter[str] = Counter()
        self.not_modified: Counter[str] = Counter()
        self.conditional: Counter[str] = Counter()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                server.requests[self.path] += 1
                if self.path not in server.files:
                    self.send_error(404)
                    return
                body, headers = server.files[self.path]
                etag = '"' + hashlib.sha1(body.encode()).hexdigest() + '"'
                use_etag = headers.get("X-Validator", "etag") == "etag"
                inm, ims = self.headers.get("If-None-Match"), self.headers.get("If-Modified-Since")
                if inm or ims:
                    server.conditional[self.path] += 1
                unchanged = (use_etag and inm == etag) or (
                    not use_etag and ims is not None and ims == headers.get("Last-Modified")
                )
                self.send_response(304 if unchanged else 200)
                for name, value in headers.items():
                    if name != "X-Validator":
                        self.send_header(name, value)
                if use_etag:
                    self.send_header("ETag", etag)
                if unchanged:
                    server.not_modified[self.path] += 1
                    self.end_headers()
                    return
                data = body.encode()
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(0.05,), daemon=True)
        self.thread.start()

    def put(self, path: str, body: str, **headers: str) -> None:
        self.files[path] = (body, {k.replace("_", "-"): v for k, v in headers.items()})

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server() -> Iterator[MJFServer]:
    srv = MJFServer()
    yield srv
    srv.close()


def test_every_key_over_http_with_labels(server: MJFServer, tmp_path: Path) -> None:
    server.put("/m/hs06", "250")
    server.put("/m/jobslots", "8")
    server.put("/j/allocated_CPU", "4")
    server.put("/j/wall_limit_secs", "3600")
    features = FeatureReader(f"{server.url}/m", f"{server.url}/j/", env={}, workdir=tmp_path).load()
    assert features.machine.hs06 == 250 and features.machine.jobslots == 8
    assert features.source("hs06") == f"machinefeatures:{server.url}/m"
    assert features.job.allocated_CPU == 4
    assert features.source("allocated_CPU") == f"jobfeatures:{server.url}/j"
    assert features.machine.shutdowntime is None  # 404 = absent
    assert features.source("log_cores") == "host"
    assert features.warnings == ()


def test_max_age_caching_saves_requests(server: MJFServer, tmp_path: Path) -> None:
    server.put("/m/shutdowntime", "2000000000", Cache_Control="max-age=60")
    server.put("/m/jobslots", "8", Cache_Control="no-cache")
    mjf = FeatureReader(f"{server.url}/m", None, env={}, workdir=tmp_path)
    mjf.load()
    server.put("/m/shutdowntime", "1900000000", Cache_Control="max-age=60")
    for _ in range(3):
        features = mjf.refresh()
    assert server.requests["/m/shutdowntime"] == 1  # fresh for 60 s: never asked again
    assert features.machine.shutdowntime == 2000000000
    assert server.requests["/m/jobslots"] == 4  # no-cache: asked at every refresh


def test_stale_entry_is_refetched_after_max_age(server: MJFServer) -> None:
    clock = [100.0]  # the source's monotonic clock, advanced by hand instead of sleeping
    source = HttpSource(f"{server.url}/m", clock=lambda: clock[0])
    server.put("/m/shutdowntime", "2000000000", Cache_Control="max-age=30", X_Validator="none")
    assert source.read("shutdowntime") == "2000000000"
    clock[0] += 29
    assert source.read("shutdowntime") == "2000000000"
    assert server.requests["/m/shutdowntime"] == 1
    server.put("/m/shutdowntime", "1990000000", Cache_Control="max-age=30", X_Validator="none")
    clock[0] += 2
    assert source.read("shutdowntime") == "1990000000"
    assert server.requests["/m/shutdowntime"] == 2 and source.requests == 2


def test_age_header_shortens_freshness(server: MJFServer) -> None:
    clock = [0.0]
    source = HttpSource(f"{server.url}/m", clock=lambda: clock[0])
    server.put("/m/jobslots", "8", Cache_Control="max-age=30", Age="25")
    source.read("jobslots")
    clock[0] = 6
    source.read("jobslots")
    assert server.requests["/m/jobslots"] == 2


def test_etag_conditional_get_gets_304_and_keeps_value(server: MJFServer, tmp_path: Path) -> None:
    server.put("/j/shutdowntime_job", "1800000000", Cache_Control="no-cache")
    mjf = FeatureReader(None, f"{server.url}/j", env={}, workdir=tmp_path)
    assert mjf.load().job.shutdowntime_job == 1800000000
    assert mjf.refresh().job.shutdowntime_job == 1800000000
    assert mjf.refresh().job.shutdowntime_job == 1800000000
    assert server.requests["/j/shutdowntime_job"] == 3
    assert server.conditional["/j/shutdowntime_job"] == 2
    assert server.not_modified["/j/shutdowntime_job"] == 2
    server.put("/j/shutdowntime_job", "1700000000", Cache_Control="no-cache")  # the site moves it closer
    assert mjf.refresh().job.shutdowntime_job == 1700000000
    assert server.not_modified["/j/shutdowntime_job"] == 2
    assert mjf.refresh().job.shutdowntime_job == 1700000000
    assert server.not_modified["/j/shutdowntime_job"] == 3


def test_last_modified_conditional_get(server: MJFServer) -> None:
    stamp = formatdate(1700000000, usegmt=True)
    server.put("/m/jobslots", "12", Last_Modified=stamp, X_Validator="last-modified")
    source = HttpSource(f"{server.url}/m")
    assert source.read("jobslots") == "12"
    assert source.read("jobslots") == "12"
    assert server.conditional["/m/jobslots"] == 1 and server.not_modified["/m/jobslots"] == 1


def test_expires_is_measured_against_the_server_date(server: MJFServer) -> None:
    clock = [0.0]
    source = HttpSource(f"{server.url}/m", clock=lambda: clock[0])
    # Date and Expires from a server whose clock is a year behind ours: 120 s of freshness all the same.
    date = time.time() - 365 * 86400
    server.put(
        "/m/jobslots",
        "8",
        Date=formatdate(date, usegmt=True),
        Expires=formatdate(date + 120, usegmt=True),
        X_Validator="none",
    )
    source.read("jobslots")
    clock[0] = 100
    source.read("jobslots")
    assert server.requests["/m/jobslots"] == 1
    clock[0] = 121
    source.read("jobslots")
    assert server.requests["/m/jobslots"] == 2


def test_unreachable_server_keeps_last_value_or_is_absent(server: MJFServer, tmp_path: Path) -> None:
    server.put("/m/shutdowntime", "2000000000", Cache_Control="no-cache")
    mjf = FeatureReader(f"{server.url}/m", None, env={}, workdir=tmp_path, timeout=2)
    assert mjf.load().machine.shutdowntime == 2000000000
    server.close()
    features = mjf.refresh()
    assert features.machine.shutdowntime == 2000000000
    assert any(f"{server.url}/m/shutdowntime" in w and "keeping the last value" in w for w in features.warnings)
    fresh = FeatureReader(f"{server.url}/m", None, env={}, workdir=tmp_path, timeout=2).load()
    assert fresh.machine.shutdowntime is None
    assert any("treated as absent" in w for w in fresh.warnings)
    assert fresh.source("log_cores") == "host"


def test_server_error_and_malformed_value_warn(server: MJFServer, tmp_path: Path) -> None:
    server.put("/m/hs06", "<html>oops</html>")
    features = FeatureReader(f"{server.url}/m", f"{server.url}/broken", env={}, workdir=tmp_path).load()
    assert features.machine.hs06 is None
    assert any(f"machinefeatures:{server.url}/m/hs06" in w and "malformed" in w for w in features.warnings)
