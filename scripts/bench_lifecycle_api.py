"""Hold and release through the API against the same calls made directly on the store (issue 28 part 7).

Starts a private redis-server, submits one request of ``--jobs`` jobs as a user with a token, then measures in one
run, the median of ``--rounds``, a hold followed by a release of (a) the request and (b) its jobs named by id: with
:class:`matcher.client.Client` on the store, and through the real app (FastAPI's in-process TestClient: the
routes, the authentication, the authorization of every job named and the audit, without the network). The ratio
is the cost of the API's checks; the load average is printed beside the figures (this machine is shared).

Usage: ``python scripts/bench_lifecycle_api.py [--jobs 1000] [--rounds 3]``
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from functools import partial
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench_jobs import timed  # noqa: E402  (a sibling script)
from fastapi.testclient import TestClient  # noqa: E402

from matcher.api.app import create_app  # noqa: E402
from matcher.client import Client  # noqa: E402
from taskqueues.settings import Settings  # noqa: E402
from taskqueues.store import Store  # noqa: E402
from taskqueues.store.redis_server import RedisServer  # noqa: E402


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1000, help="jobs in the request")
    parser.add_argument("--rounds", type=int, default=3, help="runs of each measure (the median is shown)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="pf-bench-lifecycle-") as tmp:
        server = RedisServer(Path(tmp) / "redis").start()
        try:
            settings = Settings(redis_url=server.url, state_dir=str(Path(tmp) / "state"), submit_replicas=0)
            token = Store.from_url(server.url).tokens.create("alice", ["prod"], "user", 3600)[1]
            headers = {"Authorization": f"Bearer {token}"}
            http = TestClient(create_app(settings.with_(api_rate=1e9, api_rate_burst=1e9)))
            local = Client(settings=settings)
            workflow = {"name": "many", "jobs": [{"name": f"j{i}", "command": "true"} for i in range(args.jobs)]}
            done = http.post("/v1/requests", json={"workflow": workflow}, headers=headers).json()

            def direct(targets: list[str]) -> None:
                local.hold(*targets, by="alice")
                local.release(*targets, by="alice")

            def through_api(targets: list[str]) -> None:
                for path in ("/v1/hold", "/v1/release"):
                    answer = http.post(path, json={"targets": targets}, headers=headers)
                    if answer.status_code != 200:
                        raise SystemExit(f"{path}: {answer.status_code} {answer.text}")

            for name, targets in (
                ("the request", [done["request"]]),
                (f"{args.jobs} job ids", list(done["ids"].values())),
            ):
                here = timed(partial(direct, targets), args.rounds)
                there = timed(partial(through_api, targets), args.rounds)
                print(
                    f"hold+release of {name}: direct {here * 1000:.1f} ms, API {there * 1000:.1f} ms, "
                    f"API/direct {there / here:.2f}"
                )
            http.close()
        finally:
            server.stop()
    print("load average: " + " ".join(f"{x:.2f}" for x in os.getloadavg()))


if __name__ == "__main__":
    main()
