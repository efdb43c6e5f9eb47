"""The payload sandbox: each payload in its own PID, IPC, mount and network namespaces (bubblewrap).

``payload_sandbox = "bwrap"`` (the default) starts every payload as ``bwrap <options> -- /bin/sh -c
<command>``. Inside:

* the whole system read-only (``--ro-bind / /``), a private ``/dev`` and a ``/proc`` of its own PID
  namespace (it sees its own processes only: no other payload's, no pilot's or director's environment);
* empty, private tmpfs over every place where a deployment keeps what a payload must not read:
  ``/tmp``, ``/var/tmp``, ``/run``, ``/root``, ``/home``, ``/var/spool`` (the batch systems' job scripts
  and environments), ``/var/log``, the batch systems' state, the pilot's work directory (its logs,
  $JOBSTATUS, the other payloads' slots), the Pilotfish state directory (``$PILOTFISH_STATE_DIR``,
  ``~/.pilotfish``) and the pilot's home directory;
* the pilot's own Python installation bound back read-only when a hidden place holds it (a pyenv or
  conda under a home directory), unless it lies in a private path;
* its own slot bound back writable (work directory, $TMPDIR, $JOBFEATURES, its outputs file), the
  pilot's $MACHINEFEATURES read-only;
* no network unless the job asked for it (requirement ``sandbox_network = "yes"``), extra read-only or
  writable paths only when the job named them (``sandbox_ro``, ``sandbox_rw``), see :mod:`taskqueues.sandbox`;
* no capability (``--cap-drop ALL``, so root cannot unmount what hides the rest), ``no_new_privs``;
* ``--die-with-parent``: the sandbox is SIGKILLed the moment the pilot dies, however it dies, and with
  its PID namespace every process the payload started (a payload cannot outlive its pilot, so the
  attempt a reaper requeues never runs beside it).

The pilot keeps what it had without a sandbox: bwrap is started in the payload's session (the session
and group id is bwrap's pid), the pilot's memory sampling finds every process of that session, ``wait4``
gives the CPU time of the whole tree, and SIGKILL to the group kills it all. bwrap's outer process may exit
(with the payload's status) before it waits for the init of the payload's PID namespace, which holds the
payload's CPU time: the pilot is therefore the subreaper of its sandboxes (:func:`adopt_orphans`), so that
init is handed to the pilot, which reaps it and adds its time (:func:`reap_adopted`). SIGTERM is different:
bwrap dies of it at once and takes the sandbox with it, so the pilot sends SIGTERM to the payload's own
processes only (:func:`payload_members`), keeping the kill grace.

``payload_sandbox = "none"`` runs ``/bin/sh -c`` directly, as before: see
:func:`taskqueues.sandbox.none_warning` for what a payload then reaches. A pilot whose sandbox cannot
start (bwrap missing, no user namespaces for an unprivileged user) refuses to start
(:class:`SandboxError`) rather than run payloads unconfined.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from pilot.agent.launch import SHELL
from taskqueues.errors import PilotfishError
from taskqueues.sandbox import NONE, READ_ONLY, READ_WRITE, SANDBOXES, network_wanted, read_only_paths
from taskqueues.settings import Settings

__all__ = ["HIDDEN", "Sandbox", "SandboxError", "payload_members"]

#: System directories covered with an empty tmpfs in every sandbox (those that exist on the node).
HIDDEN: tuple[str, ...] = (
    "/tmp",
    "/var/tmp",
    "/run",
    "/root",
    "/home",
    "/var/spool",
    "/var/log",
    "/var/lib/gridengine",
    "/var/lib/slurm",
    "/var/lib/slurmd",
    "/var/lib/redis",
    "/var/lib/valkey",
)


class SandboxError(PilotfishError):
    """The payload sandbox cannot start here (and the site did not set ``payload_sandbox = "none"``)."""


def _covered(path: str, by: Iterable[str]) -> bool:
    return any(path == top or path.startswith(top.rstrip("/") + "/") for top in by)


def private_paths(settings: Settings, workdir: Path, extra: Iterable[Path | None] = ()) -> list[str]:
    """The deployment's own paths a payload must not see: the state directory, the pilot's work area (and its
    log and $JOBSTATUS directories when apart) and its home (real paths, existing ones only; ``/`` never)."""
    candidates = [
        settings.state_dir,
        os.environ.get("PILOTFISH_STATE_DIR", ""),
        os.fspath(workdir),
        os.environ.get("HOME", ""),
        *(os.fspath(p) for p in extra if p is not None),
    ]
    out: list[str] = []
    for candidate in candidates:
        if not candidate:
            continue
        real = os.path.realpath(candidate)
        if real != "/" and os.path.isdir(real) and real not in out:
            out.append(real)
    return out


def software(hidden: Sequence[str], private: Sequence[str]) -> list[str]:
    """The pilot's own Python installation(s) when a hidden place holds them (a pyenv or conda under a home):
    bound back read-only so that payloads find the interpreter the pilot runs with; never from the state
    directory or the pilot's work area (``private``)."""
    out: list[str] = []
    for prefix in sorted({os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)}):
        if not _covered(prefix, hidden) or _covered(prefix, out):
            continue
        if any(_covered(prefix, [p]) or _covered(p, [prefix]) for p in map(os.path.realpath, private)):
            continue
        out.append(prefix)
    return out


@dataclass(frozen=True)
class Sandbox:
    """How a pilot starts its payloads: ``kind`` "bwrap" or "none", and for bwrap the options shared by every
    payload (computed once: the spawn of a short payload must stay cheap)."""

    kind: str
    bwrap: str = ""
    hidden: tuple[str, ...] = ()
    private: tuple[str, ...] = ()
    prefix: tuple[str, ...] = ()
    shared: tuple[str, ...] = ()

    @classmethod
    def create(cls, kind: str, private: Sequence[str] = (), shared: Sequence[str] = ()) -> Sandbox:
        """The sandbox of a pilot whose own paths are ``private``; ``shared``: the site's places under which a
        job may ask for a path (``sandbox_ro``, ``sandbox_rw``). Checks that bwrap works here.

        Raises :class:`SandboxError` naming what is missing when ``kind`` is "bwrap" and it cannot start.
        """
        if kind not in SANDBOXES:
            raise SandboxError(f"payload_sandbox: must be one of {', '.join(SANDBOXES)}, got {kind!r}")
        if kind == NONE:
            return cls(kind)
        bwrap = shutil.which("bwrap")
        if bwrap is None:
            raise SandboxError(
                "payload_sandbox = bwrap but bubblewrap (bwrap) is not installed on this node: install the "
                "bubblewrap package, or let payloads run unconfined with payload_sandbox = none"
            )
        hidden: list[str] = []
        for path in sorted({os.path.realpath(p) for p in (*HIDDEN, *private)}, key=lambda p: (p.count("/"), p)):
            if os.path.isdir(path) and path != "/" and not _covered(path, hidden):
                hidden.append(path)
        prefix = ["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
        for path in hidden:
            prefix += ["--tmpfs", path]
        home = os.path.realpath(os.environ.get("HOME", "/"))
        for path in software(hidden, [p for p in private if os.path.realpath(p) != home]):
            prefix += ["--ro-bind", path, path]
        prefix += ["--unshare-pid", "--unshare-ipc", "--die-with-parent", "--cap-drop", "ALL"]
        sandbox = cls(
            kind,
            bwrap,
            tuple(hidden),
            tuple(os.path.realpath(p) for p in private),
            tuple(prefix),
            tuple(os.path.realpath(p) for p in shared if p.startswith("/") and os.path.realpath(p) != "/"),
        )
        sandbox.check()
        return sandbox

    @property
    def confined(self) -> bool:
        return self.kind != NONE

    def check(self) -> None:
        """Start one empty sandbox (the options of a payload without network): bwrap refuses where user
        namespaces are off for an unprivileged user, or a mount is not allowed."""
        argv = [self.bwrap, *self.prefix, "--unshare-net", "--", "/bin/true"]
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise SandboxError(f"payload sandbox: cannot run {self.bwrap}: {exc}") from None
        if done.returncode != 0:
            why = done.stderr.strip() or f"exit code {done.returncode}"
            raise SandboxError(
                f"payload sandbox: bwrap cannot start a sandbox on this node ({why}); enable unprivileged user "
                "namespaces (sysctl kernel.unprivileged_userns_clone=1 / user.max_user_namespaces), or let "
                "payloads run unconfined with payload_sandbox = none"
            )

    def grantable(self, path: str, name: str) -> str:
        """The real path of a ``sandbox_ro``/``sandbox_rw`` entry, if the sandbox may show it (``ValueError``
        naming the requirement if not): only within the site's shared places (``payload_shared_paths``: a
        job must not bind ``/etc/cron.d`` writable, nor another user's home readable), and never a hidden
        system place itself, nor a private path of the deployment, what holds one or what lies inside one.
        Resolved first: a symbolic link cannot lead around the rule."""
        real = os.path.realpath(path)
        if not _covered(real, self.shared):
            places = ", ".join(self.shared) or "none"
            raise ValueError(f"{name}: {path} is not within the site's payload_shared_paths ({places})")
        if _refused(real, self.private):
            raise ValueError(f"{name}: {path} is, holds or is inside a path the sandbox must hide")
        return real

    def argv(
        self, command: str, *, slot: Path, workdir: Path, machinefeatures: Path | None, requirements: dict[str, object]
    ) -> list[str]:
        """The argv that runs ``command`` for one payload whose slot (work directory, $TMPDIR, $JOBFEATURES
        and outputs file) is ``slot``. Raises ``ValueError`` for a requirement the sandbox cannot grant."""
        if not self.confined:
            return [*SHELL, command]
        argv = [self.bwrap, *self.prefix]
        if not network_wanted(requirements):
            argv.append("--unshare-net")
        for name, bind in ((READ_ONLY, "--ro-bind"), (READ_WRITE, "--bind")):
            for path in read_only_paths(requirements, name):
                real = self.grantable(path, name)
                if name == READ_WRITE and not os.path.isdir(real):
                    try:
                        os.makedirs(real, mode=0o755, exist_ok=True)
                    except OSError as exc:
                        raise ValueError(f"{name}: cannot create {path}: {exc.strerror or exc}") from None
                elif not os.path.exists(real):
                    raise ValueError(f"{name}: {path} does not exist on this node")
                argv += [bind, real, real]
        if machinefeatures is not None and os.fspath(machinefeatures) != "/":
            argv += ["--ro-bind", os.fspath(machinefeatures), os.fspath(machinefeatures)]
        root = os.fspath(slot)
        argv += ["--bind", root, root, "--chdir", os.fspath(workdir), "--", *SHELL, command]
        return argv


def _refused(real: str, private: Sequence[str]) -> bool:
    return real in HIDDEN or any(_covered(real, [p]) or _covered(p, [real]) for p in private)


_PR_SET_CHILD_SUBREAPER = 36


def adopt_orphans() -> None:
    """Make this process the subreaper of its descendants (``prctl(PR_SET_CHILD_SUBREAPER)``): a sandbox's
    init whose bwrap exited first is handed to the pilot, not to the system's init, and :func:`reap_adopted`
    collects its CPU time. A no-op where there is no prctl."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(ctypes.c_int(_PR_SET_CHILD_SUBREAPER), ctypes.c_ulong(1), 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: bwrap is not there either
        return


def reap_adopted(session: int) -> float:
    """Reap the children this process adopted from ``session`` (a sandboxed payload whose bwrap has been
    reaped; SIGKILLed with its session before) and return their CPU seconds, with what they had waited for."""
    cpu = 0.0
    for task in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{task}/children") as handle:
                children = [int(pid) for pid in handle.read().split()]
        except (OSError, ValueError):
            continue
        for pid in children:
            try:
                if os.getsid(pid) != session:
                    continue
                _, _, rusage = os.wait4(pid, 0)
            except (ChildProcessError, ProcessLookupError, PermissionError):
                continue
            cpu += rusage.ru_utime + rusage.ru_stime
    return cpu


def payload_members(session: int) -> list[int]:
    """The processes of a sandboxed payload's session that are the payload's own: all but bwrap (the
    session leader ``session``) and its child, the init of the payload's PID namespace."""
    bwraps = {session}
    try:
        with open(f"/proc/{session}/task/{session}/children") as handle:
            bwraps.update(int(pid) for pid in handle.read().split())
    except (OSError, ValueError):
        pass
    members = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        pid = int(entry)
        try:
            if pid not in bwraps and os.getsid(pid) == session:
                members.append(pid)
        except OSError:
            continue
    return members
