"""An attacker's payload (run by the attack tests as a real payload): it tries what a hostile job would and
reports what it got as ``KEY=VALUE`` lines in ``$PILOTFISH_OUTPUTS`` (and details on stdout).

Modes (first argument):

* ``search DIGEST...``: look for the secrets whose digests are given (passwords, the state directory's
  path) in every ``/proc/*/environ`` and ``/proc/*/cmdline`` it can read and the paths of every process's
  working directory and open descriptors (its ancestors' first), in its own environment, and in every file
  it can read around its own working directory and below the places a deployment keeps things (``/tmp``,
  ``/run``, ``/home``, ``/root``, ``/var``, ``/etc``, ``/work``...); exits 3 at the first one found, 0
  when none; reports ``hits``, ``files`` (how many files it read) and ``procs`` (processes it saw).
* ``neighbours KRAM``: look for another job's process (a ``/proc/*/environ`` or ``cmdline`` holding the
  mark, given reversed so that its own command line does not) and try to append to every other payload's
  outputs file and work directory it can find; exits 3 if it saw or wrote anything; reports ``seen``
  and ``written``.
* ``linger SECONDS``: start a grandchild in a new session that sleeps (an orphan in the making), then sleep.

Nothing here imports Pilotfish: a payload has nothing of the pilot's.
"""

from __future__ import annotations

import glob
import hashlib
import os
import re
import subprocess
import sys
import time

SKIP_DIRS = {"proc", "sys", "dev", ".git", "__pycache__", ".pyenv", ".cache", "site-packages", "node_modules"}
ROOTS = ["/tmp", "/var/tmp", "/run", "/dev/shm", "/home", "/root", "/var", "/etc", "/opt", "/srv", "/mnt", "/work"]
SKIP_ROOTS = ("/work/venvs", "/work/wt", "/work/main", "/var/lib/dpkg", "/var/cache", "/var/lib/apt")
MAX_FILE = 1 << 20
MAX_FILES = 40000


def report(**values: object) -> None:
    with open(os.environ["PILOTFISH_OUTPUTS"], "a") as handle:
        for key, value in values.items():
            handle.write(f"{key}={value}\n")


def ancestors() -> list[int]:
    out, pid = [], os.getpid()
    while pid > 1:
        try:
            with open(f"/proc/{pid}/stat") as handle:
                pid = int(handle.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            break
        out.append(pid)
    return out


def proc_texts() -> tuple[int, list[tuple[str, bytes]]]:
    pids = [int(p) for p in os.listdir("/proc") if p.isdigit()]
    order = ancestors() + [p for p in pids if p not in ancestors()]
    texts = []
    for pid in order:
        for name in ("environ", "cmdline"):
            try:
                with open(f"/proc/{pid}/{name}", "rb") as handle:
                    texts.append((f"/proc/{pid}/{name}", handle.read()))
            except OSError:
                continue
        texts.append((f"/proc/{pid}/cwd and fd", b"\0".join(links(pid))))
    return len(pids), texts


def links(pid: int) -> list[bytes]:
    """Where a process works and what it holds open: the paths of its working directory and descriptors."""
    out = []
    for link in [f"/proc/{pid}/cwd", *glob.glob(f"/proc/{pid}/fd/*")]:
        try:
            out.append(os.readlink(link).encode())
        except OSError:
            continue
    return out


def nearby() -> list[str]:
    """The directories around its own, nearest first: its working directory, then each parent up to (not
    including) one of :data:`ROOTS` or ``/``. Where it was put is where the pilot's things are likely to be."""
    out: list[str] = []
    here = os.getcwd()
    while here not in ROOTS and here != "/":
        out.append(here)
        here = os.path.dirname(here)
    return out


def files() -> list[str]:
    """Every file below :func:`nearby` and :data:`ROOTS` (each directory walked once), up to :data:`MAX_FILES`:
    a crowded ``/tmp`` must not hide the files next to its own."""
    found: list[str] = []
    walked: set[str] = set()
    for root in [*nearby(), *ROOTS]:
        for top, dirs, names in os.walk(root, onerror=lambda _e: None):
            dirs[:] = [
                d
                for d in dirs
                if d not in SKIP_DIRS
                and os.path.join(top, d) not in walked
                and not os.path.join(top, d).startswith(SKIP_ROOTS)
            ]
            for name in names:
                found.append(os.path.join(top, name))
                if len(found) >= MAX_FILES:
                    return found
        walked.add(root)
    return found


TOKEN = re.compile(rb"[A-Za-z0-9_+/=.-]{8,300}")


def digest(text: bytes) -> str:
    return hashlib.sha256(text).hexdigest()[:32]


def holds(text: bytes, needles: set[str]) -> bool:
    """Whether ``text`` holds a word (or a path's leading part) whose digest is a needle."""
    for match in TOKEN.finditer(text):
        token = match.group()
        if digest(token) in needles:
            return True
        for i in range(1, len(token)):
            if token[i : i + 1] == b"/" and digest(token[:i]) in needles:
                return True
    return False


def search(needles: list[str]) -> int:
    """The needles are digests (:func:`digest`) of the secrets looked for, so that this command line holds
    none of them. Stops at the first hit (exit 3), as an attacker would: one credential is enough."""
    wanted = set(needles)
    procs, texts = proc_texts()
    texts.append(("own environment", b"\0".join(f"{k}={v}".encode() for k, v in os.environ.items())))
    read = 0
    for where, text in texts:
        if holds(text, wanted):
            return found(where, read, procs)
    for path in files():
        try:
            if not os.path.isfile(path) or os.path.getsize(path) > MAX_FILE:
                continue
            with open(path, "rb") as handle:
                text = handle.read()
        except OSError:
            continue
        read += 1
        if holds(text, wanted):
            return found(path, read, procs)
    report(hits=0, files=read, procs=procs)
    print(f"nothing found: {read} files read, {procs} processes seen")
    return 0


def found(where: str, read: int, procs: int) -> int:
    print("found in", where)
    report(hits=1, files=read, procs=procs)
    return 3


def neighbours(kram: str) -> int:
    mark = kram[::-1].encode()
    _, texts = proc_texts()
    seen = sum(1 for _, text in texts if mark in text)
    own = os.path.realpath(os.environ["PILOTFISH_OUTPUTS"])
    area = os.path.dirname(os.path.dirname(own))
    written = 0
    for path in glob.glob(os.path.join(area, "*", "outputs")) + glob.glob(os.path.join(area, "*", "work")):
        if os.path.dirname(os.path.realpath(path)) == os.path.dirname(own):  # its own slot
            continue
        try:
            target = path if path.endswith("outputs") else os.path.join(path, "stolen")
            with open(target, "a") as handle:
                handle.write("stolen=1\n")
            written += 1
        except OSError:
            continue
    report(seen=seen, written=written)
    print(f"seen {seen} process(es) of another job, wrote into {written} of its files")
    return 3 if seen or written else 0


def linger(seconds: float) -> int:
    subprocess.Popen([sys.executable, "-c", f"import time; time.sleep({seconds})"], start_new_session=True)
    time.sleep(seconds)
    return 0


def command() -> str:
    """How a payload runs this attacker: its source travels gzipped and base64 in the command (a workflow's
    command template is bounded), so no quoting breaks it and it runs wherever the checkout is (the sandbox
    hides /tmp, where CI's clean clone lives)."""
    import base64  # only the tests that build the command need them
    import gzip

    with open(__file__, "rb") as handle:
        source = base64.b64encode(gzip.compress(handle.read(), mtime=0)).decode()
    return f'{sys.executable} -c "$(echo {source} | base64 -d | gzip -dc)"'


if __name__ == "__main__":
    mode, *rest = sys.argv[1:]
    if mode == "search":
        sys.exit(search(rest))
    if mode == "neighbours":
        sys.exit(neighbours(rest[0]))
    if mode == "linger":
        sys.exit(linger(float(rest[0])))
    sys.exit(f"unknown mode {mode}")
