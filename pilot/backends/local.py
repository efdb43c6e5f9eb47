"""The local backend: pilots as processes on this host, never holding more than the host has.

Capacity is ``cpu`` (cores in ``os.sched_getaffinity(0)``), ``mem`` (physical memory, MB) and any
user-defined resource from the settings; ``tmp`` is managed only when configured, as in open-lmake. The
sum of what running pilots hold never exceeds it: a pilot that does not fit stays QUEUED inside the
backend and starts when capacity frees.

Scheduling (done by :meth:`LocalBackend.tick`, which a daemon thread calls every ``tick_interval`` and
every public method calls too): waiting pilots are taken most urgent first (``start_by``, then submission
order); each that fits starts, so smaller pilots may pass a big one that does not fit yet. An *exclusive*
pilot (one whose resources cannot be mapped here: see :mod:`pilot.backends.factory`) starts only on an
empty host, and while one waits nothing less urgent starts, so the host drains for it.

Each pilot runs in its own session (process group) with stdout/stderr in ``<log_dir>/<name>-<id>.out/.err``.
Cancel sends SIGTERM to the group, then SIGKILL after ``grace`` seconds. A pilot past its ``wall`` is
killed the same way and reported LOST ("wall time exceeded"). When the pilot's main process ends, what is
left of its group is killed, as a batch system would.

States live in this process, but pilots outlive it (each in its own session): :meth:`LocalBackend.identify`
gives what the director records (host, pid and process start time of the pilot; those of the director
process that holds it while it is queued), and a later director's backend :meth:`LocalBackend.adopt` takes a
pilot over from that: it watches the process while it lives (its resources count against the capacity,
its wall is enforced, it can be cancelled) and answers DONE when it has gone; a pilot that was still queued in a
director process that is gone never started: CANCELLED.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import logging
import math
import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import psutil

from taskqueues.backend_options import parse_options
from taskqueues.errors import BackendError
from taskqueues.shapes import Shape
from taskqueues.store import scrubbed

from .base import PilotRequest, PilotState, PilotStatus

log = logging.getLogger(__name__)


def host_capacity() -> dict[str, int]:
    """Cores this process may run on and physical memory in MB (1 MB = 10**6 bytes, as the catalog and MJF count)."""
    cpu = len(os.sched_getaffinity(0))
    mem = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // 10**6
    return {"cpu": cpu, "mem": int(mem)}


@dataclass(frozen=True)
class LocalSettings:
    """Settings of the local backend.

    ``capacity`` adds or overrides resources (``{"gpu": 1, "tmp": 10000}``); ``grace`` is the time between
    SIGTERM and SIGKILL; ``background`` runs :meth:`LocalBackend.tick` in a daemon thread.
    """

    capacity: Mapping[str, int] = field(default_factory=dict)
    repo_key: str = ""
    log_dir: str | None = None
    grace: float = 5.0
    tick_interval: float = 0.1
    background: bool = True

    @classmethod
    def from_options(cls, options: Mapping[str, object]) -> LocalSettings:
        known = {"capacity", "repo_key", "log_dir", "grace", "tick_interval", "background"}
        unknown = sorted(set(options) - known)
        if unknown:
            raise BackendError(
                f"local backend: unknown setting(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}"
            )
        capacity = options.get("capacity", {})
        if not isinstance(capacity, Mapping):
            raise BackendError(f"local backend: capacity must be a mapping of resource → int, got {capacity!r}")
        parsed: dict[str, int] = {}
        for key, value in capacity.items():
            try:
                parsed[str(key)] = int(value)
            except (TypeError, ValueError):
                raise BackendError(f"local backend: capacity {key!r} must be an integer, got {value!r}") from None
        return cls(
            capacity=parsed,
            repo_key=str(options.get("repo_key", "")),
            log_dir=str(options["log_dir"]) if options.get("log_dir") else None,
            grace=float(options.get("grace", 5.0)),  # type: ignore[arg-type]
            tick_interval=float(options.get("tick_interval", 0.1)),  # type: ignore[arg-type]
            background=bool(options.get("background", True)),
        )


# Keys that only mean something to a batch system: a converted backend cannot honour them here.
_BATCH_ONLY = frozenset(
    {
        "partition",
        "qos",
        "gres",
        "features",
        "licenses",
        "licence",
        "reservation",
        "reserv",
        "nodes",
        "excludes",
        "hard",
        "soft",
    }
)


def unmappable(resources: Mapping[str, str], capacity: Mapping[str, int]) -> list[str]:
    """The ``key=value`` of ``resources`` a converted local backend cannot honour (its pilots run alone)."""
    out = []
    for key, text in resources.items():
        if key == "priority" or (key == "tmp" and "tmp" not in capacity):
            continue
        if key in _BATCH_ONLY or key not in capacity or not text.isdigit() or int(text) > capacity[key]:
            out.append(f"{key}={text}")
    return out


#: Batch ids are numbered per process, not per backend: a director holds several local backends (one per
#: converted batch system), and a pilot's name, which its leases carry, comes from its batch id.
_SEQUENCE = itertools.count(1)


@dataclass
class _Pilot:
    batch_id: str
    seq: int
    request: PilotRequest
    needs: dict[str, int]
    exclusive: bool
    why_exclusive: str
    process: subprocess.Popen[bytes] | None = None
    adopted: psutil.Process | None = None  # a pilot an earlier director process started
    started: float | None = None
    term_sent: float | None = None
    cancelled: bool = False
    wall_exceeded: bool = False
    status: PilotStatus = field(default_factory=lambda: PilotStatus(PilotState.QUEUED, "waiting for capacity"))
    files: list[IO[bytes]] = field(default_factory=list)

    @property
    def priority(self) -> tuple[float, int]:
        return (self.request.start_by if self.request.start_by is not None else math.inf, self.seq)

    @property
    def pid(self) -> int | None:
        if self.process is not None:
            return self.process.pid
        return self.adopted.pid if self.adopted is not None else None

    @property
    def live(self) -> bool:
        """Started (here or by an earlier director) and not ended yet."""
        return self.pid is not None and not self.status.state.final


def _create_time(pid: int) -> float | None:
    try:
        return float(psutil.Process(pid).create_time())
    except psutil.Error:
        return None


def _same_process(pid: object, ctime: object) -> psutil.Process | None:
    """The live process ``pid`` if it is the one that started at ``ctime`` (pids are reused)."""
    try:
        process = psutil.Process(int(str(pid)))
        if abs(process.create_time() - float(str(ctime))) > 1.0 or process.status() == psutil.STATUS_ZOMBIE:
            return None
        return process
    except (psutil.Error, ValueError):
        return None


class LocalBackend:
    """Pilots as local processes within a fixed capacity. Thread-safe."""

    kind = "local"

    def __init__(
        self,
        settings: LocalSettings | None = None,
        *,
        converted_from: str | None = None,
        carried: Mapping[str, str] | None = None,
    ) -> None:
        """``converted_from``: the batch system this backend stands in for; ``carried``: what that batch
        system's settings ask of every pilot (mapped like the pilot's own resources, before them)."""
        self.settings = settings or LocalSettings()
        self.converted_from = converted_from
        self.carried = dict(carried or {})
        self._capacity = {**host_capacity(), **self.settings.capacity}
        self._lock = threading.RLock()
        self._pilots: dict[str, _Pilot] = {}
        self._waiting: list[tuple[tuple[float, int], str]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # --- the Backend interface ---------------------------------------------------------------------------

    def capacity(self) -> dict[str, int]:
        return dict(self._capacity)

    def pid(self, batch_id: str) -> int | None:
        """The process id of a running pilot (also its process-group id), or None."""
        with self._lock:
            pilot = self._pilots.get(batch_id)
            return pilot.pid if pilot is not None and pilot.live else None

    def in_use(self) -> dict[str, int]:
        """What running pilots hold now, per resource."""
        with self._lock:
            return self._used()

    def submit(self, request: PilotRequest) -> str:
        needs, exclusive, why = self._needs(request)
        with self._lock:
            seq = next(_SEQUENCE)
            batch_id = f"local-{os.getpid()}-{seq}"
            pilot = _Pilot(batch_id, seq, request, needs, exclusive, why)
            self._pilots[batch_id] = pilot
            heapq.heappush(self._waiting, (pilot.priority, batch_id))
            self._tick()
        self._ensure_thread()
        return batch_id

    def states(self, ids: Sequence[str]) -> dict[str, PilotStatus]:
        with self._lock:
            self._tick()
            return {
                i: self._pilots[i].status
                if i in self._pilots
                else PilotStatus(PilotState.UNKNOWN, "not submitted here")
                for i in ids
            }

    def cancel(self, ids: Sequence[str]) -> None:
        with self._lock:
            for batch_id in ids:
                pilot = self._pilots.get(batch_id)
                if pilot is None or pilot.status.state.final or pilot.cancelled:
                    continue
                pilot.cancelled = True
                if pilot.pid is None:
                    pilot.status = PilotStatus(PilotState.CANCELLED, "cancelled while queued")
                else:
                    self._terminate(pilot)
            self._tick()

    def close(self) -> None:
        """Stop the scheduling thread. Running pilots keep running; queued ones will not start."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)
        self._thread = None

    def shutdown(self, wait: float = 10.0) -> list[str]:
        """Cancel every pilot and wait up to ``wait`` seconds for them to end (SIGKILL after the grace); then
        :meth:`close`. Returns the ids of the pilots that were still queued or running."""
        with self._lock:
            ids = [i for i, p in self._pilots.items() if not p.status.state.final and not p.cancelled]
        self.cancel(ids)
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            with self._lock:
                self._tick()
                if all(p.status.state.final for p in self._pilots.values()):
                    break
            time.sleep(0.05)
        self.close()
        return ids

    def tick(self) -> None:
        """Reap ended pilots, enforce grace and wall limits, start waiting pilots that fit."""
        with self._lock:
            self._tick()

    def identify(self, batch_id: str) -> dict[str, Any]:
        """Host, this process (which holds the pilot while it is queued) and, once started, the pilot's pid
        and start time; with what it holds and its wall, so a later director can count and limit it."""
        me = os.getpid()
        facts: dict[str, Any] = {"host": socket.gethostname(), "owner": me, "owner_ctime": _create_time(me)}
        with self._lock:
            pilot = self._pilots.get(batch_id)
            if pilot is None:
                return facts
            facts.update(needs=dict(pilot.needs), wall=pilot.request.wall)
            pid = pilot.pid
            if pid is not None:
                facts.update(pid=pid, ctime=_create_time(pid))
        return facts

    def adopt(self, batch_id: str, facts: Mapping[str, Any]) -> PilotStatus:
        """Watch a pilot that an earlier director process started on this host (see the module doc)."""
        if facts.get("host") != socket.gethostname():
            return PilotStatus(PilotState.UNKNOWN, f"started on host {facts.get('host')!r}, not visible from here")
        with self._lock:
            if batch_id in self._pilots:
                return self._pilots[batch_id].status
            if "pid" not in facts:
                if facts.get("owner") and _same_process(facts.get("owner"), facts.get("owner_ctime")):
                    return PilotStatus(PilotState.UNKNOWN, f"queued in director process {facts['owner']}")
                return PilotStatus(PilotState.CANCELLED, "was queued in a director process that is gone: never started")
            process = _same_process(facts.get("pid"), facts.get("ctime"))
            if process is None:
                return PilotStatus(PilotState.DONE, "ended while no director watched it")
            needs = {str(k): int(v) for k, v in dict(facts.get("needs") or {}).items()}
            wall = int(facts.get("wall") or 1)
            request = PilotRequest(
                name=f"adopted-{batch_id}",
                command=["(adopted)"],
                wall=max(1, wall),
                shape=Shape("adopted", cpu=max(1, needs.get("cpu", 1)), mem=needs.get("mem", 0)),
            )
            pilot = _Pilot(batch_id, next(_SEQUENCE), request, needs, False, "", adopted=process)
            pilot.started = time.monotonic() - max(0.0, time.time() - process.create_time())
            pilot.status = PilotStatus(PilotState.RUNNING, f"pid {process.pid} (adopted)", None, "localhost")
            self._pilots[batch_id] = pilot
        self._ensure_thread()
        return pilot.status

    # --- internals ---------------------------------------------------------------------------------------

    def _needs(self, request: PilotRequest) -> tuple[dict[str, int], bool, str]:
        """What the pilot holds while it runs, and whether it must run alone (with the reason)."""
        where = f"pilot {request.name!r}"
        converted = self.converted_from is not None
        wanted: dict[str, str] = {**self.carried, "cpu": str(request.shape.cpu), "mem": str(request.shape.mem)}
        if request.shape.tmp:
            wanted["tmp"] = str(request.shape.tmp)
        wanted.update(request.resources)
        if request.options:
            wanted.update(parse_options(self.converted_from or "local", request.options, where=f"{where} options"))
        needs: dict[str, int] = {}
        unmapped: list[str] = []
        for key, text in wanted.items():
            if key == "tmp" and "tmp" not in self._capacity:
                continue  # tmp is not managed unless configured (open-lmake's default)
            if key == "priority":
                continue  # Grid Engine's -p: here the queue order comes from start_by
            if key in _BATCH_ONLY or key not in self._capacity:
                if not converted:
                    raise BackendError(
                        f"{where}: resource {key!r} is not in the local capacity ({', '.join(sorted(self._capacity))})"
                    )
                unmapped.append(f"{key}={text}")
                continue
            try:
                amount = int(text)
            except ValueError:
                if not converted:
                    raise BackendError(f"{where}: resource {key!r} needs an integer, got {text!r}") from None
                unmapped.append(f"{key}={text}")
                continue
            if amount > self._capacity[key]:
                if not converted:
                    raise BackendError(f"{where}: needs {key}={amount} but this host has {self._capacity[key]}")
                unmapped.append(f"{key}={amount} > {self._capacity[key]}")
                amount = self._capacity[key]
            needs[key] = max(amount, 0)
        why = ("cannot map " + ", ".join(unmapped) + f" from {self.converted_from}; runs alone") if unmapped else ""
        return needs, bool(unmapped), why

    def _used(self) -> dict[str, int]:
        used = dict.fromkeys(self._capacity, 0)
        for pilot in self._pilots.values():
            if pilot.live:
                for key, amount in pilot.needs.items():
                    used[key] = used.get(key, 0) + amount
        return used

    def _running(self) -> list[_Pilot]:
        return [p for p in self._pilots.values() if p.live]

    def _tick(self) -> None:
        now = time.monotonic()
        for pilot in self._running():
            self._check(pilot, now)
        self._schedule()

    def _check(self, pilot: _Pilot, now: float) -> None:
        assert pilot.started is not None
        if pilot.adopted is not None:
            self._check_adopted(pilot, now)
            return
        assert pilot.process is not None
        code = pilot.process.poll()
        if code is None:
            if pilot.term_sent is not None and now - pilot.term_sent >= self.settings.grace:
                self._signal(pilot, signal.SIGKILL)
            elif pilot.term_sent is None and now - pilot.started > pilot.request.wall:
                pilot.wall_exceeded = True
                self._terminate(pilot)
            return
        self._signal(pilot, signal.SIGKILL)  # what is left of the group: the batch-system rule
        for handle in pilot.files:
            handle.close()
        pilot.files.clear()
        if pilot.cancelled:
            pilot.status = PilotStatus(PilotState.CANCELLED, "cancelled", code if code >= 0 else None, "localhost")
        elif pilot.wall_exceeded:
            pilot.status = PilotStatus(
                PilotState.LOST, f"wall time exceeded ({pilot.request.wall} s)", None, "localhost"
            )
        elif code < 0:
            name = signal.Signals(-code).name if -code in signal.valid_signals() else str(-code)
            pilot.status = PilotStatus(PilotState.LOST, f"killed by signal {name}", None, "localhost")
        elif code == 0:
            pilot.status = PilotStatus(PilotState.DONE, "exit 0", 0, "localhost")
        else:
            pilot.status = PilotStatus(PilotState.FAILED, f"exit {code}", code, "localhost")

    def _check_adopted(self, pilot: _Pilot, now: float) -> None:
        """An adopted pilot is not our child: no exit status, only whether its process still lives."""
        assert pilot.adopted is not None and pilot.started is not None
        try:
            alive = pilot.adopted.is_running() and pilot.adopted.status() != psutil.STATUS_ZOMBIE
        except psutil.Error:
            alive = False
        if alive:
            if pilot.term_sent is not None and now - pilot.term_sent >= self.settings.grace:
                self._signal(pilot, signal.SIGKILL)
            elif pilot.term_sent is None and now - pilot.started > pilot.request.wall:
                pilot.wall_exceeded = True
                self._terminate(pilot)
            return
        self._signal(pilot, signal.SIGKILL)  # what is left of its group
        if pilot.cancelled:
            pilot.status = PilotStatus(PilotState.CANCELLED, "cancelled (adopted)", None, "localhost")
        elif pilot.wall_exceeded:
            pilot.status = PilotStatus(
                PilotState.LOST, f"wall time exceeded ({pilot.request.wall} s)", None, "localhost"
            )
        else:
            pilot.status = PilotStatus(
                PilotState.DONE,
                "ended (adopted from an earlier director: exit status not known here)",
                None,
                "localhost",
            )

    def _fits(self, pilot: _Pilot, used: Mapping[str, int]) -> bool:
        return all(used[key] + amount <= self._capacity[key] for key, amount in pilot.needs.items())

    def _schedule(self) -> None:
        if self._stop.is_set():
            return
        running = self._running()
        used = self._used()
        alone = any(p.exclusive for p in running)
        kept: list[tuple[tuple[float, int], str]] = []
        while self._waiting:
            entry = heapq.heappop(self._waiting)
            pilot = self._pilots[entry[1]]
            if pilot.cancelled or pilot.pid is not None:
                continue
            if alone:
                kept.append(entry)
                continue
            if pilot.exclusive:
                if not running:
                    self._start(pilot)
                    running.append(pilot)
                else:
                    kept.append(entry)
                alone = True  # nothing less urgent passes an exclusive pilot
                continue
            if self._fits(pilot, used):
                self._start(pilot)
                running.append(pilot)
                for key, amount in pilot.needs.items():
                    used[key] += amount
            else:
                kept.append(entry)
        for entry in kept:
            heapq.heappush(self._waiting, entry)

    def _start(self, pilot: _Pilot) -> None:
        request = pilot.request
        # The director's own credentials stay here: a pilot gets the ones its request carries.
        env = {**scrubbed(os.environ), **request.env, "PILOTFISH_BATCH_ID": pilot.batch_id}
        for key, amount in pilot.needs.items():
            env[f"PILOTFISH_RES_{key.upper()}"] = str(amount)
        log_dir = request.log_dir or self.settings.log_dir
        try:
            if log_dir:
                Path(log_dir).mkdir(parents=True, exist_ok=True)
                stem = Path(log_dir) / f"{self.settings.repo_key}{request.name}-{pilot.batch_id}"
                pilot.files = [open(f"{stem}.out", "wb"), open(f"{stem}.err", "wb")]  # noqa: SIM115
                out, err = pilot.files
                pilot.process = subprocess.Popen(
                    list(request.command),
                    cwd=request.workdir,
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=err,
                    start_new_session=True,
                )
            else:
                pilot.process = subprocess.Popen(
                    list(request.command),
                    cwd=request.workdir,
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    start_new_session=True,
                )
        except OSError as exc:
            for handle in pilot.files:
                handle.close()
            pilot.files.clear()
            pilot.status = PilotStatus(PilotState.FAILED, f"cannot start {request.command[0]!r}: {exc}")
            log.warning("local backend: pilot %s (%s) did not start: %s", pilot.batch_id, request.name, exc)
            return
        pilot.started = time.monotonic()
        detail = f"pid {pilot.process.pid}" + (f"; {pilot.why_exclusive}" if pilot.exclusive else "")
        pilot.status = PilotStatus(PilotState.RUNNING, detail, None, "localhost")

    def _terminate(self, pilot: _Pilot) -> None:
        pilot.term_sent = time.monotonic()
        self._signal(pilot, signal.SIGTERM)

    @staticmethod
    def _signal(pilot: _Pilot, sig: signal.Signals) -> None:
        pid = pilot.pid
        if pid is None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, sig)

    def _ensure_thread(self) -> None:
        if not self.settings.background or self._thread is not None or self._stop.is_set():
            return
        self._thread = threading.Thread(target=self._loop, name="pilotfish-local-backend", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(self.settings.tick_interval):
            try:
                self.tick()
            except Exception:  # the thread must outlive one bad tick; the error is logged, not lost
                log.exception("local backend: scheduling tick failed")
