"""``pilotfish up`` / ``down``: a persistent deployment on this machine, safe to restart piecemeal.

``up`` is what a supervisor runs, as often as it likes: it starts each part that is not running — the
embedded Redis (unless ``redis_url`` is set; its append-only file keeps the data), the Celery worker
(``pilotfish matcher --no-beat``), Celery beat in a process of its own (``--beat-only``: killed alone, it is
started again alone), the site director, Flower and the HTTP API (``pilotfish serve`` on loopback, port
``api_port``) — and leaves the live ones alone. A part is reported
``started`` only once it is seen alive after its start (Flower: once its port answers); one that exited at
once fails ``up`` with its log's name.

No part carries a password in its environment or command line: the embedded server's passwords are read
from the state directory, configured URL settings from ``<state_dir>/run/secrets.json`` (0600, named by
``PILOTFISH_SECRETS_FILE``; :mod:`taskqueues.credentials`). Flower runs behind a login (``pilotfish flower``).

Every process of the deployment carries ``PILOTFISH_DEPLOYMENT=<state directory>`` in its environment, and
so do the pilots and guardians they start (payloads do not: their environment holds no deployment path; a
payload dies with its pilot). ``down`` stops the director first (it cancels its
pilots, which give their jobs back), then the other parts at once, printing each as it stops, then every
process still carrying the marker (or listed in ``<state_dir>/run/sealed`` by a non-dumpable one, whose
environment the operator may not read) — orphans of earlier kills (a pilot whose director was killed, beat's
child of a killed worker) — and at last the embedded Redis. Pid files hold the process start time too,
so a reused pid is never taken for a part.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil

from taskqueues import credentials, embedded
from taskqueues.context import Context
from taskqueues.credentials import DEPLOYMENT_VARIABLE, SECRET_SETTINGS, SECRETS_VARIABLE, sealed, write_secrets
from taskqueues.errors import PilotfishError
from taskqueues.store import SENTINEL_MASTER_VARIABLE, scrubbed

MARKER = DEPLOYMENT_VARIABLE
#: Seconds a part without a port must live after its start to count as started.
ALIVE_AFTER = 0.5


@dataclass(frozen=True)
class Component:
    name: str
    argv: list[str]
    port: int | None = None  # up waits until it answers there


def components(ctx: Context) -> list[Component]:
    py = sys.executable
    s = ctx.settings
    logs = Path(s.state_dir) / "logs"
    cli = [py, "-m", "matcher.cli"]
    return [
        Component("worker", [*cli, "matcher", "--no-beat", "--loglevel", "WARNING"]),
        Component("beat", [*cli, "matcher", "--beat-only", "--loglevel", "WARNING"]),
        Component("director", [*cli, "director", "--log-dir", str(logs / "pilots"), "--stop-pilots-on-exit"]),
        # Behind a login (matcher.cli.flower); the broker's URL is read from the settings, never argv or env.
        Component("flower", [*cli, "flower", f"--port={s.flower_port}", "--address=127.0.0.1"], port=s.flower_port),
        # The HTTP API on loopback (tokens: pilotfish token create); a reverse proxy or the chart's Ingress exposes it.
        Component("api", [*cli, "serve", "--host=127.0.0.1", f"--port={s.api_port}"], port=s.api_port),
    ]


def marker(ctx: Context) -> str:
    return str(Path(ctx.settings.state_dir).resolve())


def _pidfile(ctx: Context, name: str) -> Path:
    return Path(ctx.settings.state_dir) / "run" / f"{name}.pid"


def running_pid(ctx: Context, name: str) -> int | None:
    """The live process of component ``name``: its pid file's pid, if that process started when it says."""
    try:
        pid_text, _, ctime_text = _pidfile(ctx, name).read_text().partition(" ")
        process = psutil.Process(int(pid_text))
        if ctime_text and abs(process.create_time() - float(ctime_text)) > 1.0:
            return None  # the pid was reused
        if process.status() == psutil.STATUS_ZOMBIE:
            return None
        return process.pid
    except (OSError, ValueError, psutil.Error):
        return None


def _listens(pid: int, port: int) -> bool:
    """Whether process ``pid`` itself listens on ``port`` (another program on that port does not count; a
    non-dumpable part's sockets are closed to a user without CAP_SYS_PTRACE: then whether the port answers)."""
    try:
        sockets = psutil.Process(pid).net_connections(kind="inet")
    except psutil.AccessDenied:
        with socket.socket() as probe:
            probe.settimeout(1.0)
            return probe.connect_ex(("127.0.0.1", port)) == 0
    except psutil.Error:
        return False
    return any(c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port for c in sockets)


def up(ctx: Context, wait: float = 20.0) -> Iterator[tuple[str, str]]:
    """Start what is not running; yields each part's state as it is known ("started", "running")."""
    state = Path(ctx.settings.state_dir)
    for sub in ("run", "logs"):
        (state / sub).mkdir(parents=True, exist_ok=True)
    if ctx.settings.redis_url:
        yield "redis", "external"
    else:
        before = embedded.running(ctx.settings.state_dir)
        ctx.redis_url  # noqa: B018 - starts the embedded server (Context(start_redis=True))
        yield "redis", "running" if before is not None else "started"
    # No password in the parts' environment (taskqueues.credentials): the embedded server's come from the
    # state directory, configured URLs from the secrets file (0600). The director runs as its own process
    # (its local pilots stop with it), so beat does not run one too.
    secrets_file = state / "run" / "secrets.json"
    write_secrets(secrets_file, {name: getattr(ctx.settings, name) for name in SECRET_SETTINGS})
    env = {
        **scrubbed(os.environ),
        SECRETS_VARIABLE: str(secrets_file),
        "PILOTFISH_STATE_DIR": str(state),
        "PILOTFISH_BEAT_DIRECTOR": "false",
        SENTINEL_MASTER_VARIABLE: ctx.settings.redis_sentinel_master,  # whatever file it came from
        MARKER: marker(ctx),
    }
    started: list[tuple[Component, subprocess.Popen[bytes], float]] = []
    for component in components(ctx):
        if running_pid(ctx, component.name):
            yield component.name, "running"
            continue
        with open(state / "logs" / f"{component.name}.log", "ab") as log:
            process = subprocess.Popen(
                component.argv,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                start_new_session=True,
                cwd=state,
            )
        ctime = psutil.Process(process.pid).create_time()
        _pidfile(ctx, component.name).write_text(f"{process.pid} {ctime}")
        started.append((component, process, time.monotonic()))
    for component, process, at in started:
        log_path = state / "logs" / f"{component.name}.log"
        while True:
            if process.poll() is not None:
                raise PilotfishError(f"{component.name} exited at once (status {process.returncode}): see {log_path}")
            if component.port is not None and _listens(process.pid, component.port):
                break
            if component.port is None and time.monotonic() - at >= ALIVE_AFTER:
                break
            if time.monotonic() - at > wait:
                raise PilotfishError(
                    f"{component.name} did not answer on port {component.port} within {wait:g} s: see {log_path}"
                )
            time.sleep(0.1)
        yield component.name, "started"


def _stop(processes: list[psutil.Process], grace: float) -> None:
    """SIGTERM each process's group, SIGKILL what is left after ``grace`` seconds."""
    for process in processes:
        _signal_group(process, signal.SIGTERM)
    _, alive = psutil.wait_procs(processes, timeout=grace)
    for process in alive:
        _signal_group(process, signal.SIGKILL)
    psutil.wait_procs(alive, timeout=5)


def _signal_group(process: psutil.Process, sig: signal.Signals) -> None:
    try:
        pgid = os.getpgid(process.pid)
        if pgid == process.pid:
            os.killpg(pgid, sig)
        else:
            process.send_signal(sig)
    except (OSError, psutil.Error):
        pass


def orphans(ctx: Context) -> list[psutil.Process]:
    """Every other live process still carrying this deployment's marker, and every one that listed itself when it
    made itself non-dumpable (whose environment only a process with CAP_SYS_PTRACE can read). A zombie is not
    one: it holds nothing and only its parent can reap it."""
    wanted, me = marker(ctx), os.getpid()
    found: dict[int, psutil.Process] = {}
    for pid in sealed(ctx.settings.state_dir):
        with contextlib.suppress(psutil.Error):
            if (process := psutil.Process(pid)).status() != psutil.STATUS_ZOMBIE:
                found[pid] = process
    for process in psutil.process_iter():
        try:
            if process.pid not in found and process.environ().get(MARKER) == wanted:
                found[process.pid] = process
        except psutil.Error:
            continue
    found.pop(me, None)
    return list(found.values())


def down(ctx: Context, grace: float = 10.0) -> Iterator[tuple[str, str]]:
    """Stop the deployment (see the module doc); yields each part's state as it stops."""
    parts = {c.name: running_pid(ctx, c.name) for c in components(ctx)}
    order = [["director"], [name for name in parts if name != "director"]]
    for names in order:
        live = {
            name: psutil.Process(pid) for name in names if (pid := parts[name]) is not None and psutil.pid_exists(pid)
        }
        _stop(list(live.values()), grace)
        for name in names:
            _pidfile(ctx, name).unlink(missing_ok=True)
            yield name, "stopped" if name in live else "not running"
    left = orphans(ctx)
    if left:
        what = sorted({_describe(p) for p in left})
        _stop(left, grace)
        yield "orphans", f"{len(left)} stopped ({', '.join(what)})"
    # The one-use credential files of pilots that never started: no pilot of this deployment is left to take one.
    credentials.sweep_pilot_files(credentials.pilot_files_dir(ctx.settings.state_dir), -1.0, time.time())
    if not ctx.settings.redis_url:
        yield "redis", "stopped" if embedded.stop(ctx.settings.state_dir) else "not running"


def _describe(process: psutil.Process) -> str:
    """A pilotfish subcommand's name ("pilot", "director", "guardian"), else the program's."""
    try:
        argv = process.cmdline()
    except psutil.Error:
        return "?"
    for i, arg in enumerate(argv[:-1]):
        if arg in ("matcher.cli", "pilot.agent.command", "pilot.agent.guardian"):
            return arg.rsplit(".", 1)[-1] if arg != "matcher.cli" else argv[i + 1]
    return Path(argv[0]).name if argv else "?"
