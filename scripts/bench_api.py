"""Submissions and reads through the HTTP API against the same calls made directly on the store.

Starts a private redis-server and ``pilotfish serve`` on loopback (uvicorn, the real app; its rate limit raised
out of the way), issues a user token, then measures in one run, so the ratios compare like with like:

* submission throughput, jobs/s, in batches of 1 (``--singles`` requests of one job) and of 1,000 (``--batches``
  requests of 1,000 jobs): :class:`matcher.client.Client` on the store vs :class:`matcher.api.remote.RemoteClient`
  through the API, one of each in turn;
* latency of ``status REQUEST`` and ``jobs --limit 20`` through the API under ``--clients`` concurrent clients
  (threads, each with its own keep-alive connection), ``--calls`` calls each: p50 and p99.

Targets (issue 30): API submission >= 50% of direct jobs/s in batches of 1,000; p99 of ``jobs --limit 20`` <= 50 ms on
a quiet host. The load average is printed beside the figures (this machine is shared).

Usage: ``python scripts/bench_api.py [--singles 200] [--batches 5] [--clients 50] [--calls 20]``
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402

from matcher.api.remote import RemoteClient  # noqa: E402
from matcher.calls import Calls  # noqa: E402
from matcher.client import Client  # noqa: E402
from taskqueues.settings import Settings  # noqa: E402
from taskqueues.store import Store  # noqa: E402
from taskqueues.store.redis_server import RedisServer, free_port  # noqa: E402


def workflow(name: str, jobs: int) -> dict[str, Any]:
    return {"name": name, "jobs": [{"name": f"j{i}", "command": "true"} for i in range(jobs)]}


def jobs_per_second(direct: Calls, remote: Calls, label: str, requests: int, size: int) -> tuple[float, float]:
    """Jobs/s of ``requests`` submissions of ``size`` jobs on each side, interleaved (one direct, one through the
    API, and again), so that a shared machine's changing load weighs on both alike."""
    spent = [0.0, 0.0]
    for i in range(requests):
        for side, client in enumerate((direct, remote)):
            document = workflow(f"{label}-{side}-{i}", size)
            started = time.perf_counter()
            client.submit(document)
            spent[side] += time.perf_counter() - started
    return requests * size / spent[0], requests * size / spent[1]


def latencies(
    make: Callable[[], RemoteClient], call: Callable[[RemoteClient], object], clients: int, calls: int
) -> list[float]:
    """Seconds of each call, ``clients`` threads making ``calls`` each at once (after one warm-up call)."""
    out: list[float] = []
    lock = threading.Lock()
    start = threading.Barrier(clients)

    def run() -> None:
        client = make()
        call(client)  # the connection made
        start.wait()
        mine = []
        for _ in range(calls):
            t = time.perf_counter()
            call(client)
            mine.append(time.perf_counter() - t)
        client.close()
        with lock:
            out.extend(mine)

    threads = [threading.Thread(target=run) for _ in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return out


def pct(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100)[int(q) - 1] if len(values) > 1 else values[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--singles", type=int, default=200, help="Requests of one job, each way.")
    parser.add_argument("--batches", type=int, default=5, help="Requests of 1,000 jobs, each way.")
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--calls", type=int, default=20, help="Calls of each kind per client.")
    parser.add_argument("--workers", type=int, default=1, help="Processes of pilotfish serve (--workers).")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as tmp:  # the server may still write a file
        server = RedisServer(Path(tmp) / "redis").start()
        port = free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith("PILOTFISH_")}
        env.update(
            PILOTFISH_REDIS_URL=server.url,
            PILOTFISH_STATE_DIR=str(Path(tmp) / "state"),
            PILOTFISH_SUBMIT_REPLICAS="0",
            PILOTFISH_API_RATE="1000000",
            PILOTFISH_API_RATE_BURST="1000000",
            PYTHONPATH=str(ROOT),
        )
        api = subprocess.Popen(
            [sys.executable, "-m", "matcher.cli", "serve", "--port", str(port), "--workers", str(args.workers)],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        url = f"http://127.0.0.1:{port}"
        try:
            for _ in range(600):
                try:
                    if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                time.sleep(0.1)
            token = Store.from_url(server.url).tokens.create("bench", ["default"], "user", 3600)[1]
            direct = Client(
                settings=Settings(redis_url=server.url, state_dir=env["PILOTFISH_STATE_DIR"], submit_replicas=0)
            )
            remote = RemoteClient(url, token)
            print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
            for client in (direct, remote):  # connections, scripts and the catalog loaded before timing
                client.submit(workflow("warm-up", 10))
            for size, count in ((1, args.singles), (1000, args.batches)):
                here, there = jobs_per_second(direct, remote, f"b{size}", count, size)
                print(
                    f"submit, batches of {size:>4}: direct {here:8.0f} jobs/s, API {there:8.0f} jobs/s "
                    f"({there / here:.0%} of direct; {count} requests each)"
                )
            request = remote.submit(workflow("probe", 50)).id
            for name, call in (
                (f"status {request}", lambda c: c.status(request)),
                ("jobs --limit 20", lambda c: c.listing(limit=20)),
            ):
                times = latencies(lambda: RemoteClient(url, token), call, args.clients, args.calls)
                print(
                    f"{name:<22} via the API, {args.clients} concurrent clients, {len(times)} calls: "
                    f"p50 {pct(times, 50) * 1000:6.1f} ms, p99 {pct(times, 99) * 1000:6.1f} ms"
                )
            remote.close()
            print(f"load average after:  {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        finally:
            api.terminate()
            api.wait(timeout=30)
            server.stop()


if __name__ == "__main__":
    main()
