#!/usr/bin/env python3
"""Many pilots against one store: N simulated pilots speaking the real pilot's exchange with one redis-server.

A simulated pilot runs no payloads; it does, against the store, what ``pilot.agent`` does, with its default
periods (:class:`pilot.agent.config.PilotConfig`): it subscribes to the wake channel and to its own channel
on a connection of its own, heartbeats every lease/3 (20 s: the heartbeat script with the pilot's record,
then reading its stop request), and sends its reports and its next match as one exchange on a second
connection of its own (:meth:`Store.send_exchange`), backing off 0.05 s doubling to 2 s while nothing
matches, matching again at once when the wake channel speaks. ``--procs`` processes each multiplex their
share of the pilots around one selector, as the real pilot multiplexes its sockets.

For each N of ``--pilots``, after filling the store with ``--jobs`` waiting jobs (bench_match's shapes: 10
task queues in 10 catalog queues; 10^6 unless scaled down):

* **idle**: every pilot offers what no waiting job fits (30 s left, below every job's need), so each match
  walks the real indexes and finds nothing; after a warm-up long enough for the back-off to reach its cap,
  the server's CPU (INFO ``used_cpu_user`` + ``used_cpu_sys``) over ``--seconds`` is the idle cost;
* **load**: a publication on the wake channel (as a submission makes) wakes every pilot, which from then
  offers its free cores (1, 2, 4 or 8, 6000 s left) and "runs" what it leased for ``--payload-seconds``
  before reporting the completions with its next match in one exchange. Match rate = jobs leased per
  second over ``--seconds``; latency = from an exchange's send to its reply, as the pilot measures it
  (its client-side queueing included);
* **memory**: the server's ``used_memory`` and the pilot processes' RSS, before the pilots connect and
  after they have subscribed and sent their first heartbeat, per pilot;
* **probe**: one more pilot in a process of its own, as a real pilot runs one per node, sends an exchange
  every ``PROBE_PERIOD`` through the load (its last job's completion and a match for one core) and times
  each; its p99 is what a real pilot sees, without the queueing of thousands of simulated pilots sharing
  one Python thread. The target is judged on it;
* **server side**: ``INFO commandstats`` over the load window: FCALLs per second, microseconds per FCALL,
  the share of a core the server spent inside commands (a function's own commands included) next to its
  CPU (which adds the network and pub/sub), and that time per pilot exchange.

Afterwards every pilot reports what it still holds, and the counts must agree: the jobs the pilots leased
equal those they completed, and the server's counters (``matched``, ``ended:done``) moved by as much.
Targets (issue 16): 1,000 idle pilots cost the server under 10% of one core; 5,000 pilots keep p99 match
latency under 20 ms. Where one is missed, the lines after the table say what bounds it: when the probe is
under the target and the simulated pilots are not, their own processes are the bound (a real pilot is
one process per node); when the probe misses it too, the server side (its time inside commands: one Lua
thread; its CPU beyond that: network and dispatch) or the machine (server and pilots share 2 cores).

Usage: python scripts/bench_pilots.py [--pilots 100,1000,5000] [--jobs 1000000] [--seconds 20]
       [--payload-seconds 1] [--procs 2]
"""

from __future__ import annotations

import argparse
import heapq
import multiprocessing as mp
import os
import random
import selectors
import socket
import struct
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_match import N_QUEUES, fcall_stats, fill, make_jobs, queue_name, queues_for, server_cpu  # noqa: E402

from pilot.agent.config import PilotConfig  # noqa: E402
from taskqueues.errors import StaleReport  # noqa: E402
from taskqueues.store import Store, Subscription  # noqa: E402
from taskqueues.store.counters import LatencyHistogram  # noqa: E402
from taskqueues.store.exchange import PendingExchange  # noqa: E402
from taskqueues.store.keys import MATCHED_COUNT, WAKE_SHARDS  # noqa: E402
from taskqueues.store.records import PilotOffer, RunResult  # noqa: E402
from taskqueues.store.redis_server import RedisServer, server_version  # noqa: E402

#: The real pilot's default periods (one place: its config).
CONFIG = PilotConfig(queue="bench")
HEARTBEAT, BACKOFF_MIN, BACKOFF_MAX, LEASE = CONFIG.heartbeat, CONFIG.backoff_min, CONFIG.backoff_max, CONFIG.lease
#: Seconds left an idle pilot offers: below the need of every waiting job (60 s estimates need 90 s).
IDLE_LEFT = 30.0
#: Seconds left a working pilot offers: above the need of every job (3600 s estimates need 5400 s).
BUSY_LEFT = 6000.0
#: Settling time after the load starts (every pilot woken, its first jobs running) before the window.
SETTLE = 1.0
N_TQS = 10
IDLE_TARGET, LATENCY_TARGET = 0.10, 0.020  # of one core at 1,000 idle pilots; p99 seconds at 5,000 pilots
#: The small submission before the load (small_submission): this many jobs for one task queue, the first
#: (its queue is the first queue), and the seconds its wake and the vain matches it sets off have to settle.
SMALL_JOBS, SMALL_QUEUE, SMALL_SETTLE = 10, 0, 1.0
WAKE_TARGET = 0.100  # seconds: the load's wake reaches every idle pilot (issue 31)
SO_TIMESTAMPNS = 35  # Linux's socket option: a receive timestamp with each read (not in Python's socket module)
LOAD_WAKE = b"load"  # what the load's wake says, so a pilot late to read tells it from the small submission's
#: Seconds between the probe pilot's exchanges (probe_main): modest next to the simulated pilots' rate.
PROBE_PERIOD = 0.05


def rss() -> int:
    """Resident bytes of this process."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@dataclass
class SimPilot:
    """One simulated pilot: its size, its two connections, and where it is in its loop."""

    name: str
    queue: str
    cpu: int
    conn: Any = None
    sub: Subscription | None = None
    backoff: float = BACKOFF_MIN
    next_match: float = 0.0
    next_heartbeat: float = 0.0
    inflight: PendingExchange | None = None
    sent_at: float = 0.0
    want: int = 0
    running: list[tuple[str, int]] = field(default_factory=list)
    ends_at: float = 0.0
    done: list[tuple[str, int, RunResult]] = field(default_factory=list)
    latency: LatencyHistogram = field(default_factory=LatencyHistogram)
    hungry: bool = True  # listening on its wake channel: its last match found nothing (pilot.agent.wake)
    sock: Any = None  # its subscription's socket, which stamps what it receives (SO_TIMESTAMPNS)
    woken: float = 0.0  # when the load's wake reached its socket (the kernel's stamp; time.time)
    read: float = 0.0  # when its process read it
    small: float = 0.0  # when the small submission's wake reached it


@dataclass
class Phases:
    """Wall-clock (time.time) moments every worker follows: the small submission, the load starts, its
    window, its end."""

    small_at: float
    load_from: float
    window_from: float
    load_until: float


class Worker:
    """Some pilots multiplexed around one selector in one process."""

    def __init__(self, url: str, names: list[str], seed: int, payload_seconds: float) -> None:
        # Two connections of its own per pilot and one for heartbeats: more than the default pool allows.
        self.store = Store(redis.Redis.from_url(url, max_connections=2 * len(names) + 8), lease_seconds=LEASE)
        self.payload_seconds = payload_seconds
        rng = random.Random(seed)
        self.pilots = []
        for name in names:
            cpu = rng.choice([1, 2, 4, 8])
            self.pilots.append(SimPilot(name, queue_name(rng.choice(queues_for(cpu))), cpu))
        self.rng = rng
        self.selector = selectors.DefaultSelector()
        self.timers: list[tuple[float, int, str]] = []  # (due, pilot index, "match" | "beat" | "end")
        self.latencies: list[float] = []
        self.window_jobs = 0
        self.matched = self.completed = self.refused = self.exchanges = self.beats = 0
        self.idle_exchanges = self.window_exchanges = 0
        self.phases: Phases | None = None

    # -- setup -------------------------------------------------------------------------------------

    def connect(self) -> None:
        """Each pilot subscribes (wake channel, own channel), heartbeats once, and takes its exchange connection;
        their periods start at random phases, as pilots started at different times."""
        keys, now = self.store.keys, time.monotonic()
        for i, p in enumerate(self.pilots):
            p.sub = self.store.subscribe(ignore_subscribe_messages=True)
            p.sub.subscribe(keys.pilot_wake_channel(p.queue, p.name))
            p.sub.subscribe(keys.pilot_channel(p.name))
            while p.sub.message(0.5) is not None:
                pass
            p.sock = p.sub.socket()
            p.sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
            self.selector.register(p.sock, selectors.EVENT_READ, ("work", i))
            p.conn = self.store.own_connection()
            self.beat(p, i, now)
            p.next_heartbeat = now + self.rng.uniform(0, HEARTBEAT)
            heapq.heappush(self.timers, (p.next_heartbeat, i, "beat"))
            p.next_match = now + self.rng.uniform(0, BACKOFF_MAX)
            heapq.heappush(self.timers, (p.next_match, i, "match"))

    def close(self) -> None:
        for p in self.pilots:
            if p.sub is not None:
                p.sub.close()
            if p.conn is not None:
                self.store.give_back(p.conn)
        self.selector.close()

    # -- what a pilot does -------------------------------------------------------------------------

    def record(self, p: SimPilot) -> dict[str, Any]:
        """The pilot's record, with the fields the real pilot sends (pilot.agent.heartbeat)."""
        used = len(p.running)
        return {
            "name": p.name,
            "queue": p.queue,
            "node": "bench",
            "batch": "local",
            "batch_id": p.name,
            "pid": os.getpid(),
            "cores": p.cpu,
            "mem": p.cpu * 2000,
            "tmp": 0,
            "used_cpu": used,
            "used_mem": used * 2000,
            "used_tmp": 0,
            "running": sorted(j for j, _ in p.running),
            "processed": self.completed,
            "started": 0.0,
            "time_left": BUSY_LEFT,
            "draining": False,
        }

    def beat(self, p: SimPilot, i: int, now: float) -> None:
        """The heartbeat: renew what the pilot holds, send its record and latencies, read its stop request."""
        record = self.record(p)
        mlat = p.latency.take()
        if mlat is not None:
            record["mlat"] = mlat
        held = {job: attempt for job, attempt in p.running}
        held.update({job: attempt for job, attempt, _ in p.done})
        self.store.heartbeat(p.name, held, record)
        self.store.pilots.stop_request(p.name)
        self.beats += 1

    def send(self, p: SimPilot, i: int, now: float, offer: bool) -> None:
        """One exchange: the completions not yet reported and, with ``offer``, a match for the free cores."""
        phases = self.phases
        loading = phases is not None and phases.load_from <= time.time() < phases.load_until
        pilot_offer = None
        if offer:
            left = BUSY_LEFT if loading else IDLE_LEFT
            # it runs nothing when it asks (its payloads all ended): an empty running list, as pilots send
            pilot_offer = PilotOffer(p.name, p.queue, p.cpu, p.cpu * 2000, 0, left, running=())
        done, p.done = p.done, []
        p.inflight = self.store.send_exchange(p.name, p.conn, completions=done, offer=pilot_offer, max_jobs=p.cpu)
        p.want = p.cpu if offer else 0
        p.sent_at = now
        self.completed += len(done)
        self.exchanges += 1
        if not loading:
            self.idle_exchanges += 1
        elif phases is not None and time.time() >= phases.window_from:
            self.window_exchanges += 1
        sock = p.inflight.socket  # every exchange here carries a call: its replies come on this socket
        assert sock is not None
        self.selector.register(sock, selectors.EVENT_READ, ("reply", i))

    def received(self, p: SimPilot, i: int, now: float) -> None:
        assert p.inflight is not None
        assert p.inflight.socket is not None
        self.selector.unregister(p.inflight.socket)
        reply, p.inflight = p.inflight.receive(), None
        self.refused += len(reply.refused)
        self.completed -= len(reply.refused)
        if p.want == 0:
            return
        seconds = now - p.sent_at
        p.latency.observe(seconds)
        self.hungry(p, not reply.matched)
        phases = self.phases
        in_window = phases is not None and phases.window_from <= time.time() - seconds < phases.load_until
        if in_window:
            self.latencies.append(seconds)
            self.window_jobs += len(reply.matched)
        if not reply.matched:
            p.next_match = now + p.backoff
            p.backoff = min(p.backoff * 2, BACKOFF_MAX)
            heapq.heappush(self.timers, (p.next_match, i, "match"))
            return
        p.backoff = BACKOFF_MIN
        self.matched += len(reply.matched)
        p.running = [(job.id, job.attempt) for job in reply.matched]
        p.ends_at = now + self.payload_seconds * self.rng.uniform(0.5, 1.5)  # payloads end at their own pace
        heapq.heappush(self.timers, (p.ends_at, i, "end"))

    def hungry(self, p: SimPilot, yes: bool) -> None:
        """As the real pilot: listen on its wake channel only while its last match found nothing."""
        assert p.sub is not None
        if yes != p.hungry:
            channel = self.store.keys.pilot_wake_channel(p.queue, p.name)
            (p.sub.subscribe if yes else p.sub.unsubscribe)(channel)
            p.hungry = yes

    def woken(self, p: SimPilot, i: int, now: float, arrived: float) -> None:
        """The wake channel spoke: match at once, unless a match is on its way or jobs run. Subscription
        notices wake nobody. It arrived when the kernel stamped it on the pilot's socket (``arrived``, when
        the selector showed it, if no stamp came)."""
        assert p.sub is not None
        selected, arrived = arrived, received_at(p.sock) or arrived
        messages = p.sub.drain()
        if not messages:
            return
        phases = self.phases
        load = any(m.get("data") == LOAD_WAKE for m in messages)
        submitted = any(m.get("data") != LOAD_WAKE for m in messages)  # the store's '1' (both may be read at once)
        if phases is not None and not p.small and submitted and arrived >= phases.small_at:
            p.small = arrived
        if phases is not None and not p.woken and load:  # behind the submission's, its own stamp is unknown
            p.woken, p.read = selected if submitted else arrived, time.time()
        if p.inflight is None and not p.running:
            p.backoff = BACKOFF_MIN
            p.next_match = now
            heapq.heappush(self.timers, (now, i, "match"))

    def due(self, kind: str, p: SimPilot, i: int, when: float, now: float) -> None:
        """A timer fired (stale ones, superseded since they were set, are ignored)."""
        stopping = self.phases is not None and time.time() >= self.phases.load_until
        if kind == "beat" and when == p.next_heartbeat:
            self.beat(p, i, now)
            p.next_heartbeat = now + HEARTBEAT
            heapq.heappush(self.timers, (p.next_heartbeat, i, "beat"))
        elif kind == "match" and when == p.next_match and p.inflight is None and not p.running and not stopping:
            self.send(p, i, now, offer=True)
        elif kind == "end" and when == p.ends_at and p.running:
            result = RunResult(wall=self.payload_seconds, started=time.time() - self.payload_seconds)
            p.done = [(job, attempt, result) for job, attempt in p.running]
            p.running = []
            if p.inflight is None:  # else it goes with the next exchange, after that reply
                self.send(p, i, now, offer=not stopping)

    # -- the loop ----------------------------------------------------------------------------------

    def run_until(self, until: float) -> None:
        """Turn the loop until ``until`` (time.time)."""
        while True:
            now_wall = time.time()
            if now_wall >= until:
                return
            now = time.monotonic()
            while self.timers and self.timers[0][0] <= now:
                when, i, kind = heapq.heappop(self.timers)
                self.due(kind, self.pilots[i], i, when, now)
            timeout = min(until - now_wall, (self.timers[0][0] - now) if self.timers else 1.0, 1.0)
            events = self.selector.select(max(0.0, timeout))
            arrived = time.time()
            for key, _ in events:
                kind, i = key.data
                p = self.pilots[i]
                now = time.monotonic()
                if kind == "work":
                    self.woken(p, i, now, arrived)
                elif p.inflight is not None and p.inflight.ready():
                    self.received(p, i, now)
                    if p.inflight is None and p.done:  # its payloads ended while the reply was on its way
                        self.send(p, i, now, offer=time.time() < self.phases.load_until if self.phases else False)

    def drain(self) -> None:
        """After the load: finish what runs, report it, read every reply."""
        deadline = time.time() + self.payload_seconds + 60
        while time.time() < deadline and any(p.inflight or p.running or p.done for p in self.pilots):
            for i, p in enumerate(self.pilots):
                if p.inflight is None and p.done:
                    self.send(p, i, time.monotonic(), offer=False)
            self.run_until(min(deadline, time.time() + 0.05))
        for i, p in enumerate(self.pilots):
            if p.inflight is not None:
                self.received(p, i, time.monotonic())


def worker_main(url: str, names: list[str], seed: int, payload_seconds: float, inbox: Any, out: Any) -> None:
    """One process of pilots: connect, report memory, follow the phases main sends, report the tallies."""
    rss0 = rss()
    worker = Worker(url, names, seed, payload_seconds)
    try:
        worker.connect()
        out.put(("connected", rss() - rss0))
        phases: Phases = inbox.get()
        worker.phases = phases
        worker.run_until(phases.window_from)
        cpu0 = time.process_time()
        worker.run_until(phases.load_until)
        busy = (time.process_time() - cpu0) / (phases.load_until - phases.window_from)
        worker.drain()
        woken = [p.woken - phases.load_from for p in worker.pilots if p.woken]
        read = [p.read - phases.load_from for p in worker.pilots if p.read]
        small = [p.small - phases.small_at for p in worker.pilots if p.small]
        out.put(
            (
                "done",
                {
                    "latencies": worker.latencies,
                    "window_jobs": worker.window_jobs,
                    "matched": worker.matched,
                    "completed": worker.completed,
                    "refused": worker.refused,
                    "exchanges": worker.exchanges,
                    "window_exchanges": worker.window_exchanges,
                    "idle_exchanges": worker.idle_exchanges,
                    "beats": worker.beats,
                    "woken": woken,
                    "read": read,
                    "small": small,
                    "in_small_queue": sum(p.queue == queue_name(SMALL_QUEUE) for p in worker.pilots),
                    "busy": busy,
                    "held": sum(len(p.running) + len(p.done) for p in worker.pilots),
                    "cores": sum(p.cpu for p in worker.pilots),
                },
            )
        )
    except StaleReport as exc:  # pragma: no cover - a bench that lost leases says so
        out.put(("error", str(exc)))
    except Exception as exc:
        out.put(("error", failure(exc)))
    finally:
        worker.close()


def failure(exc: BaseException) -> str:
    """What failed and where (redis-py's repr of its errors names the class only: not the message)."""
    where = traceback.extract_tb(exc.__traceback__)[-1] if exc.__traceback__ else None
    return f"{type(exc).__name__}: {exc}" + (f" ({where.filename}:{where.lineno})" if where else "")


def probe_main(url: str, name: str, seed: int, inbox: Any, out: Any) -> None:
    """The probe: one more pilot in a process of its own, as a real pilot runs one per node. Through the load
    it sends an exchange every ``PROBE_PERIOD`` (its last job's completion and a match for one core) and
    waits for the reply; what it measures has no other pilot's queueing in its own process."""
    worker = Worker(url, [name], seed, 0.0)
    p = worker.pilots[0]
    p.cpu, p.queue = 1, queue_name(queues_for(1)[seed % len(queues_for(1))])
    try:
        worker.connect()
        out.put(("connected", 0))
        phases: Phases = inbox.get()
        latencies: list[float] = []
        matched = completed = refused = exchanges = in_window = 0
        done: list[tuple[str, int, RunResult]] = []
        beat_at = time.time() + HEARTBEAT
        tick = phases.load_from
        while True:
            time.sleep(max(0.0, tick - time.time()))
            now = time.time()
            offer = PilotOffer(p.name, p.queue, 1, 2000, 0, BUSY_LEFT, running=()) if now < phases.load_until else None
            t0 = time.perf_counter()
            reply = worker.store.exchange(p.name, completions=done, offer=offer, max_jobs=1)
            seconds = time.perf_counter() - t0
            exchanges += 1
            completed += len(done) - len(reply.refused)
            refused += len(reply.refused)
            if offer is not None and now >= phases.window_from:
                latencies.append(seconds)
                in_window += 1
            matched += len(reply.matched)
            result = RunResult(wall=0.0, started=time.time())
            done = [(job.id, job.attempt, result) for job in reply.matched]
            if offer is None and not done:
                break
            if time.time() >= beat_at:
                p.running = [(job, attempt) for job, attempt, _ in done]
                worker.beat(p, 0, time.monotonic())
                beat_at += HEARTBEAT
            tick += PROBE_PERIOD
        tally = {"latencies": [], "probe": latencies, "window_jobs": 0, "matched": matched, "completed": completed}
        tally.update(
            refused=refused, exchanges=exchanges, window_exchanges=in_window, idle_exchanges=0, beats=worker.beats
        )
        out.put(("done", {**tally, "woken": [], "read": [], "small": [], "busy": 0.0, "held": 0, "cores": 0}))
    except Exception as exc:
        out.put(("error", failure(exc)))
    finally:
        worker.close()


def received_at(sock: Any) -> float | None:
    """When the kernel received the first unread bytes of ``sock`` (time.time), read without consuming them:
    the moment a message reached the pilot, however late its simulating process looks at it. None when
    nothing is unread on the socket (the client library has read it already) or no stamp came."""
    try:
        _, ancillary, _, _ = sock.recvmsg(1, socket.CMSG_SPACE(16), socket.MSG_PEEK | socket.MSG_DONTWAIT)
    except OSError:
        return None
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(data) >= 16:
            seconds, nanoseconds = struct.unpack("qq", data[:16])
            return float(seconds) + nanoseconds / 1e9
    return None


def wake_channels(store: Store, queues: list[int]) -> list[str]:
    """Every wake shard channel of these bench queues."""
    return [store.keys.wake_channel(queue_name(q), shard) for q in queues for shard in range(WAKE_SHARDS)]


def small_submission(store: Store, seed: int) -> tuple[float, float]:
    """Submit ``SMALL_JOBS`` jobs for one queue, none of which an idle pilot fits (they need more time than it
    offers): the store wakes as many of that queue's idle pilots as jobs entered (issue 31), who match in
    vain and listen again. The server's microseconds in that submit call (its wake included), and when it
    was sent (time.time)."""
    tq = SMALL_QUEUE  # task queue t goes to queue t % N_QUEUES (bench_match.make_jobs)
    jobs = make_jobs([tq] * SMALL_JOBS, random.Random(seed), 0)
    calls0, usec0 = fcall_stats(store.client)
    sent = time.time()
    store.submit(jobs)
    calls1, usec1 = fcall_stats(store.client)
    return (usec1 - usec0) / max(1, calls1 - calls0), sent


def wake_everyone(store: Store) -> tuple[float, float]:
    """What a submission of more jobs than there are idle pilots does: publish on every wake shard of every
    queue (the load starts: every idle pilot matches at once). The server's microseconds in those PUBLISH,
    and when they were sent (time.time)."""
    before = store.client.info("commandstats").get("cmdstat_publish", {})
    pipe = store.client.pipeline(transaction=False)
    for channel in wake_channels(store, list(range(N_QUEUES))):
        pipe.publish(channel, LOAD_WAKE)
    sent = time.time()
    pipe.execute()
    after = store.client.info("commandstats").get("cmdstat_publish", {})
    return float(after.get("usec", 0)) - float(before.get("usec", 0)), sent


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def command_usec(client: redis.Redis) -> tuple[int, int, int]:
    """(FCALL calls, FCALL microseconds, microseconds of every command) so far: the server's own time in
    the commands it ran (INFO commandstats; a function's time includes the commands it runs), without its
    network reads and writes and its pub/sub deliveries; the bench's own INFO left out."""
    stats = client.info("commandstats")
    fcall = stats.get("cmdstat_fcall", {})
    spent = sum(int(v.get("usec", 0)) for k, v in stats.items() if k != "cmdstat_info")
    return int(fcall.get("calls", 0)), int(fcall.get("usec", 0)), spent


def counters(store: Store) -> tuple[int, int]:
    done = store.client.hget(store.keys.stats, "ended:done")
    return int(store.client.hget(store.keys.heads, MATCHED_COUNT) or 0), int(done or 0)  # type: ignore[arg-type]


@dataclass
class Row:
    """What one N measured."""

    pilots: int
    waiting: int
    idle_core: float  # server CPU seconds per second, all pilots idle
    idle_calls: float  # FCALLs per second while idle
    idle_usec: float  # microseconds per FCALL while idle
    rate: float  # jobs leased per second under load
    offered: float  # jobs per second the pilots would run if every match were answered at once
    p50: float
    p99: float
    load_core: float  # server CPU seconds per second under load
    client_core: float  # the busiest pilot process's CPU seconds per second in the load window
    server_bytes: float  # per pilot
    client_bytes: float  # per pilot
    fanout_p99: float  # seconds from the load's wake to its arrival on a pilot's socket (the kernel's stamp)
    read_p99: float  # seconds from the load's wake to its simulated pilot's reading it (behind its process's others)
    woken: int  # pilots the load's wake reached
    publish_usec: float  # the server's time in the load wake's PUBLISH calls (one per wake shard of every queue)
    small_woken: int  # pilots the small submission woke
    small_listening: int  # pilots of the small submission's queue (all idle then, listening)
    small_last: float  # seconds from the small submission to its wake's arrival on the last pilot it woke
    small_usec: float  # the server's time in that submission's FCALL, its wake included
    probe_p50: float  # the probe pilot's own match latency (its own process, PROBE_PERIOD apart)
    probe_p99: float
    probe_n: int
    load_fcalls: float  # FCALLs per second in the load window
    load_usec: float  # microseconds per FCALL in the load window
    cmd_core: float  # of one core: the server's time inside commands in the load window
    exchange_usec: float  # the server's time inside commands per pilot exchange in the load window
    procs: int  # processes the simulated pilots share
    payload: float  # seconds a leased job "runs"
    loadavg: float  # the machine's 1-minute load average at the end of the load window
    matched: int
    completed: int
    server_matched: int
    server_completed: int
    held: int
    errors: list[str]


def measure(url: str, store: Store, n: int, procs: int, seconds: float, payload_seconds: float, seed: int) -> Row:
    """Start ``n`` pilots in ``procs`` processes and run the idle window, then the load window."""
    client = store.client
    waiting = sum(int(client.zcard(store.keys.tq(f"{t:016x}"))) for t in range(N_TQS))
    mem0 = int(client.info("memory")["used_memory"])
    ctx = mp.get_context("fork")
    out: Any = ctx.Queue()
    inboxes = [ctx.Queue() for _ in range(procs)]
    names = [f"bench-{seed}-{i}" for i in range(n)]
    workers = [
        ctx.Process(target=worker_main, args=(url, names[k::procs], seed * 100 + k, payload_seconds, inboxes[k], out))
        for k in range(procs)
    ]
    inboxes.append(ctx.Queue())
    workers.append(ctx.Process(target=probe_main, args=(url, f"probe-{seed}", seed, inboxes[-1], out)))
    for w in workers:
        w.start()
    errors: list[str] = []
    client_bytes = 0
    for _ in workers:
        kind, value = out.get()
        if kind == "error":
            errors.append(value)
        else:
            client_bytes += value
    if errors:
        for w in workers:
            w.kill()
        raise SystemExit(f"{n} pilots: a pilot process failed to start its pilots: {errors[0]}")
    server_bytes = int(client.info("memory")["used_memory"]) - mem0
    # The idle window starts once every back-off has reached its cap (0.05 s doubling to 2 s: 3.15 s).
    warm = BACKOFF_MIN * (2**6)
    start = time.time()
    idle_from = start + warm
    small_at = idle_from + seconds + 0.5
    load_from = small_at + SMALL_SETTLE
    phases = Phases(
        small_at=small_at,
        load_from=load_from,
        window_from=load_from + SETTLE,
        load_until=load_from + SETTLE + seconds,
    )
    m0, d0 = counters(store)
    for inbox in inboxes:
        inbox.put(phases)
    time.sleep(max(0.0, idle_from - time.time()))
    cpu0, (calls0, usec0) = server_cpu(client), fcall_stats(client)
    time.sleep(max(0.0, idle_from + seconds - time.time()))
    cpu1, (calls1, usec1) = server_cpu(client), fcall_stats(client)
    time.sleep(max(0.0, phases.small_at - time.time()))
    submit_usec, small_sent = small_submission(store, seed)
    time.sleep(max(0.0, phases.load_from - time.time()))
    publish_usec, load_sent = wake_everyone(store)
    time.sleep(max(0.0, phases.window_from - time.time()))
    cpu2, (fc2, fu2, u2) = server_cpu(client), command_usec(client)
    time.sleep(max(0.0, phases.load_until - time.time()))
    cpu3, (fc3, fu3, u3) = server_cpu(client), command_usec(client)
    results = []
    for _ in workers:
        kind, value = out.get()
        (errors.append(value) if kind == "error" else results.append(value))
    for w in workers:
        w.join()
    m1, d1 = counters(store)
    latencies = [x for r in results for x in r["latencies"]]
    probe = [x for r in results for x in r.get("probe", [])]
    window_exchanges = sum(r["window_exchanges"] for r in results)
    # The workers count from the planned moments; the wakes were sent a little later (a loaded host)
    woken = [x - (load_sent - phases.load_from) for r in results for x in r["woken"]]
    read = [x - (load_sent - phases.load_from) for r in results for x in r["read"]]
    small = [x - (small_sent - phases.small_at) for r in results for x in r["small"]]
    listening = sum(r.get("in_small_queue", 0) for r in results)  # all idle then: nothing fits them
    calls = calls1 - calls0
    busiest = max((r["busy"] for r in results), default=0.0)
    return Row(
        n,
        waiting,
        (cpu1 - cpu0) / seconds,
        calls / seconds,
        (usec1 - usec0) / max(1, calls),
        sum(r["window_jobs"] for r in results) / seconds,
        sum(r["cores"] for r in results) / payload_seconds,
        percentile(latencies, 0.5),
        percentile(latencies, 0.99),
        (cpu3 - cpu2) / seconds,
        busiest,
        server_bytes / n,
        client_bytes / n,
        percentile(woken, 0.99),
        percentile(read, 0.99),
        len(woken),
        publish_usec,
        len(small),
        listening,
        max(small, default=float("nan")),
        submit_usec,
        percentile(probe, 0.5),
        percentile(probe, 0.99),
        len(probe),
        (fc3 - fc2) / seconds,
        (fu3 - fu2) / max(1, fc3 - fc2),
        (u3 - u2) / 1e6 / seconds,
        (u3 - u2) / window_exchanges if window_exchanges else float("nan"),
        procs,
        payload_seconds,
        os.getloadavg()[0],
        sum(r["matched"] for r in results),
        sum(r["completed"] for r in results),
        m1 - m0,
        d1 - d0,
        sum(r["held"] for r in results),
        errors,
    )


def verdict(ok: bool) -> str:
    return "ok" if ok else "MISS"


def report(rows: list[Row], jobs: int, seconds: float, payloads: str, procs: int, baseline: float) -> None:
    scaled = "" if jobs >= 1_000_000 else f" (scaled down from 10^6 by --jobs {jobs:,})"
    print(
        f"\nwaiting jobs at the start: {jobs:,}{scaled}; windows of {seconds:g} s; payloads of "
        f"{payloads} s (a row per number of pilots and payload); {procs} pilot processes; heartbeat "
        f"{HEARTBEAT:g} s, back-off "
        f"{BACKOFF_MIN:g}..{BACKOFF_MAX:g} s (the real pilot's defaults)"
    )
    print(
        f"{'pilots':>7} {'waiting':>9} | {'idle %core':>10} {'fcall/s':>8} {'us/call':>7} | {'match/s':>8} "
        f"{'p50 ms':>7} {'p99 ms':>7} {'probe p99':>9} {'load %core':>10} | {'srv B/pilot':>11} {'cli B/pilot':>11} | "
        f"{'wake p99 ms':>11} | {'matched':>8} {'completed':>9} {'srv matched':>11} {'srv done':>8}"
    )
    for r in rows:
        print(
            f"{r.pilots:>7,} {r.waiting:>9,} | {100 * r.idle_core:>10.2f} {r.idle_calls:>8,.0f} "
            f"{r.idle_usec:>7.1f} | {r.rate:>8,.0f} {1000 * r.p50:>7.2f} {1000 * r.p99:>7.2f} "
            f"{1000 * r.probe_p99:>9.2f} {100 * r.load_core:>10.1f} | {r.server_bytes:>11,.0f} "
            f"{r.client_bytes:>11,.0f} | "
            f"{1000 * r.fanout_p99:>11.1f} | {r.matched:>8,} {r.completed:>9,} {r.server_matched:>11,} "
            f"{r.server_completed:>8,}"
        )
    print(
        "\nthe load window, server side (INFO commandstats: time inside commands, a function's own commands "
        "included; %core = that time per second) and the probe (one more pilot in its own process, an exchange "
        f"every {1000 * PROBE_PERIOD:g} ms: what a real pilot, one process per node, sees)"
    )
    print(
        f"{'pilots':>7} {'pay s':>5} {'loadavg':>7} | {'fcall/s':>8} {'us/fcall':>8} {'cmd %core':>9} "
        f"{'cpu %core':>9} {'us/exch':>8} | "
        f"{'probe n':>7} {'p50 ms':>7} {'p99 ms':>7} | {'sim p99 ms':>10}"
    )
    for r in rows:
        print(
            f"{r.pilots:>7,} {r.payload:>5g} {r.loadavg:>7.2f} | {r.load_fcalls:>8,.0f} {r.load_usec:>8.1f} "
            f"{100 * r.cmd_core:>9.1f} "
            f"{100 * r.load_core:>9.1f} {r.exchange_usec:>8.1f} | {r.probe_n:>7,} {1000 * r.probe_p50:>7.2f} "
            f"{1000 * r.probe_p99:>7.2f} | {1000 * r.p99:>10.2f}"
        )
    print()
    for r in rows:
        for error in r.errors:
            print(f"{r.pilots:,} pilots: a pilot process failed: {error}")
        consistent = r.matched == r.completed == r.server_matched == r.server_completed and r.held == 0
        print(
            f"{r.pilots:,} pilots: counts {'consistent' if consistent else 'INCONSISTENT'} (leased "
            f"{r.matched:,}, completed {r.completed:,}, server matched {r.server_matched:,}, server done "
            f"{r.server_completed:,}, still held {r.held})"
        )
    for r in rows:
        idle_per_1000 = r.idle_core * 1000 / r.pilots
        line = (
            f"idle: {r.pilots:,} pilots cost the server {100 * r.idle_core:.2f}% of a core "
            f"({100 * idle_per_1000:.2f}% per 1,000; baseline without pilots {100 * baseline:.2f}%)"
        )
        if r.pilots < 1000:
            print(line + " (the target is judged at 1,000 pilots and more)")
            continue
        line += f", target < {100 * IDLE_TARGET:.0f}% per 1,000: {verdict(idle_per_1000 < IDLE_TARGET)}"
        if idle_per_1000 >= IDLE_TARGET:
            lua = r.idle_calls * r.idle_usec / 1e6
            line += (
                f"; bound: the heartbeat and back-off periods: {r.idle_calls / r.pilots:.2f} calls per pilot "
                f"per second (a match every {BACKOFF_MAX:g} s, the back-off's cap; a heartbeat every "
                f"{HEARTBEAT:g} s), of which the scripts took {100 * lua:.1f}% of a core and the server's "
                "network and dispatch the rest; a longer back-off cap (the wake channel makes it safe) "
                "would move it"
            )
        print(line)
    for r in rows:
        print(load_verdict(r))
    for r in rows:
        print(wake_verdict(r))


def wake_verdict(r: Row) -> str:
    """The wake lines of one row: the load's wake (every idle pilot) against its target, and the small
    submission's (as many idle pilots as jobs, issue 31)."""
    line = (
        f"wake: {r.pilots:,} pilots, the load's wake (PUBLISH on each of the {WAKE_SHARDS} wake shards of "
        f"{N_QUEUES} queues, {r.publish_usec:,.0f} us in the server) reached {r.woken:,} idle pilots, the last "
        f"(p99) on its socket {1000 * r.fanout_p99:.1f} ms after it was sent (the kernel's receive stamp; read by "
        "its simulated pilot after "
        f"{1000 * r.read_p99:.0f} ms, behind the others of its process), load average {r.loadavg:.2f}"
    )
    if r.pilots >= 5000:
        line += f", target < {1000 * WAKE_TARGET:.0f} ms: {verdict(r.fanout_p99 < WAKE_TARGET)}"
    return line + (
        f"\nwake: {r.pilots:,} pilots, a submission of {SMALL_JOBS} jobs for one queue woke {r.small_woken:,} of "
        f"the {r.small_listening:,} idle pilots listening there (every pilot was woken by any submission "
        f"before issue 31), the last after {1000 * r.small_last:.1f} ms; its submit call took "
        f"{r.small_usec:,.0f} us in the server"
    )


def load_verdict(r: Row) -> str:
    """The load line of one row: the target is judged on the probe (a real pilot runs one process per
    node), and what bounds the simulated pilots' p99 and the probe's is named from the measured shares."""
    line = (
        f"load: {r.pilots:,} pilots, payloads of {r.payload:g} s, {r.rate:,.0f} jobs leased/s of {r.offered:,.0f} "
        "asked, p99 match latency "
        f"{1000 * r.p99:.2f} ms (simulated pilots), {1000 * r.probe_p99:.2f} ms (probe), server "
        f"{100 * r.load_core:.0f}% of a core ({100 * r.cmd_core:.0f}% inside commands, {r.exchange_usec:.0f} us "
        f"per exchange), busiest pilot process {100 * r.client_core:.0f}%, load average {r.loadavg:.2f}"
    )
    if r.pilots < 5000:
        return line + " (the target is judged at 5,000 pilots and more)"
    ok = r.probe_p99 < LATENCY_TARGET
    line += f", target < {1000 * LATENCY_TARGET:.0f} ms for a real pilot (the probe): {verdict(ok)}"
    if ok and r.p99 >= LATENCY_TARGET:
        return line + (
            f"; the simulated pilots' p99 is bound by their own processes, not the server: "
            f"{r.pilots // max(1, r.procs):,} pilots share one Python thread (busiest process "
            f"{100 * r.client_core:.0f}% of a core on this 2-core machine) and read their replies in turn, "
            f"while a pilot alone in its process waits {1000 * r.probe_p99:.2f} ms at p99; more client "
            "processes (or machines) would move it, not a faster server"
        )
    if ok:
        return line
    bounds = []
    if r.rate < 0.8 * r.offered and max(r.cmd_core, r.load_core) > 0.8:
        bounds.append(
            f"the offered load: the pilots' cores ask for {r.offered:,.0f} jobs/s (cores / payload seconds), "
            f"the server leased {r.rate:,.0f}/s: exchanges queue on its one thread, and every pilot's, the "
            "probe's too, waits behind them; longer payloads (real ones last minutes), or more servers (a "
            "Cluster of communities) would move it"
        )
    if r.cmd_core > 1.2 * r.load_core:
        bounds.append(
            f"the machine: the server was inside commands {100 * r.cmd_core:.0f}% of the time but ran only "
            f"{100 * r.load_core:.0f}% of a core, so it waited for a CPU in the middle of its commands (load "
            f"average {r.loadavg:.2f} on 2 cores): a server of its own (or a quieter host) would move it"
        )
    elif r.cmd_core > 0.8:
        bounds.append(
            f"one Lua thread: the server is inside commands {100 * r.cmd_core:.0f}% of a core "
            f"({r.load_fcalls:,.0f} FCALL/s at {r.load_usec:.0f} us): an exchange waits behind the others in "
            "flight; cheaper scripts or more servers (a Cluster of communities) would move it"
        )
    elif r.load_core > 0.8:
        bounds.append(
            f"the server's network and dispatch: {100 * r.load_core:.0f}% of a core, of which only "
            f"{100 * r.cmd_core:.0f}% inside commands; fewer connections or I/O threads would move it"
        )
    else:
        bounds.append(
            f"the machine: the server used {100 * r.load_core:.0f}% of a core and the pilot processes the rest "
            "of this 2-core host, so the probe waits for a core as much as for the server"
        )
    if r.read_p99 > SETTLE:
        bounds.append(
            f"the simulated pilots' processes: their last pilots read the load's wake {r.read_p99:.1f} s after it "
            f"was sent, past the window's start ({SETTLE:g} s), as {r.pilots // max(1, r.procs):,} pilots per "
            "process read their subscriptions and send their exchanges in turn: the herd of exchanges it sets "
            "off arrives in bursts the probe waits behind"
        )
    elif r.fanout_p99 > LATENCY_TARGET:
        bounds.append(
            f"pub/sub fan-out: one wake reached the last pilots after {1000 * r.fanout_p99:.0f} ms "
            f"(then all {r.pilots:,} match at once; the window starts {SETTLE:g} s later)"
        )
    return line + "; bound: " + "; ".join(bounds)


def connections_line(server: RedisServer, client: redis.Redis, maxclients: int) -> str:
    """What could have closed a pilot's connection (a pilot process that died of "connection closed by server"
    says which): clients refused at ``maxclients``, pub/sub clients dropped at their output buffer limit, and
    whether the server answering is still the one this script started (a port taken between ``free_port``
    and the bind made another private server ours until its owner stopped it: RedisServer.start checks it)."""
    try:
        stats = client.info("stats")
        clients = client.info("clients")
    except redis.RedisError as exc:
        return f"server: unreachable after the run ({exc}); pid {server.pid()} started, log {server.directory}"
    answering = server.answering_pid()
    return (
        f"server: connections received {stats.get('total_connections_received', 0):,}, connected now "
        f"{clients.get('connected_clients', 0):,} of maxclients {maxclients:,}, refused at maxclients "
        f"{stats.get('rejected_connections', 0):,}, dropped at their output buffer limit "
        f"{stats.get('client_output_buffer_limit_disconnections', 'n/a')}, largest output buffer "
        f"{clients.get('client_recent_max_output_buffer', 0):,} B; answered by "
        f"{'this run' if answering == server.pid() else f'pid {answering}, not this run'}'s server"
    )


def log_tail(server: RedisServer, lines: int = 30) -> str:
    try:
        return "\n".join((server.directory / "redis.log").read_text(errors="replace").splitlines()[-lines:])
    except OSError as exc:
        return f"(unreadable: {exc})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pilots", default="100,1000,5000", help="numbers of pilots, comma-separated")
    parser.add_argument("--jobs", type=int, default=1_000_000, help="waiting jobs filled at the start")
    parser.add_argument("--seconds", type=float, default=20.0, help="length of each measuring window")
    parser.add_argument(
        "--payload-seconds", default="1", help="how long a leased job 'runs' (comma-separated: a row for each)"
    )
    parser.add_argument("--procs", type=int, default=2, help="processes the pilots are spread over")
    args = parser.parse_args(argv)
    counts = [int(s) for s in args.pilots.split(",")]
    with tempfile.TemporaryDirectory(prefix="bench-pilots-") as tmp:
        clients = 2 * max(counts) + 200  # two connections per pilot
        server = RedisServer(Path(tmp) / "redis", options=("--maxclients", str(clients))).start()
        try:
            client = redis.Redis.from_url(server.url, socket_timeout=600)
            store = Store(client, lease_seconds=LEASE)
            version = server_version(client.info("server"))
            began = time.perf_counter()
            rate = fill(store, [i % N_TQS for i in range(args.jobs)], 0, batch=5000)
            print(
                f"{version}: filled {args.jobs:,} waiting jobs in {time.perf_counter() - began:.1f} s "
                f"({rate:,.0f}/s); Redis uses {client.info('memory')['used_memory_human']}",
                flush=True,
            )
            cpu0 = server_cpu(client)
            time.sleep(min(args.seconds, 5.0))
            baseline = (server_cpu(client) - cpu0) / min(args.seconds, 5.0)
            rows = []
            payloads = [float(x) for x in args.payload_seconds.split(",")]
            for n in counts:
                for payload in payloads:
                    seed = len(rows) + 1
                    rows.append(measure(server.url, store, n, min(args.procs, n), args.seconds, payload, seed))
                    print(f"  {n:,} pilots, payloads of {payload:g} s measured", flush=True)
            report(rows, args.jobs, args.seconds, args.payload_seconds, args.procs, baseline)
            print(connections_line(server, client, clients))
            if any(r.errors for r in rows):
                print(f"the server's log, last lines ({server.directory / 'redis.log'}):\n{log_tail(server)}")
            bad = any(
                r.errors or not (r.matched == r.completed == r.server_matched == r.server_completed) or r.held
                for r in rows
            )
        finally:
            server.stop()
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
