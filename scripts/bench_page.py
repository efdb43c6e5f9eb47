"""How long the request page takes for a large request (10^4 jobs by default).

Starts a private redis-server, submits one request of ``-n`` jobs in ``--rules`` rules (each job of rule k
depends on one job of rule k-1, so the graph has ``--rules`` layers), ends the first rule's jobs for real
(match, then complete or, one in ten, fail), then times ``--runs`` times each (median):

* ``GET /v1/requests/{id}/page`` through the real app (FastAPI's TestClient, in this process: authentication,
  authorization, the store reads and the rendering), and ``GET /v1/requests/{id}`` (the JSON status) beside it
  as the floor of reading the request;
* the rendering alone (:func:`matcher.page.request_page` on records already read).

The load average is printed with the figures. Usage: ``python scripts/bench_page.py [-n 10000] [--runs 5]``
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from fastapi.testclient import TestClient  # noqa: E402

from matcher.api.app import create_app  # noqa: E402
from matcher.page import request_page  # noqa: E402
from matcher.status import request_status  # noqa: E402
from taskqueues.settings import Settings  # noqa: E402
from taskqueues.store import Store  # noqa: E402
from taskqueues.store.records import PilotOffer, RunResult  # noqa: E402
from taskqueues.store.redis_server import RedisServer  # noqa: E402


def workflow(n: int, rules: int) -> dict[str, Any]:
    per = n // rules
    jobs = [
        {"name": f"r{k}-{i}", "rule": f"r{k}", "params": {"i": i}, **({"deps": [f"r{k - 1}-{i}"]} if k else {})}
        for k in range(rules)
        for i in range(per)
    ]
    return {
        "name": "bench-page",
        "rules": {f"r{k}": {"command": "echo {i}", "ete": "1s"} for k in range(rules)},
        "jobs": jobs,
    }


def median_ms(runs: int, call: Callable[[], object]) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=10_000, help="jobs in the request")
    parser.add_argument("--rules", type=int, default=10, help="rules (graph layers)")
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        server = RedisServer(Path(tmp) / "redis").start()
        try:
            settings = Settings(redis_url=server.url, state_dir=str(Path(tmp) / "state"), submit_replicas=0)
            store = Store.from_url(server.url)
            token = store.tokens.create("alice", ["prod"], "user", 3600)[1]
            auth = {"Authorization": f"Bearer {token}"}
            with TestClient(create_app(settings)) as http:
                made = http.post("/v1/requests", json={"workflow": workflow(args.n, args.rules)}, headers=auth)
                assert made.status_code == 201, made.text
                rid = made.json()["request"]
                first = args.n // args.rules
                ended = 0
                while ended < first:
                    for j in store.match(PilotOffer("p", "local/localhost/local", cpu=64, mem=10**6), 100):
                        if ended % 10 == 9:
                            store.fail(j.id, j.attempt, "p", RunResult(exit_code=1, wall=1, reason="exit code 1"))
                        else:
                            store.complete(j.id, j.attempt, "p", RunResult(exit_code=0, wall=1))
                        ended += 1
                        if ended == first:
                            break
                page = http.get(f"/v1/requests/{rid}/page", headers=auth)
                assert page.status_code == 200, page.text
                status = request_status(store, rid)
                jobs = store.request_jobs(rid)
                now = store.clock()
                figures = {
                    "GET page": median_ms(args.runs, lambda: http.get(f"/v1/requests/{rid}/page", headers=auth)),
                    "GET status (JSON)": median_ms(args.runs, lambda: http.get(f"/v1/requests/{rid}", headers=auth)),
                    "render only": median_ms(args.runs, lambda: request_page(status, jobs, now)),
                }
        finally:
            server.stop()
    print(f"request of {args.n} jobs in {args.rules} rules, {ended} ended; page {len(page.content) / 1024:.0f} KiB")
    for what, ms in figures.items():
        print(f"  {what:<18} {ms:8.1f} ms (median of {args.runs})")
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
