#!/usr/bin/env python3
"""Chaos benchmark: a real deployment, thousands of jobs, SIGKILL at random moments, and what was lost.

It starts a deployment as ``pilotfish up`` does (embedded Valkey, Celery worker, beat, director, Flower) in a
temporary state directory, with a local queue of 1-core pilots (at least two run at once), and submits
``--jobs`` short ``sh`` jobs. Each payload appends ``<job> <attempt> <pilot> start|end <time>`` to one log.
Meanwhile it kills, with SIGKILL, at random moments, ``--kills`` processes spread over every kind: pilots,
guardians, payloads, the Celery worker, beat, the director, Flower and the embedded Redis, and after a kill
of a part that a supervisor restarts it runs ``pilotfish up`` again, as the supervisor would. When every
job has ended (or ``--timeout``), it prints one table:

* **lost**: jobs acknowledged at submission that never completed;
* **recorded done twice**: completions the store accepted beyond one per job (the rule's success counter,
  which the same atomic script that records a completion increments, against the jobs done);
* **done without a completed run**: a job recorded done whose attempt never wrote its ``end`` line;
* **ran to its end twice while the first run's pilot lived**: a violation; a second full run after the
  first run's pilot was killed before it could report (or after the first run itself was killed between
  its last line and its exit) is at-least-once by nature and counted apart;
* **logs with a traceback**: a crash, or an error that escaped a component's own handling;
* **started more than once**; and the **recovery** after each kind of kill: from the kill to the next job
  start, median and max.

Targets: 0 lost, 0 recorded done twice, 0 false-done, 0 second runs while the first run's pilot lived, and
max recovery <= 2 x lease + director interval. Exit status 0 when every target is met.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from matcher.cli.deploy import MARKER, running_pid  # noqa: E402
from matcher.submission import JobSpec, Submitter  # noqa: E402
from taskqueues import embedded  # noqa: E402
from taskqueues.context import Context  # noqa: E402
from taskqueues.settings import Settings  # noqa: E402
from taskqueues.store.records import JobState  # noqa: E402

KINDS = ("pilot", "guardian", "payload", "worker", "beat", "director", "flower", "redis")
SUPERVISED = {"worker", "beat", "director", "flower", "redis"}
RULE = "chaos"

CATALOG = """
[sites.Chaos.ces.host]
[sites.Chaos.ces.host.batch_options]
capacity = { cpu = @PILOTS@ }
grace = 2
[sites.Chaos.ces.host.queues.q]
n_max_queued = @PILOTS@
max_running = @PILOTS@
wall_granularity = 60
shapes = [{ name = "c1", cpu = 1, mem = "300M", wall = "2h", cost = 1.0 }]
"""


@dataclass
class Kill:
    kind: str
    at: float
    pid: int
    pilot: str = ""  # the pilot a pilot kill took down (its name, as payloads log it)
    run: tuple[str, int] | None = None  # the (job, attempt) a payload kill hit
    back: float = 0.0  # when `pilotfish up` had started the part again
    held: dict[str, int] = field(default_factory=dict)  # a killed pilot's jobs then: id -> attempt
    requeued: dict[str, float] = field(default_factory=dict)  # id -> when the store had it back (attempt + 1)


@dataclass
class Run:
    """What the payload log says of one job."""

    starts: list[tuple[int, str, float]] = field(default_factory=list)  # (attempt, pilot, time)
    ends: list[tuple[int, str, float]] = field(default_factory=list)


class Deployment:
    """``pilotfish up``/``down`` in a private state directory, and the processes to kill."""

    def __init__(self, base: Path, args: argparse.Namespace) -> None:
        self.base = base
        self.state = base / "state"
        (base / "catalog.toml").write_text(CATALOG.replace("@PILOTS@", str(args.pilots)))
        self.env = {
            **os.environ,
            "PILOTFISH_STATE_DIR": str(self.state),
            "PILOTFISH_CATALOG": str(base / "catalog.toml"),
            "PILOTFISH_LEASE_SECONDS": str(args.lease),
            "PILOTFISH_REAP_INTERVAL": str(args.reap_interval),
            "PILOTFISH_DIRECTOR_INTERVAL": str(args.director_interval),
            "PILOTFISH_PILOT_IDLE_TIMEOUT": str(args.idle_timeout),
            "PILOTFISH_FLOWER_PORT": str(_free_port()),
            "PILOTFISH_API_PORT": str(_free_port()),
            "PILOTFISH_BACKOFF_SECONDS": "2",
            # The payloads append to a log there (requirement sandbox_rw): the one place of the run they may.
            "PILOTFISH_PAYLOAD_SHARED_PATHS": str(base / "payloads"),
        }
        for name in ("PILOTFISH_REDIS_URL", "PILOTFISH_PILOT_REDIS_URL", "PILOTFISH_CONFIG", MARKER):
            self.env.pop(name, None)
        self.settings = Settings.load(env=self.env)

    def cli(self, *args: str) -> str:
        done = subprocess.run(
            [sys.executable, "-m", "matcher.cli", *args],
            cwd=ROOT,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        if done.returncode != 0:
            raise SystemExit(f"chaos: pilotfish {' '.join(args)} failed: {done.stderr.strip()}")
        return done.stdout

    def context(self) -> Context:
        return Context(self.settings)

    def processes(self) -> Iterator[psutil.Process]:
        """Every live process of the deployment (pilots, guardians and payloads included). A payload's
        environment holds no deployment path (the marker is the state directory's): payloads are found as
        the descendants of the deployment's processes."""
        marker = str(self.state.resolve())
        seen: set[int] = set()
        for process in psutil.process_iter():
            try:
                if process.environ().get(MARKER) == marker and process.status() != psutil.STATUS_ZOMBIE:
                    for member in [process, *process.children(recursive=True)]:
                        if member.pid not in seen:
                            seen.add(member.pid)
                            yield member
            except psutil.Error:
                continue

    def targets(self, kind: str) -> list[tuple[int, str]]:
        """(pid, pilot name) of every process of ``kind`` alive now."""
        if kind == "redis":
            server = embedded.running(self.state)
            pid = server.pid() if server else None
            return [(pid, "")] if pid else []
        if kind in SUPERVISED:
            pid = running_pid(self.context(), kind)
            return [(pid, "")] if pid else []
        found = []
        for process in self.processes():
            try:
                argv = process.cmdline()
                env = process.environ()
            except psutil.Error:
                continue
            text = " ".join(argv)
            if kind == "pilot" and "matcher.cli pilot" in text:
                found.append((process.pid, _pilot_name(env)))
            elif kind == "guardian" and "pilot.agent.guardian" in text:
                found.append((process.pid, ""))
            elif kind == "payload" and argv[:2] == ["/bin/sh", "-c"] and env.get("PILOTFISH_JOB_ID"):
                found.append((process.pid, f"{env['PILOTFISH_JOB_ID']} {env.get('PILOTFISH_ATTEMPT', '0')}"))
        return found


def _pilot_name(env: dict[str, str]) -> str:
    """A local pilot's name, as it derives it (pilot.agent.config.identity_from_environment)."""
    import socket

    batch_id = env.get("PILOTFISH_BATCH_ID", "").removeprefix("local-")
    return f"local-{batch_id}@{socket.gethostname().split('.')[0] or 'localhost'}"


def _free_port() -> int:
    from taskqueues.store.redis_server import free_port

    return free_port()


def submit(deployment: Deployment, n: int, seconds: float, log: Path) -> list[str]:
    line = f'"$PILOTFISH_JOB_ID $PILOTFISH_ATTEMPT $PILOTFISH_PILOT %s $(date +%%s.%%N)" >> {log}'
    command = f"echo {line % 'start'}; sleep {seconds}; echo {line % 'end'}"
    jobs = [
        JobSpec(
            name=f"c{i}",
            command=command,
            ete=seconds,
            rule=RULE,
            max_retries=10,
            requirements={"cpu": 1, "mem": "50M", "sandbox_rw": str(log.parent)},
        )
        for i in range(n)
    ]
    ctx = deployment.context()
    ids: list[str] = []
    for first in range(0, n, 500):  # one request per 500 jobs: the submissions are acknowledged in turn
        ids += Submitter.of(ctx).submit(jobs[first : first + 500], name=f"chaos-{first}").ids.values()
    return ids


def unfinished(deployment: Deployment, ids: list[str]) -> int:
    try:
        return sum(not job.state.final for job in deployment.context().store.jobs(ids))
    except Exception:  # the store is being restarted: ask again
        return len(ids)


def held_by(deployment: Deployment, ids: list[str], pilot: str) -> dict[str, int]:
    """The jobs leased to ``pilot`` now (id -> attempt)."""
    try:
        return {
            j.id: j.attempt
            for j in deployment.context().store.jobs(ids)
            if j.pilot == pilot and j.state in (JobState.MATCHED, JobState.RUNNING)
        }
    except Exception:  # the store is being restarted
        return {}


def watch_requeues(deployment: Deployment, kills: list[Kill]) -> None:
    """Note when each job a killed pilot held came back to the store's queue (a later attempt, or done)."""
    pending = [(k, job) for k in kills for job in list(k.held) if job not in k.requeued]
    if not pending:
        return
    try:
        now = {j.id: j for j in deployment.context().store.jobs(sorted({job for _, job in pending}))}
    except Exception:
        return
    for kill, job in pending:
        seen = now.get(job)
        if seen is None:
            continue
        if seen.attempt > kill.held[job]:
            kill.requeued[job] = time.time()
        elif seen.state is JobState.DONE:
            del kill.held[job]  # its pilot reported it just before its death


def chaos(deployment: Deployment, ids: list[str], args: argparse.Namespace, rng: random.Random) -> list[Kill]:
    """Kill ``args.kills`` processes, spread over the run: the i-th when about i/(kills+1) of the jobs have
    ended (so kills keep coming while there is work, however fast it goes), the kinds in shuffled rounds;
    then wait until every job has ended (or the timeout)."""
    kills: list[Kill] = []
    order: list[str] = []
    marks = sorted((i + rng.uniform(-0.4, 0.4)) / (args.kills + 1) for i in range(1, args.kills + 1))
    deadline = time.monotonic() + args.timeout
    while time.monotonic() < deadline:
        left = unfinished(deployment, ids)
        watch_requeues(deployment, kills)
        if left == 0:
            break
        if len(kills) >= len(marks) or (len(ids) - left) / len(ids) < marks[len(kills)]:
            time.sleep(0.2)
            continue
        if not order:
            order = list(KINDS)
            rng.shuffle(order)
        for kind in list(order):
            found = deployment.targets(kind)
            if not found:
                continue
            pid, pilot = rng.choice(found)
            held = held_by(deployment, ids, pilot) if kind == "pilot" else {}
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                # It ended between the scan and the kill (a 0.2 s payload often does on a busy host):
                # the kind stays in this round, or a round could end without a kill of it.
                continue
            order.remove(kind)
            kill = Kill(kind, time.time(), pid, pilot if kind == "pilot" else "", held=held)
            if kind == "payload":
                job, attempt = pilot.split()
                kill.run = (job, int(attempt))
            kills.append(kill)
            print(
                f"chaos: [{len(kills):2}] {kill.at:.2f} kill -9 {kind} (pid {pid}{', ' + pilot if pilot else ''}); "
                f"{left} jobs left",
                file=sys.stderr,
            )
            if kind in SUPERVISED:
                time.sleep(args.restart_delay)
                deployment.cli("up")
                kill.back = time.time()
            break
        else:
            time.sleep(0.2)  # nothing of the kinds left in this round runs right now
    return kills


def read_runs(log: Path) -> dict[str, Run]:
    runs: dict[str, Run] = defaultdict(Run)
    if not log.exists():
        return runs
    for line in log.read_text().splitlines():
        parts = line.split()
        if len(parts) != 5:
            continue
        job, attempt, pilot, what, at = parts
        (runs[job].starts if what == "start" else runs[job].ends).append((int(attempt), pilot, float(at)))
    return runs


@dataclass
class Figures:
    jobs: int
    kills: dict[str, int]
    lost: int
    done_twice: int
    false_done: int
    second_runs_living: list[str]
    second_runs_after_death: int
    started_twice: int
    recovery: dict[str, tuple[float, float]]
    # A killed pilot's own jobs: from the kill to their next start (median, max), the most it exceeded its bound
    # by (<= 0 when met), and how many had a Redis restart between the kill and the lease expiry.
    requeue: tuple[float, float, float, int] | None
    seconds: float
    unfinished: list[str] = field(default_factory=list)  # what the store says of each job not done
    crashed: list[str] = field(default_factory=list)  # logs of the deployment's processes with a traceback


def tracebacks(logs: Path) -> list[str]:
    """The logs (worker, beat, director, Flower, every pilot) that hold a traceback: a crash, or an error
    that escaped the component's own handling. A killed process leaves none."""
    return sorted(
        str(p.relative_to(logs))
        for p in logs.rglob("*")
        if p.is_file() and "Traceback (most recent call last)" in p.read_text(errors="replace")
    )


def analyse(deployment: Deployment, ids: list[str], kills: list[Kill], log: Path, seconds: float) -> Figures:
    ctx = deployment.context()
    jobs = {job.id: job for job in ctx.store.jobs(ids)}
    runs = read_runs(log)
    done = [job for job in jobs.values() if job.state is JobState.DONE]
    _, rules = ctx.store.ete_stats([], [RULE])
    recorded = rules[RULE].n if RULE in rules else 0
    false_done = sum(1 for job in done if job.attempt not in {a for a, _, _ in runs[job.id].ends})
    killed_at = {k.pilot: k.at for k in kills if k.kind == "pilot" and k.pilot}
    killed_runs = {k.run for k in kills if k.run is not None}
    living: list[str] = []
    after_death = 0
    for job_id, run in runs.items():
        ends = sorted(run.ends, key=lambda e: e[2])
        for (first, pilot, _), (later, _, _) in itertools.pairwise(ends):
            second_start = min((t for a, _, t in run.starts if a == later), default=float("inf"))
            if (pilot in killed_at and killed_at[pilot] < second_start) or (job_id, first) in killed_runs:
                after_death += 1  # its pilot died before it could report, or it was killed after its last line
            else:
                living.append(f"job {job_id}: {run}")
    starts = sorted(t for run in runs.values() for _, _, t in run.starts)
    recovery: dict[str, list[float]] = defaultdict(list)
    for kill in kills:
        after = next((t for t in starts if t > kill.at), None)
        if after is not None:
            recovery[kill.kind].append(after - kill.at)
    held: list[float] = []
    over: list[float] = []
    compound = 0
    lease = deployment.settings.lease_seconds
    for kill in kills:
        if kill.kind != "pilot":
            continue
        # lease + reap + director interval; a Redis restart before the lease expired adds its downtime and
        # the half lease of grace the reaper gives leases after a restart (Store.requeue_expired).
        bound = lease + deployment.settings.reap_interval + deployment.settings.director_interval
        restarts = [k for k in kills if k.kind == "redis" and kill.at <= k.at <= kill.at + bound]
        bound += sum(k.back - k.at + lease / 2 for k in restarts)
        for job in kill.held:
            back = kill.requeued.get(job, float("inf"))
            held.append(back - kill.at)
            over.append(held[-1] - bound)
            compound += bool(restarts)
    kinds = {kind: sum(1 for k in kills if k.kind == kind) for kind in KINDS}
    return Figures(
        jobs=len(ids),
        kills=kinds,
        lost=len(ids) - len(done),
        done_twice=max(0, recorded - len(done)),
        false_done=false_done,
        second_runs_living=living,
        second_runs_after_death=after_death,
        started_twice=sum(1 for run in runs.values() if len(run.starts) > 1),
        recovery={kind: (statistics.median(v), max(v)) for kind, v in recovery.items()},
        requeue=(statistics.median(held), max(held), max(over), compound) if held else None,
        seconds=seconds,
        crashed=tracebacks(deployment.state / "logs"),
        unfinished=[
            f"job {job.id} {job.state.value} attempt {job.attempt} pilot {job.pilot} ({job.reason}); "
            f"runs {runs[job.id]}"
            for job in jobs.values()
            if job.state is not JobState.DONE
        ],
    )


def table(figures: Figures, bound: float, requeue_bound: float) -> tuple[list[str], bool]:
    """The printed table and whether every target was met (``requeue_bound``: a killed pilot's jobs, when no
    Redis restart came in between)."""
    worst = max((m for _, m in figures.recovery.values()), default=0.0)
    checks = [
        ("lost (never completed)", figures.lost, 0),
        ("recorded done twice", figures.done_twice, 0),
        ("done without a completed run", figures.false_done, 0),
        ("ran to its end twice while the first run's pilot lived", len(figures.second_runs_living), 0),
        ("logs with a traceback (a crash or an unhandled error)", len(figures.crashed), 0),
    ]
    rows = [
        f"jobs {figures.jobs}, {sum(figures.kills.values())} kills in {figures.seconds:.0f} s: "
        + ", ".join(f"{kind} {n}" for kind, n in figures.kills.items())
    ]
    ok = True
    for label, value, target in checks:
        met = value == target
        ok &= met
        rows.append(f"  {label:<62} {value:>6}   target {target}  {'ok' if met else 'MISSED'}")
    rows.append(
        f"  {'ran to its end twice after its first run or pilot was killed':<62} "
        f"{figures.second_runs_after_death:>6}   (at-least-once: counted apart)"
    )
    rows.append(f"  {'started more than once':<62} {figures.started_twice:>6}")
    rows.append(
        f"  recovery, kill to the next job start (median / max, s); bound 2 x lease + director interval = {bound:g} s"
    )
    for kind in KINDS:
        if kind in figures.recovery:
            median, most = figures.recovery[kind]
            rows.append(f"    {kind:<10} {median:6.1f} / {most:6.1f}")
    met = worst <= bound
    ok &= met
    rows.append(f"  {'max recovery':<62} {worst:6.1f}   target <= {bound:g}  {'ok' if met else 'MISSED'}")
    if figures.requeue is not None:
        median, most, excess, compound = figures.requeue
        met = excess <= 0
        ok &= met
        label = "a killed pilot's jobs back in their task queue (median / max, s)"
        rows.append(
            f"  {label:<62} {median:6.1f} / {most:.1f}   target <= lease + reap + director = "
            f"{requeue_bound:g}  {'ok' if met else 'MISSED'}"
        )
        if compound:
            rows.append(
                f"    ({compound} with a Redis restart before their lease expired: bound + its downtime "
                "+ half a lease of grace)"
            )
    return rows, ok


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--kills", type=int, default=25)
    parser.add_argument("--pilots", type=int, default=4, help="1-core pilots at most at once (>= 2)")
    parser.add_argument("--payload-seconds", type=float, default=0.1)
    parser.add_argument("--lease", type=float, default=10.0)
    parser.add_argument("--reap-interval", type=float, default=2.0)
    parser.add_argument("--director-interval", type=float, default=2.0)
    parser.add_argument("--idle-timeout", type=float, default=30.0)
    parser.add_argument("--restart-delay", type=float, default=0.5, help="a supervisor's delay before `up`")
    parser.add_argument("--timeout", type=float, default=900.0)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument(
        "--keep-logs",
        type=Path,
        default=None,
        help="copy the deployment's logs and the payload log here when a target is missed",
    )
    args = parser.parse_args(argv)
    if args.pilots < 2:
        parser.error("--pilots must be at least 2")
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    rng = random.Random(seed)
    with tempfile.TemporaryDirectory(prefix="pilotfish-chaos-") as tmp:
        deployment = Deployment(Path(tmp), args)
        log = Path(tmp) / "payloads" / "payloads.log"  # in payload_shared_paths: sandboxed payloads write it
        try:
            deployment.cli("up")
            ids = submit(deployment, args.jobs, args.payload_seconds, log)
            started = time.monotonic()
            kills = chaos(deployment, ids, args, rng)
            figures = analyse(deployment, ids, kills, log, time.monotonic() - started)
            rows, ok = table(
                figures,
                2 * args.lease + args.director_interval,
                args.lease + args.reap_interval + args.director_interval,
            )
            if not ok and args.keep_logs is not None:
                shutil.copytree(deployment.state / "logs", args.keep_logs / "logs", dirs_exist_ok=True)
                shutil.copy(deployment.state / "redis" / "redis.log", args.keep_logs / "redis.log")
                shutil.copy(log, args.keep_logs / "payloads.log")
        finally:
            subprocess.run(
                [sys.executable, "-m", "matcher.cli", "down"],
                cwd=ROOT,
                env=deployment.env,
                capture_output=True,
                timeout=300,
            )
    for line in figures.unfinished:
        print(f"chaos: not completed: {line}", file=sys.stderr)
    for line in figures.second_runs_living:
        print(f"chaos: ran twice while its first pilot lived: {line}", file=sys.stderr)
    for name in figures.crashed:
        print(f"chaos: traceback in {name}", file=sys.stderr)
    print(
        f"python scripts/chaos.py --jobs {args.jobs} --kills {args.kills} --seed {seed} "
        f"(lease {args.lease:g} s, reap every {args.reap_interval:g} s, director every {args.director_interval:g} s, "
        f"{args.pilots} pilots, payloads of {args.payload_seconds:g} s)"
    )
    print("\n".join(rows))
    print(json.dumps({"ok": ok, "seed": seed}))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
