"""Pilotfish against plain Celery, end to end: N ``true`` jobs each, then single-job latency on idle pilots.

Everything runs on this machine, in one run, against one private redis-server (:class:`RedisServer`):

1. **Pilotfish.** ``P`` pilots (``python -m matcher.cli pilot --queue local/localhost/local --cores K
   --no-events``, real subprocesses, ``P x K = C`` cores in all) are started and left idle for
   ``--settle`` seconds, as pilots on a quiet site are. Then N jobs whose command is ``true`` are
   submitted through the public API, :meth:`matcher.submission.Submitter.submit`, in requests of
   ``--batch`` independent jobs each (a user submitting a large sweep in chunks; submission overlaps
   with execution, as it would). Rate = N / (first ``submit`` call -> the last job's end as the
   store recorded it). Every job must end ``done``.
2. **Celery.** A stock ``celery worker --pool prefork --concurrency C`` (a real subprocess, broker =
   the same redis-server, no result backend) runs the task :func:`run_true`, which runs
   ``subprocess.run(["true"])`` and ``INCR``s a counter in Redis; the task whose ``INCR`` returns N
   stamps the end time. The same N tasks are sent in the same batches the way a Celery user sends many
   tasks: ``apply_async`` over one producer connection. Rate = N / (first send -> that stamp).
3. The ratio Pilotfish / Celery, like for like: Celery runs its tasks unconfined, so the Pilotfish phase
   that is compared runs its payloads unconfined too (``payload_sandbox = "none"``); target >= 2 at the
   same concurrency, >= 2.5 with several pilots sharing the cores (issue 31). A second Pilotfish phase
   with the product's default, the bwrap sandbox (~10 ms of a core per payload start), is printed as its
   own row and ratio (``--no-sandboxed`` skips it). The Celery worker stays up for the whole run, idle
   while Pilotfish works; each Pilotfish phase starts its pilots and stops them after. With ``--rounds R``
   the phases alternate R times and the round with the median (unconfined) ratio is reported: on a shared
   machine a burst of foreign load falls on one phase and not the other.
4. **Latency.** With the pilots of (1) idle, ``--trials`` times: wait ``--pause`` seconds, submit one
   job, wait until it is done. "Done" is seen without polling: Redis keyspace notifications are switched
   on for hash writes (``notify-keyspace-events Kh``, on our private server only, for this phase
   only), so every write to the jobs hash wakes the waiter, which then reads that job's state. Latency
   = ``submit`` call -> ``done`` seen by the submitter (what a user waits). The store's stamps split
   it: submit -> matched (the pilot noticing the job), matched -> started, started -> ended (the
   payload), ended -> seen. Target: median <= 100 ms. The latency pilots run the default sandbox.

**The bound.** After each unconfined Pilotfish phase the script measures the floor of the payload itself:
C processes each ``posix_spawn`` (new session, as the pilot does) the very argv an unconfined pilot runs,
``/bin/sh -c true``, and wait for it, for a second; its CPU per spawn (spawners and children) is the spawn
floor. Beside the ratio it prints the ceiling the round's measured CPU per job allows,
``C / (spawn floor + agent + redis + submit CPU per job)`` (:func:`ceiling`), as jobs/s and against the
round's Celery, and the share of the host's core-time that stayed idle during the Pilotfish phase: a round
below its ceiling with idle cores waits on something; one at its ceiling needs less CPU per job.

C defaults to the number of usable cores (``os.sched_getaffinity``); one pilot of C cores (a pilot
holds a whole node) unless ``--pilots`` says otherwise. ``--fast-poll`` repeats (4) with pilots whose
idle back-off is capped at 5 ms (:class:`PilotConfig` ``backoff_max``, run in-process by this script's
``_pilot`` entry): the latency the rest of the path allows when the pilot notices new work at once.
``--scratch`` puts the pilots' work areas (each payload's $JOBFEATURES, $TMPDIR and work directory,
created and removed per payload) on another file system, e.g. tmpfs, to see what the disk costs.

Usage: ``python scripts/bench_e2e.py [-n 10000] [--batch 1000] [--concurrency C] [--pilots P]
[--rounds 1] [--trials 100] [--pause 1.0] [--scratch DIR] [--fast-poll] [--no-sandboxed] [--profile DIR]
[--no-guard]``

``--profile DIR`` runs the unconfined phase's pilots under cProfile and prints where their CPU went (all
pilots and rounds pooled). At its
end the script prints the match's instructions per call against the stored baseline
(``scripts/count_match.py``'s guard, a minute under callgrind; ``--no-guard`` skips it): the host's figures
move with its load, that one does not.
"""

from __future__ import annotations

import argparse
import io
import json
import math
import os
import pstats
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import redis
from celery import Celery

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from matcher.submission import JobSpec, Submitter  # noqa: E402
from pilot.agent import launch  # noqa: E402
from taskqueues.context import Context  # noqa: E402
from taskqueues.errors import PilotfishError  # noqa: E402
from taskqueues.settings import Settings  # noqa: E402
from taskqueues.store import Store  # noqa: E402
from taskqueues.store.redis_server import RedisServer  # noqa: E402

QUEUE = "local/localhost/local"
BROKER_ENV = "BENCH_E2E_BROKER"
_FOREIGN = ("SLURM_", "SGE_", "JOB_ID", "NSLOTS", "MACHINEFEATURES", "JOBFEATURES", "JOBSTATUS", "PILOTFISH_")


class BenchError(PilotfishError):
    """The benchmark could not run or a system under test misbehaved (a job not done, a worker that died)."""


# -- the Celery side: a stock app whose one task runs `true` ---------------------------------------------------
# The worker is started as ``celery -A bench_e2e worker`` with its working directory in scripts/, so this module
# is the app module; the broker comes from the environment because the redis-server's port is only known then.

app = Celery("bench_e2e", broker=os.environ.get(BROKER_ENV, "redis://127.0.0.1:6379/0"), set_as_current=False)
app.conf.update(task_ignore_result=True, broker_connection_retry_on_startup=True, worker_hijack_root_logger=False)
_counter_client: redis.Redis | None = None


def _counter() -> redis.Redis:
    """One Redis client per worker process, made after the prefork pool forked (a socket must not be shared)."""
    global _counter_client
    if _counter_client is None:
        _counter_client = redis.Redis.from_url(app.conf.broker_url)
    return _counter_client


@app.task(name="bench_e2e.run_true")  # type: ignore[untyped-decorator,misc,unused-ignore]
def run_true(counter: str, total: int) -> None:
    """Run ``true`` as a subprocess and count it; the task that completes the count stamps the end time."""
    subprocess.run(["true"], check=True)
    client = _counter()
    if client.incr(counter) == total:
        client.set(f"{counter}:end", repr(time.time()))


# -- measurements ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Throughput:
    """One system's run of N jobs: rate over (first submit -> last end), and where the CPU went."""

    system: str
    jobs: int
    seconds: float
    submit_seconds: float
    first_start: float
    agent_cpu: float
    redis_cpu: float
    submit_cpu: float = float("nan")  # this script's own CPU while it submitted (Pilotfish's client)
    payload_cpu: float = float("nan")  # the payloads' CPU (the pilots' reaped children)
    host_idle: float = float("nan")  # share of the host's core-time idle over the run (every process counted)

    @property
    def rate(self) -> float:
        return self.jobs / self.seconds


@dataclass(frozen=True)
class SpawnFloor:
    """What starting and reaping the payload's argv costs alone: ``spawns`` by ``processes`` processes in
    ``seconds`` of wall, ``cpu`` seconds of CPU in all (the spawners and their children)."""

    argv: tuple[str, ...]
    processes: int
    spawns: int
    seconds: float
    cpu: float

    @property
    def cpu_per_spawn(self) -> float:
        return self.cpu / self.spawns

    @property
    def rate(self) -> float:
        return self.spawns / self.seconds


def ceiling(cores: int, floor: float, agent: float, redis_cpu: float, submit: float) -> float:
    """Jobs/s that ``cores`` cores allow at these CPU seconds per job: the payload's spawn floor, the agent,
    Redis and the submitting client. Every term is CPU the run cannot do without at its measured cost."""
    per_job = floor + agent + redis_cpu + submit
    if not per_job > 0:
        raise ValueError(f"the CPU per job must be positive: {floor} + {agent} + {redis_cpu} + {submit}")
    return cores / per_job


# Run by each spawner process of spawn_floor: posix_spawn + waitpid of ARGV for SECONDS, then print
# "spawns cpu wall" (its own CPU and its reaped children's, from the first spawn to the last reap).
_FLOOR_CODE = """
import os, sys, time
argv, seconds = sys.argv[2:], float(sys.argv[1])
actions = [(os.POSIX_SPAWN_OPEN, fd, os.devnull, os.O_RDWR, 0) for fd in (0, 1, 2)]
env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
begin, start = os.times(), time.monotonic()
end, spawns = start + seconds, 0
while time.monotonic() < end:
    os.waitpid(os.posix_spawn(argv[0], argv, env, file_actions=actions, setsid=True), 0)
    spawns += 1
t = os.times()
print(spawns, sum(t[:4]) - sum(begin[:4]), time.monotonic() - start)
"""


def spawn_floor(argv: Sequence[str], processes: int, seconds: float = 1.0) -> SpawnFloor:
    """The floor of the payload itself on this host, now: ``processes`` processes each spawning ``argv``
    (``posix_spawn`` in a new session, as the pilot does) and waiting for it, for ``seconds``."""
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _FLOOR_CODE, str(seconds), *argv], stdout=subprocess.PIPE, env=child_env()
        )
        for _ in range(processes)
    ]
    spawns, cpu, wall = 0, 0.0, 0.0
    for proc in procs:
        out, _ = proc.communicate(timeout=60 + 10 * seconds)
        if proc.returncode != 0:
            raise BenchError(f"the spawn floor's process exited with {proc.returncode}")
        count, used, took = out.split()
        spawns, cpu, wall = spawns + int(count), cpu + float(used), max(wall, float(took))
    if spawns == 0:
        raise BenchError(f"the spawn floor's processes started no {list(argv)} in {seconds:g} s")
    return SpawnFloor(tuple(argv), processes, spawns, wall, cpu)


@dataclass(frozen=True)
class Trial:
    """One single-job round trip, seconds from the ``submit`` call: matched, started, ended, seen done."""

    matched: float
    started: float
    ended: float
    seen: float


def percentile(values: Sequence[float], q: float) -> float:
    """The nearest-rank percentile (``q`` in 0..1) of a non-empty sample."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def child_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """This environment without batch-system, MJF and Pilotfish settings (they would change what runs)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(_FOREIGN)}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])
    env.update(extra or {})
    return env


def cpu_seconds(pids: Sequence[int], children: bool = False) -> float:
    """User + system CPU seconds of these processes themselves (not of the children they reaped), or with
    ``children`` of the children they reaped (a pilot's payloads)."""
    total = 0.0
    for pid in pids:
        try:
            times = psutil.Process(pid).cpu_times()
        except psutil.Error:
            continue
        total += times.children_user + times.children_system if children else times.user + times.system
    return total


def host_idle_seconds() -> float:
    """Core-seconds this host's cores have been idle (idle + waiting for I/O), all cores added."""
    times = psutil.cpu_times()
    return float(times.idle + getattr(times, "iowait", 0.0))


def redis_pid(server: RedisServer) -> int:
    return int(server.pidfile.read_text().strip())


def _tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return f"({path} unreadable)"


# -- Pilotfish ---------------------------------------------------------------------------------------------------


def profile_table(paths: Sequence[Path], top: int = 25) -> str:
    """Where the profiled pilots' CPU went: the functions with the most cumulative time, all pilots pooled."""
    if not paths:
        return "no pilot profile was written (a pilot killed, not stopped, writes none)"
    buffer = io.StringIO()
    stats = pstats.Stats(*[str(p) for p in paths], stream=buffer)
    stats.sort_stats("cumulative").print_stats(top)
    return f"pilots' CPU (process time) by function, cumulative ({len(paths)} profile(s)):\n" + buffer.getvalue()


def pilot_command(
    url: str, cores: int, workdir: Path, fast_poll: bool, sandbox: str = "bwrap", profile: Path | None = None
) -> list[str]:
    """The pilot as an operator starts it, or this script's ``_pilot`` entry with a 5 ms idle back-off cap;
    with ``profile``, under cProfile writing its statistics there when it stops."""
    if fast_poll:
        return [sys.executable, str(Path(__file__).resolve()), "_pilot", url, str(cores), str(workdir)]
    # With a profile: this script's ``_profiled`` entry, cProfile on the process's CPU clock (a wall clock would
    # count the waits a loaded host adds, not what the pilot spends)
    profiled = [str(Path(__file__).resolve()), "_profiled", str(profile)] if profile else ["-m", "matcher.cli"]
    return [
        sys.executable,
        *profiled,
        "pilot",
        "--queue",
        QUEUE,
        "--redis-url",
        url,
        "--cores",
        str(cores),
        "--idle-timeout",
        "3600",
        "--no-events",
        "--workdir",
        str(workdir),
        "--payload-sandbox",
        sandbox,
    ]


@contextmanager
def pilots(
    url: str,
    store: Store,
    count: int,
    cores: int,
    base: Path,
    *,
    fast_poll: bool = False,
    timeout: float = 30.0,
    sandbox: str = "bwrap",
    profile: Path | None = None,
) -> Iterator[list[subprocess.Popen[bytes]]]:
    """``count`` running pilots of ``cores`` cores each, registered in the store; stopped with SIGTERM after.
    With ``profile`` (a directory), each runs under cProfile and leaves ``pilot-<i>.prof`` there."""
    procs: list[subprocess.Popen[bytes]] = []
    logs: list[Path] = []
    before = set(store.pilot_records())
    base.mkdir(parents=True, exist_ok=True)
    try:
        for i in range(count):
            log = base / f"pilot-{i}.log"
            with log.open("wb") as out:
                procs.append(
                    subprocess.Popen(
                        pilot_command(
                            url, cores, base / f"pilot-{i}", fast_poll, sandbox, profile and profile / f"pilot-{i}.prof"
                        ),
                        cwd=ROOT,
                        env=child_env({"JOBSTATUS": str(base / f"jobstatus-{i}")}),
                        stdout=out,
                        stderr=subprocess.STDOUT,
                    )
                )
            logs.append(log)
        deadline = time.monotonic() + timeout
        while len(set(store.pilot_records()) - before) < count:
            for proc, log in zip(procs, logs, strict=True):
                if proc.poll() is not None:
                    raise BenchError(f"pilot exited with {proc.returncode} before registering:\n{_tail(log)}")
            if time.monotonic() > deadline:
                raise BenchError(f"{count} pilots did not register within {timeout:g} s")
            time.sleep(0.02)
        yield procs
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc, log in zip(procs, logs, strict=True):
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                print(f"pilot {proc.pid} ignored SIGTERM for 15 s and was killed:\n{_tail(log)}", file=sys.stderr)


def run_pilotfish(
    context: Context,
    server: RedisServer,
    pilot_pids: Sequence[int],
    n: int,
    batch: int,
    timeout: float = 900.0,
    system: str = "Pilotfish",
) -> Throughput:
    """Submit N ``true`` jobs in requests of ``batch`` and wait until the pilots have run them all."""
    store = context.store
    done_log = store.keys.donelog
    done_before = store.client.zcard(done_log)
    agent0, redis0 = cpu_seconds(pilot_pids), cpu_seconds([redis_pid(server)])
    payload0, idle0, mine0 = cpu_seconds(pilot_pids, children=True), host_idle_seconds(), time.process_time()
    ids: list[str] = []
    begin = time.time()
    for start in range(0, n, batch):
        specs = [JobSpec(name=f"true-{i}", command="true") for i in range(start, min(n, start + batch))]
        ids += Submitter.of(context).submit(specs, name=f"bench-e2e-{start // batch}").ids.values()
    submitted, submit_cpu = time.time() - begin, time.process_time() - mine0
    deadline = time.monotonic() + timeout
    while store.client.zcard(done_log) - done_before < n:
        if time.monotonic() > deadline:
            states: dict[str, int] = {}
            for job in store.jobs(ids):
                states[job.state] = states.get(job.state, 0) + 1
            raise BenchError(f"Pilotfish: not all {n} jobs done after {timeout:g} s: {states}")
        time.sleep(0.01)
    agent, redis_cpu = cpu_seconds(pilot_pids) - agent0, cpu_seconds([redis_pid(server)]) - redis0
    payload_cpu, window = cpu_seconds(pilot_pids, children=True) - payload0, time.time() - begin
    idle = (host_idle_seconds() - idle0) / (window * (psutil.cpu_count() or 1))
    jobs = store.jobs(ids)
    bad = [j for j in jobs if j.state != "done"]
    if bad:
        raise BenchError(f"Pilotfish: {len(bad)} of {n} jobs not done, e.g. {bad[0]}")
    end = max(float(j.ended or 0) for j in jobs)
    first = min(float(j.started or 0) for j in jobs)
    return Throughput(system, n, end - begin, submitted, first - begin, agent, redis_cpu, submit_cpu, payload_cpu, idle)


# -- Celery ------------------------------------------------------------------------------------------------------


@contextmanager
def celery_worker(url: str, concurrency: int, base: Path, timeout: float = 60.0) -> Iterator[subprocess.Popen[bytes]]:
    """A stock prefork worker of :data:`app` on ``url``, answering pings; warm-shut down (SIGTERM) after."""
    base.mkdir(parents=True, exist_ok=True)
    log = base / "celery-worker.log"
    cmd = [
        sys.executable,
        "-m",
        "celery",
        "-A",
        "bench_e2e",
        "worker",
        "--pool",
        "prefork",
        "--concurrency",
        str(concurrency),
        "--loglevel",
        "WARNING",
        "--hostname",
        f"bench-e2e-{os.getpid()}@%h",
    ]
    with log.open("wb") as out:
        proc = subprocess.Popen(
            cmd,
            cwd=Path(__file__).resolve().parent,
            env=child_env({BROKER_ENV: url}),
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        client = Celery("bench_e2e_control", broker=url, set_as_current=False)
        deadline = time.monotonic() + timeout
        while not client.control.ping(timeout=0.5):
            if proc.poll() is not None:
                raise BenchError(f"celery worker exited with {proc.returncode}:\n{_tail(log)}")
            if time.monotonic() > deadline:
                raise BenchError(f"celery worker did not answer a ping within {timeout:g} s:\n{_tail(log)}")
        client.close()
        yield proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def worker_pids(proc: subprocess.Popen[bytes]) -> list[int]:
    """The worker's main process and its pool processes (not the ``true`` they run)."""
    try:
        return [proc.pid, *(c.pid for c in psutil.Process(proc.pid).children())]
    except psutil.Error:
        return [proc.pid]


def run_celery(
    url: str, server: RedisServer, worker: subprocess.Popen[bytes], n: int, batch: int, timeout: float = 900.0
) -> Throughput:
    """Send N :func:`run_true` tasks in batches over one producer and wait until the last one counted."""
    client = redis.Redis.from_url(url)
    counter = f"bench_e2e:{os.getpid()}:{time.monotonic_ns()}"
    sender = Celery("bench_e2e", broker=url, set_as_current=False)
    task = sender.signature("bench_e2e.run_true", args=(counter, n))
    pids = worker_pids(worker)
    agent0, redis0 = cpu_seconds(pids), cpu_seconds([redis_pid(server)])
    begin = time.time()
    with sender.producer_or_acquire() as producer:
        for start in range(0, n, batch):
            for _ in range(min(batch, n - start)):
                task.apply_async(producer=producer)
    submitted = time.time() - begin
    deadline = time.monotonic() + timeout
    while (stamp := client.get(f"{counter}:end")) is None:
        if worker.poll() is not None:
            raise BenchError(f"celery worker died with {worker.returncode}")
        if time.monotonic() > deadline:
            raise BenchError(f"Celery: {int(client.get(counter) or 0)} of {n} tasks counted after {timeout:g} s")
        time.sleep(0.01)
    agent, redis_cpu = cpu_seconds(pids) - agent0, cpu_seconds([redis_pid(server)]) - redis0
    counted = int(client.get(counter) or 0)
    if counted != n:
        raise BenchError(f"Celery: {counted} tasks counted, expected {n} (a task ran twice?)")
    sender.close()
    client.close()
    return Throughput("Celery", n, float(stamp) - begin, submitted, float("nan"), agent, redis_cpu)


# -- latency -----------------------------------------------------------------------------------------------------


def measure_latency(context: Context, pauses: Sequence[float], timeout: float = 30.0) -> list[Trial]:
    """After each pause, submit one job to the idle pilots and wait, woken by writes to the jobs hash, until it is done.

    The subscription is confirmed before the first job, so no notification can be missed.
    """
    store = context.store
    client = store.client
    before = str(client.config_get("notify-keyspace-events").get("notify-keyspace-events") or "")
    client.config_set("notify-keyspace-events", "Kh")
    watcher = redis.Redis.from_url(context.redis_url).pubsub()  # type: ignore[no-untyped-call,unused-ignore]
    watcher.subscribe(f"__keyspace@0__:{store.keys.jobs}")
    out: list[Trial] = []
    try:
        confirmation = watcher.get_message(timeout=5.0)
        if not confirmation or confirmation["type"] != "subscribe":
            raise BenchError(f"no confirmation of the keyspace subscription from Redis: {confirmation}")
        for i, pause in enumerate(pauses):
            time.sleep(pause)
            while watcher.get_message(timeout=0) is not None:  # forget writes from before this job
                pass
            begin = time.time()
            submitted = Submitter.of(context).submit([JobSpec(name=f"latency-{i}", command="true")])
            job_id = next(iter(submitted.ids.values()))
            deadline = time.monotonic() + timeout
            while True:
                raw = client.hget(store.keys.jobs, job_id)
                rec: dict[str, Any] = json.loads(raw) if raw else {}
                if rec.get("s") == "done":
                    seen = time.time()
                    break
                if rec.get("s") in ("failed", "cancelled"):
                    raise BenchError(f"latency job {job_id} ended {rec.get('s')}: {rec.get('why')}")
                left = deadline - time.monotonic()
                if left <= 0:
                    raise BenchError(f"latency job {job_id} not done after {timeout:g} s: state {rec.get('s')}")
                watcher.get_message(timeout=min(left, 1.0))
            matched, started, ended = (float(rec[k]) - begin for k in ("tm", "st", "te"))
            out.append(Trial(matched, started, ended, seen - begin))
    finally:
        watcher.close()
        client.config_set("notify-keyspace-events", before)
    return out


# -- report ------------------------------------------------------------------------------------------------------


def target(pilots: int) -> float:
    """The Pilotfish / Celery target at the same concurrency (issue 31): 2x, 2.5x with pilots sharing the cores."""
    return 2.5 if pilots > 1 else 2.0


def throughput_table(
    pf: Throughput, cel: Throughput, concurrency: int, layout: str, sandboxed: Throughput | None = None, pilots: int = 1
) -> str:
    """The systems' rows (``pf`` unconfined, like Celery; ``sandboxed`` in bwrap, the product's default), then
    the ratios against Celery; the load average is the caller's to print."""
    rows = [
        f"{'system':<26} {'jobs':>6} {'C':>3} {'seconds':>8} {'jobs/s':>8} {'submit s':>9} "
        f"{'1st start s':>11} {'agent CPU s':>11} {'ms CPU/job':>10} {'redis CPU s':>11}"
    ]
    for t in (pf, cel, sandboxed):
        if t is None:
            continue
        first = "-" if t.first_start != t.first_start else f"{t.first_start:.3f}"
        rows.append(
            f"{t.system:<26} {t.jobs:>6} {concurrency:>3} {t.seconds:>8.2f} {t.rate:>8.0f} "
            f"{t.submit_seconds:>9.2f} {first:>11} {t.agent_cpu:>11.2f} {1000 * t.agent_cpu / t.jobs:>10.3f} "
            f"{t.redis_cpu:>11.2f}"
        )
    ratio, goal = pf.rate / cel.rate, target(pilots)
    rows.append(
        f"{pf.system} ({layout}) / Celery (prefork x {concurrency}): {ratio:.2f}x, like for like "
        f"(target >= {goal:g}x: {'met' if ratio >= goal else 'NOT met'})"
    )
    if sandboxed is not None:
        rows.append(
            f"{sandboxed.system} ({layout}) / Celery (prefork x {concurrency}): {sandboxed.rate / cel.rate:.2f}x "
            f"(the product's default; its payloads confined, Celery's not); bwrap / none "
            f"{sandboxed.rate / pf.rate:.2f}"
        )
    return "\n".join(rows)


def bound_lines(pf: Throughput, cel: Throughput, floor: SpawnFloor, cores: int) -> str:
    """How far this Pilotfish round is from its own bound: the ceiling its measured CPU per job allows on
    ``cores`` cores (:func:`ceiling`), as jobs/s and against this round's Celery, and the host's idle share."""
    per = {
        "spawn floor": floor.cpu_per_spawn,
        "agent": pf.agent_cpu / pf.jobs,
        "redis": pf.redis_cpu / pf.jobs,
        "submit": pf.submit_cpu / pf.jobs,
    }
    top = ceiling(cores, *per.values())
    terms = " + ".join(f"{name} {1000 * value:.3f}" for name, value in per.items())
    used = pf.agent_cpu + pf.redis_cpu + pf.submit_cpu + pf.payload_cpu
    return "\n".join(
        [
            f"bound: CPU ms/job {terms} = {1000 * sum(per.values()):.3f} (spawn floor: {floor.processes} "
            f"processes, {floor.rate:.0f} {' '.join(floor.argv)}/s; the payloads' own CPU in the round "
            f"{1000 * pf.payload_cpu / pf.jobs:.3f})",
            f"ceiling on {cores} cores: {top:.0f} jobs/s = {top / cel.rate:.2f}x this round's Celery; the round "
            f"reached {pf.rate / top:.0%} of it; host core-time idle {pf.host_idle:.0%} "
            f"(Pilotfish's own CPU {used / (cores * pf.seconds):.0%} of {cores} cores x {pf.seconds:.2f} s)",
        ]
    )


def latency_table(trials: Sequence[Trial], label: str) -> str:
    def ms(values: Sequence[float]) -> str:
        return (
            f"{statistics.median(values) * 1000:>8.1f} {percentile(values, 0.95) * 1000:>8.1f} "
            f"{max(values) * 1000:>8.1f}"
        )

    rows = [f"latency, {label}, {len(trials)} jobs (ms)        median      p95      max"]
    rows.append(f"  submit -> matched (pilot noticed) {ms([t.matched for t in trials])}")
    rows.append(f"  matched -> started                {ms([t.started - t.matched for t in trials])}")
    rows.append(f"  started -> ended (payload)        {ms([t.ended - t.started for t in trials])}")
    rows.append(f"  ended -> done seen by submitter   {ms([t.seen - t.ended for t in trials])}")
    seen = [t.seen for t in trials]
    rows.append(f"  submit -> done seen (total)       {ms(seen)}")
    verdict = "met" if statistics.median(seen) <= 0.100 else "NOT met"
    rows.append(f"  target median <= 100 ms: {verdict}")
    return "\n".join(rows)


def _pilot_entry(url: str, cores: str, workdir: str) -> None:
    """``_pilot URL CORES WORKDIR``: one pilot whose idle back-off is capped at 5 ms (the ``--fast-poll`` run)."""
    from pilot.agent.config import PilotConfig
    from pilot.agent.pilot import Pilot

    config = PilotConfig(
        queue=QUEUE,
        redis_url=url,
        cores=int(cores),
        workdir=Path(workdir),
        idle_timeout=3600,
        backoff_min=0.005,
        backoff_max=0.005,
    )
    print(f"pilot stopped: {Pilot(config).run()}", file=sys.stderr)


def _profiled_entry(out: str, args: list[str]) -> None:
    """``_profiled OUT ARGS...``: ``pilotfish ARGS...`` under cProfile timed by this process's CPU clock
    (user + system), its statistics written to OUT when it returns or exits."""
    import cProfile

    from matcher.cli.main import main as cli

    profiler = cProfile.Profile(time.process_time)
    profiler.enable()
    try:
        cli(args, standalone_mode=False)
    finally:
        profiler.disable()
        profiler.dump_stats(out)


def main(argv: Sequence[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["_pilot"]:
        _pilot_entry(*argv[1:4])
        return
    if argv[:1] == ["_profiled"]:
        _profiled_entry(argv[1], argv[2:])
        return
    cores = len(os.sched_getaffinity(0))
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("-n", type=int, default=10_000, help="jobs per system")
    parser.add_argument("--batch", type=int, default=1000, help="jobs per submit request (and per Celery batch)")
    parser.add_argument("--concurrency", type=int, default=cores, help="total concurrency C [cores of this host]")
    parser.add_argument("--pilots", type=int, default=1, help="pilots sharing the C cores (C must divide evenly)")
    parser.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="alternate Pilotfish and Celery this many times; report the round of median ratio",
    )
    parser.add_argument("--settle", type=float, default=3.0, help="seconds the pilots idle before the first submit")
    parser.add_argument("--trials", type=int, default=100, help="single-job latency trials (0: skip)")
    parser.add_argument("--pause", type=float, default=1.0, help="seconds between latency trials (pilots idle)")
    parser.add_argument("--seed", type=int, default=None, help="randomise each pause in [0, 2*pause] with this seed")
    parser.add_argument(
        "--scratch", default=None, help="directory for the pilots' work areas (payload sandboxes) [the system temp dir]"
    )
    parser.add_argument(
        "--fast-poll",
        action="store_true",
        help="also measure latency with pilots whose idle back-off is capped at 5 ms",
    )
    parser.add_argument(
        "--no-sandboxed",
        action="store_true",
        help="skip the second Pilotfish phase, with the default bwrap sandbox (the compared one runs unconfined)",
    )
    parser.add_argument(
        "--profile",
        default=None,
        help="run the unconfined pilots under cProfile, leave their profiles in this directory, print where CPU went",
    )
    parser.add_argument(
        "--no-guard",
        action="store_true",
        help="skip the match's instruction count against the stored baseline (count_match.guard, a minute)",
    )
    args = parser.parse_args(argv)
    if min(args.n, args.batch, args.concurrency, args.pilots, args.rounds) < 1:
        parser.error("-n, --batch, --concurrency, --pilots and --rounds must be positive")
    if args.concurrency % args.pilots:
        parser.error(f"--concurrency {args.concurrency} is not a multiple of --pilots {args.pilots}")
    per_pilot = args.concurrency // args.pilots
    profile = Path(args.profile).resolve() if args.profile else None
    if profile:
        profile.mkdir(parents=True, exist_ok=True)
    layout = f"{args.pilots} pilot{'s' if args.pilots > 1 else ''} x {per_pilot} core{'s' if per_pilot > 1 else ''}"
    print(
        f"host: {cores} usable cores; C = {args.concurrency}; Pilotfish: {layout}; "
        f"Celery: prefork x {args.concurrency}; {args.n} jobs of `true` each, batches of {args.batch}; "
        f"scratch {args.scratch or tempfile.gettempdir()}"
    )
    rng = random.Random(args.seed)
    pauses = [args.pause if args.seed is None else rng.uniform(0, 2 * args.pause) for _ in range(args.trials)]

    with tempfile.TemporaryDirectory(prefix="bench-e2e-", dir=args.scratch) as tmp:
        base = Path(tmp)
        server = RedisServer(base / "redis").start()
        try:
            context = Context(Settings(redis_url=server.url, state_dir=str(base / "state")))

            def phase(sandbox: str, number: int) -> Throughput:
                """One Pilotfish phase: its pilots started, idle ``--settle`` s, the N jobs, the pilots stopped."""
                where = base / f"pf-{sandbox}-{number}"
                prof = profile / f"round-{number}" if profile and sandbox == "none" else None
                if prof:
                    prof.mkdir(parents=True, exist_ok=True)
                label = "Pilotfish, no sandbox" if sandbox == "none" else f"Pilotfish, {sandbox} (default)"
                with pilots(
                    server.url, context.store, args.pilots, per_pilot, where, sandbox=sandbox, profile=prof
                ) as ps:
                    time.sleep(args.settle)
                    return run_pilotfish(context, server, [p.pid for p in ps], args.n, args.batch, system=label)

            rounds: list[tuple[Throughput, Throughput, Throughput | None, SpawnFloor]] = []
            with celery_worker(server.url, args.concurrency, base / "celery") as worker:
                for number in range(1, args.rounds + 1):
                    pf = phase("none", number)
                    path, argv = launch.argv("true", child_env())  # what the unconfined pilot runs
                    floor = spawn_floor([path, *argv[1:]], args.concurrency)
                    cel = run_celery(server.url, server, worker, args.n, args.batch)
                    boxed = None if args.no_sandboxed else phase("bwrap", number)
                    rounds.append((pf, cel, boxed, floor))
                    top = ceiling(
                        args.concurrency,
                        floor.cpu_per_spawn,
                        pf.agent_cpu / pf.jobs,
                        pf.redis_cpu / pf.jobs,
                        pf.submit_cpu / pf.jobs,
                    )
                    print(
                        f"round {number}: Pilotfish {pf.rate:.0f} jobs/s unconfined"
                        + ("" if boxed is None else f", {boxed.rate:.0f} jobs/s in bwrap")
                        + f"; Celery {cel.rate:.0f} jobs/s; ratio {pf.rate / cel.rate:.2f}"
                        + ("" if boxed is None else f" (bwrap {boxed.rate / cel.rate:.2f})")
                        + f"; ceiling {top / cel.rate:.2f}, idle {pf.host_idle:.0%}"
                        + f" (load average {os.getloadavg()[0]:.2f})",
                        flush=True,
                    )
            trials: list[Trial] = []
            if args.trials:
                with pilots(server.url, context.store, args.pilots, per_pilot, base / "latency"):
                    time.sleep(args.settle)
                    trials = measure_latency(context, pauses)
            print()
            pf, cel, boxed, floor = sorted(rounds, key=lambda r: r[0].rate / r[1].rate)[len(rounds) // 2]
            label = f"median of {len(rounds)} alternating rounds: " if len(rounds) > 1 else ""
            print(f"{label}the round with the median ratio (load average {os.getloadavg()[0]:.2f} now)")
            print(throughput_table(pf, cel, args.concurrency, layout, boxed, args.pilots))
            print(bound_lines(pf, cel, floor, args.concurrency))
            if trials:
                print()
                print(latency_table(trials, f"{layout}, CLI pilots (bwrap), pause {args.pause:g} s"))
            if args.fast_poll and args.trials:
                with pilots(server.url, context.store, args.pilots, per_pilot, base / "fast", fast_poll=True):
                    time.sleep(args.settle)
                    fast = measure_latency(context, pauses)
                print()
                print(latency_table(fast, f"{layout}, idle back-off capped at 5 ms"))
        finally:
            server.stop()
    if profile:
        print()
        print(profile_table(sorted(profile.glob("round-*/pilot-*.prof"))))
    if not args.no_guard:
        from count_match import guard  # beside the host's figures, the match's own cost: free of its load

        print()
        print(guard())


if __name__ == "__main__":
    main()
