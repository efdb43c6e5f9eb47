"""``pilotfish up`` / ``down``: a persistent deployment on this machine.

``up`` starts, each only if it is not running yet: the embedded Redis (unless ``redis_url`` is set; its
append-only file keeps the data across ``down``/``up``), the control plane (``pilotfish matcher``:
Celery worker with beat), a site director (``pilotfish director``) and Flower on a loopback port.
Processes run detached, with their pid in ``<state_dir>/run`` and their output in ``<state_dir>/logs``.
``down`` stops them (SIGTERM, then SIGKILL after a grace period), the director's local pilots with it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from taskqueues.errors import PilotfishError

from . import embedded
from .context import Context


@dataclass(frozen=True)
class Component:
    name: str
    argv: list[str]


def components(ctx: Context) -> list[Component]:
    py = sys.executable
    s = ctx.settings
    logs = Path(s.state_dir) / "logs"
    return [
        Component("matcher", [py, "-m", "matcher.cli", "matcher", "--loglevel", "WARNING"]),
        Component("director", [py, "-m", "matcher.cli", "director", "--log-dir", str(logs / "pilots"),
                               "--stop-pilots-on-exit"]),
        Component("flower", [py, "-m", "celery", "--broker", ctx.redis_url, "flower", f"--port={s.flower_port}",
                             "--address=127.0.0.1"]),
    ]


def _pidfile(ctx: Context, name: str) -> Path:
    return Path(ctx.settings.state_dir) / "run" / f"{name}.pid"


def running_pid(ctx: Context, name: str) -> int | None:
    try:
        pid = int(_pidfile(ctx, name).read_text())
        os.kill(pid, 0)
    except (OSError, ValueError):
        return None
    return pid


def up(ctx: Context) -> dict[str, str]:
    """Start what is not running; returns each component's state ("started", "running")."""
    state = Path(ctx.settings.state_dir)
    (state / "run").mkdir(parents=True, exist_ok=True)
    (state / "logs").mkdir(parents=True, exist_ok=True)
    out = {"redis": "external" if ctx.settings.redis_url else "running"}
    if not ctx.settings.redis_url and embedded.running(ctx.settings.state_dir) is None:
        out["redis"] = "started"
    # The director runs as its own process (its local pilots stop with it), so beat does not run one too.
    env = {**os.environ, "PILOTFISH_REDIS_URL": ctx.redis_url, "PILOTFISH_STATE_DIR": str(state),
           "PILOTFISH_BEAT_DIRECTOR": "false", "FLOWER_UNAUTHENTICATED_API": "true"}
    for component in components(ctx):
        if running_pid(ctx, component.name):
            out[component.name] = "running"
            continue
        with open(state / "logs" / f"{component.name}.log", "ab") as log:
            process = subprocess.Popen(component.argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                       env=env, start_new_session=True, cwd=state)
        _pidfile(ctx, component.name).write_text(str(process.pid))
        out[component.name] = "started"
    time.sleep(0.5)
    dead = [c.name for c in components(ctx) if running_pid(ctx, c.name) is None]
    if dead:
        raise PilotfishError(f"{', '.join(dead)} stopped at once: see {state / 'logs'}")
    return out


def down(ctx: Context, grace: float = 10.0) -> dict[str, str]:
    out = {}
    for component in reversed(components(ctx)):
        pid = running_pid(ctx, component.name)
        if pid is None:
            out[component.name] = "not running"
            continue
        os.killpg(pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and running_pid(ctx, component.name):
            time.sleep(0.1)
        if running_pid(ctx, component.name):
            os.killpg(pid, signal.SIGKILL)
        _pidfile(ctx, component.name).unlink(missing_ok=True)
        out[component.name] = "stopped"
    if not ctx.settings.redis_url:
        out["redis"] = "stopped" if embedded.stop(ctx.settings.state_dir) else "not running"
    return out
