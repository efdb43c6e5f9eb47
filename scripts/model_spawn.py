"""A model of the pilot's loop: can a spawn off the loop's thread fill the cores one serial loop leaves idle?

One thread does ``--work`` ms of busy work a job (the agent's own CPU) and keeps ``--slots`` payloads of
``/usr/bin/true`` running, starting the next one as one ends, three ways:

* ``sync``: ``os.posix_spawn`` on the loop's thread (it holds the GIL through the vfork wait);
* ``here``: the same, the payload started on the loop's own CPU (``pilot.agent.placement.spawn_here``);
* ``placed``: the same, here or where the kernel places it, as the spawns' waits say (``Placement``, what the
  pilot does for a one-core payload);
* ``thread``: each spawn handed to a thread that calls glibc's ``posix_spawn`` through ``ctypes`` (which
  releases the GIL for the call), the loop going on meanwhile;
* ``process``: a spawner process of its own spawns the payloads (its children) and sends their ends back on
  a socket.

It prints jobs/s and CPU a job (the loop's process, its children, and the spawner's) for each, alternating.
Usage: ``python3 scripts/model_spawn.py [-n 3000] [--rounds 3] [--work 0.25] [--slots 2]``.
Figures and what they mean: docs/performance.md, "The last runs: one pilot and two" and "Where a payload
starts".
"""

from __future__ import annotations

import argparse
import ctypes
import os
import queue
import selectors
import socket
import struct
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from pilot.agent.placement import Placement, spawn_here  # noqa: E402

PAYLOAD = "/usr/bin/true"
_LIBC = ctypes.CDLL(None, use_errno=True)
_LIBC.posix_spawn.argtypes = [
    ctypes.POINTER(ctypes.c_int),
    ctypes.c_char_p,
    ctypes.c_void_p,
    ctypes.c_void_p,
    ctypes.POINTER(ctypes.c_char_p),
    ctypes.POINTER(ctypes.c_char_p),
]


def busy(ms: float) -> None:
    """The agent's own work for one job."""
    end = time.perf_counter() + ms / 1000
    while time.perf_counter() < end:
        pass


def spawn_released(env: dict[str, str]) -> int:
    """glibc's posix_spawn of the payload through ctypes: the GIL is released for the call."""
    argv = (ctypes.c_char_p * 2)(PAYLOAD.encode(), None)
    envp = (ctypes.c_char_p * (len(env) + 1))(*[f"{k}={v}".encode() for k, v in env.items()], None)
    pid = ctypes.c_int()
    err = _LIBC.posix_spawn(ctypes.byref(pid), PAYLOAD.encode(), None, None, argv, envp)
    if err:
        raise OSError(err, os.strerror(err))
    return pid.value


def loop(n: int, slots: int, work: float, start: Callable[[int], None], wait: Callable[[], None]) -> None:
    """Keep ``slots`` payloads running until ``n`` have ended, ``work`` ms before each start."""
    started = 0
    for _ in range(slots):
        busy(work)
        start(started)
        started += 1
    for _ in range(n):
        wait()
        if started < n:
            busy(work)
            start(started)
            started += 1


def reap_any() -> None:
    """Wait for any child to end (a handed-over spawn may not have happened yet)."""
    while True:
        try:
            os.waitpid(-1, 0)
            return
        except ChildProcessError:
            time.sleep(0.00005)


def run_on_loop(place: Callable[[Callable[[], int]], int]) -> Callable[[int, int, float], None]:
    """``os.posix_spawn`` on the loop's thread, through ``place`` (where the child starts)."""

    def run(n: int, slots: int, work: float) -> None:
        base = dict(os.environ)

        def start(i: int) -> None:
            place(lambda: os.posix_spawn(PAYLOAD, ["true"], {**base, "JOB": str(i)}))

        loop(n, slots, work, start, reap_any)

    return run


def run_thread(n: int, slots: int, work: float) -> None:
    base = dict(os.environ)
    requests: queue.SimpleQueue[dict[str, str] | None] = queue.SimpleQueue()

    def spawner() -> None:
        while (env := requests.get()) is not None:
            spawn_released(env)

    thread = threading.Thread(target=spawner, daemon=True)
    thread.start()
    try:
        loop(n, slots, work, lambda i: requests.put({**base, "JOB": str(i)}), reap_any)
    finally:
        requests.put(None)
        thread.join()


def _spawner_process(sock: socket.socket) -> None:
    """Spawn a payload for each request byte; send each payload's pid and wait status when it ends."""
    env = dict(os.environ)
    with selectors.DefaultSelector() as selector:
        selector.register(sock, selectors.EVENT_READ, None)
        while True:
            for key, _ in selector.select():
                if key.data is None:
                    data = sock.recv(65536)
                    if not data:
                        return
                    for _ in range(len(data)):
                        pid = os.posix_spawn(PAYLOAD, ["true"], env)
                        selector.register(os.pidfd_open(pid), selectors.EVENT_READ, pid)
                else:
                    selector.unregister(key.fd)
                    os.close(key.fd)
                    _, status = os.waitpid(key.data, 0)
                    sock.send(struct.pack("=ii", key.data, status))


def run_process(n: int, slots: int, work: float) -> None:
    mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    child = os.fork()
    if child == 0:  # the spawner: no thread was started in this process, so forking it is safe
        mine.close()
        try:
            _spawner_process(theirs)
        finally:
            os._exit(0)
    theirs.close()

    def start(i: int) -> None:
        mine.send(b"S")

    def ended() -> None:
        mine.recv(64)

    try:
        loop(n, slots, work, start, ended)
    finally:
        mine.close()
        os.waitpid(child, 0)


WAYS: dict[str, Callable[[int, int, float], None]] = {
    "sync": run_on_loop(lambda spawn: spawn()),
    "here": run_on_loop(spawn_here),
    "placed": lambda n, slots, work: run_on_loop(Placement().spawn)(n, slots, work),  # a fresh choice each time
    "thread": run_thread,
    "process": run_process,
}


def measure(way: str, n: int, slots: int, work: float) -> tuple[float, float]:
    """Jobs/s and CPU ms a job (this process, its reaped children: the payloads and the spawner)."""
    t0, c0 = time.perf_counter(), os.times()
    WAYS[way](n, slots, work)
    elapsed, c1 = time.perf_counter() - t0, os.times()
    return n / elapsed, (sum(c1[:4]) - sum(c0[:4])) / n * 1000


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=3000, help="payloads per measurement")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--work", type=float, default=0.25, help="ms of the loop's own work a job")
    parser.add_argument("--slots", type=int, default=2)
    args = parser.parse_args(argv)
    print(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"{args.slots} slots of {PAYLOAD}, {args.work:g} ms of work a job, {args.n} jobs a measurement")
    print(f"{'way':>8} {'jobs/s':>8} {'CPU ms/job':>10}")
    for _ in range(args.rounds):
        for way in WAYS:
            rate, cpu = measure(way, args.n, args.slots, args.work)
            print(f"{way:>8} {rate:>8.0f} {cpu:>10.3f}", flush=True)
    print(f"load average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
