"""Release latency: from a dependency's completion to the release of a dependent whose requirements wait
for that dependency's outputs.

Such a dependent goes, in the completion's own script (``complete.lua``), to the releasing set; Python
then evaluates its requirements against the outputs and ``release.lua`` takes it out of that set into its
task queue. Everything runs on this machine against one private redis-server: one real pilot (``pilotfish
pilot --cores 1``) and one real control-plane worker (``pilotfish matcher --no-beat``: no beat, so the
periodic sweep never runs and every release measured is the prompt one). Each round submits a chain of
N jobs, each one's ``mem`` requirement read from its predecessor's output (``deps.<previous>.mb``).
Keyspace notifications on the releasing set (``notify-keyspace-events Kz``, on the private server only)
stamp, in this process, the moment each dependent enters it (its dependency completed) and leaves it
(released); latency = leave - enter. The chain's makespan (first start to last end) is reported too.

Usage: ``python scripts/bench_release.py [-n 40] [--rounds 3]``
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import redis

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from matcher.submission import Submitter, submit_workflow  # noqa: E402
from matcher.workflow import parse_workflow  # noqa: E402
from taskqueues.context import Context  # noqa: E402
from taskqueues.errors import PilotfishError  # noqa: E402
from taskqueues.settings import Settings  # noqa: E402
from taskqueues.store.redis_server import RedisServer  # noqa: E402

QUEUE = "local/localhost/local"
_FOREIGN = ("SLURM_", "SGE_", "JOB_ID", "NSLOTS", "MACHINEFEATURES", "JOBFEATURES", "JOBSTATUS", "PILOTFISH_")


class BenchError(PilotfishError):
    """The benchmark could not run (a process that died, a chain that did not finish)."""


def child_env(url: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(_FOREIGN)}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])
    env["PILOTFISH_REDIS_URL"] = url
    return env


@contextmanager
def process(argv: list[str], env: dict[str, str], log: Path) -> Iterator[subprocess.Popen[bytes]]:
    """A child process, stopped with SIGTERM (SIGKILL after 15 s) when the block ends."""
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def wait_until(check: object, what: str, procs: Sequence[subprocess.Popen[bytes]], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():  # type: ignore[operator]
        for proc in procs:
            if proc.poll() is not None:
                raise BenchError(f"{proc.args!r} exited with {proc.returncode} while waiting for {what}")
        if time.monotonic() > deadline:
            raise BenchError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(0.05)


class ReleasingWatch:
    """Stamps every ZADD to and ZREM from the releasing set, as this process receives the notifications."""

    def __init__(self, client: redis.Redis, key: str) -> None:
        self.entered: list[float] = []
        self.left: list[float] = []
        self._pubsub = client.pubsub(ignore_subscribe_messages=True)  # type: ignore[no-untyped-call]
        self._pubsub.subscribe(f"__keyspace@0__:{key}")
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            message = self._pubsub.get_message(timeout=0.2)
            if message is None:
                continue
            now = time.time()
            event = message["data"]
            if event == b"zadd":
                self.entered.append(now)
            elif event == b"zrem":
                self.left.append(now)

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self._pubsub.close()


def chain(n: int, round_no: int) -> dict[str, object]:
    jobs: list[dict[str, object]] = []
    for i in range(n):
        spec: dict[str, object] = {"name": f"j{i}", "command": "echo mb=100 >> $PILOTFISH_OUTPUTS"}
        if i:
            spec.update(deps=[f"j{i - 1}"], requirements={"mem": f"deps.j{i - 1}.mb"})
        jobs.append(spec)
    return {"name": f"release-chain-{round_no}", "jobs": jobs}


def run_round(ctx: Context, n: int, round_no: int, timeout: float) -> tuple[list[float], float]:
    """One chain: the latency of each of its n - 1 releases, and its makespan."""
    store = ctx.store
    watch = ReleasingWatch(ctx.client, store.keys.releasing)
    try:
        submitted = submit_workflow(Submitter.of(ctx), parse_workflow(chain(n, round_no), "<bench>"))
        ids = list(submitted.ids.values())
        deadline = time.monotonic() + timeout
        while not all(job.state in ("done", "failed", "dep-failed") for job in store.jobs(ids)):
            if time.monotonic() > deadline:
                raise BenchError(f"chain {round_no} not finished after {timeout:g} s")
            time.sleep(0.05)
        time.sleep(0.3)  # the last notifications
    finally:
        watch.close()
    jobs = store.jobs(ids)
    bad = [j for j in jobs if j.state != "done"]
    if bad:
        raise BenchError(f"chain {round_no}: {len(bad)} jobs not done, e.g. {bad[0]}")
    if len(watch.entered) != n - 1 or len(watch.left) != n - 1:
        raise BenchError(
            f"chain {round_no}: {len(watch.entered)} entries and {len(watch.left)} releases seen, {n - 1} expected"
        )
    latencies = [left - entered for entered, left in zip(watch.entered, watch.left, strict=True)]
    makespan = max(float(j.ended or 0) for j in jobs) - min(float(j.started or 0) for j in jobs)
    return latencies, makespan


def ms(values: Sequence[float]) -> str:
    ordered = sorted(values)
    p90 = ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))]
    return (
        f"median {1000 * statistics.median(ordered):.1f} ms, p90 {1000 * p90:.1f} ms, max {1000 * ordered[-1]:.1f} ms"
    )


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("-n", type=int, default=40, help="jobs per chain (n - 1 releases)")
    parser.add_argument("--rounds", type=int, default=3, help="chains, one after the other")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds a chain may take")
    args = parser.parse_args(argv)
    if args.n < 2 or args.rounds < 1:
        parser.error("-n must be at least 2 and --rounds positive")
    with tempfile.TemporaryDirectory(prefix="bench-release-") as tmp:
        base = Path(tmp)
        server = RedisServer(base / "redis").start()
        try:
            ctx = Context(Settings(redis_url=server.url, state_dir=str(base / "state")))
            ctx.client.config_set("notify-keyspace-events", "Kz")
            env = child_env(server.url)
            cli = [sys.executable, "-m", "matcher.cli"]
            with (
                process(
                    [*cli, "matcher", "--no-beat", "--concurrency", "1", "--loglevel", "WARNING"],
                    env,
                    base / "worker.log",
                ) as worker,
                process(
                    [
                        *cli,
                        "pilot",
                        "--queue",
                        QUEUE,
                        "--cores",
                        "1",
                        "--idle-timeout",
                        "3600",
                        "--no-events",
                        "--workdir",
                        str(base / "pilot"),
                    ],
                    env,
                    base / "pilot.log",
                ) as pilot,
            ):
                wait_until(lambda: ctx.client.zcard(ctx.keys.alive("worker")) > 0, "the worker", [worker])
                wait_until(lambda: ctx.store.pilot_records(), "the pilot", [pilot])
                time.sleep(1.0)
                everything: list[float] = []
                for number in range(1, args.rounds + 1):
                    latencies, makespan = run_round(ctx, args.n, number, args.timeout)
                    everything += latencies
                    print(
                        f"round {number}: {len(latencies)} releases: {ms(latencies)}; chain of {args.n} "
                        f"jobs: makespan {makespan:.2f} s",
                        flush=True,
                    )
            print(f"all {len(everything)} releases: {ms(everything)}")
        finally:
            server.stop()


if __name__ == "__main__":
    main()
