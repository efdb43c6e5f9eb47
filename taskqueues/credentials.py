"""Passwords out of every process's environment and command line, and processes nobody can dump.

A process's environment and command line are readable by every process of the same user
(``/proc/<pid>/environ``, ``ps``), so no Pilotfish process carries a password there:

* the control plane (worker, beat, director, Flower, started by ``pilotfish up``) reads its URLs from
  the settings (embedded server: ``<state_dir>/redis/credentials.json``) or from the deployment's secrets
  file :data:`SECRETS_VARIABLE` names (``<state_dir>/run/secrets.json``, 0600), which ``up`` writes with the
  URL settings it was given through its own environment;
* a pilot gets its community's credential in a file of its own (:func:`write_pilot_file`, 0600, named by
  :data:`PILOT_FILE_VARIABLE`) that it reads and removes at start (:func:`take_pilot_file`).
* in Kubernetes (the Helm chart), every process reads its URLs from its Secrets mounted as files, each named by
  ``PILOTFISH_<SETTING>_FILE`` (:data:`FILE_SUFFIX`, :func:`file_values`; ``Settings.load`` and ``pilotfish pilot``).

Every long-running process also calls :func:`seal` (:func:`no_dump`) at start: a non-dumpable process's
``/proc/<pid>/environ``, ``mem``, ``fd/*`` and ``ptrace`` are closed to other processes of the same user
(only a process with ``CAP_SYS_PTRACE``, root, still gets in).
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import secrets
from collections.abc import Iterable, Mapping, MutableMapping
from pathlib import Path

from .errors import ConfigError

#: Names the deployment's secrets file (control-plane URL settings, 0600) in a control-plane process.
SECRETS_VARIABLE = "PILOTFISH_SECRETS_FILE"
#: Names a pilot's one-use credential file (read and removed when the pilot starts).
PILOT_FILE_VARIABLE = "PILOTFISH_CREDENTIALS_FILE"
#: The settings that carry passwords: never passed to a process through its environment.
SECRET_SETTINGS = ("redis_url", "pilot_redis_url", "broker_url", "pilot_broker_url")

_PR_SET_DUMPABLE, _PR_GET_DUMPABLE = 4, 3
_FILE_MODE, _DIR_MODE = 0o600, 0o700


def _prctl(option: int, value: int = 0) -> int:
    libc = ctypes.CDLL(None, use_errno=True)
    return int(libc.prctl(ctypes.c_int(option), ctypes.c_ulong(value), 0, 0, 0))


def no_dump() -> None:
    """Mark this process non-dumpable (``prctl(PR_SET_DUMPABLE, 0)``): other processes of its user can no
    longer read its environment, memory or descriptors. Its children start dumpable again after their
    ``exec`` (the kernel resets the flag), so a payload is not affected. A no-op where there is no prctl."""
    with contextlib.suppress(OSError, AttributeError):  # not Linux: nothing to do
        _prctl(_PR_SET_DUMPABLE, 0)


#: Every process of a ``pilotfish up`` deployment carries its state directory in this variable (``down`` finds
#: leftover processes by it: matcher.cli.deploy).
DEPLOYMENT_VARIABLE = "PILOTFISH_DEPLOYMENT"


def sealed_dir(state_dir: str | Path) -> Path:
    """Where a deployment's non-dumpable processes list themselves (``<pid>`` files holding their start time)."""
    return Path(state_dir) / "run" / "sealed"


def seal() -> None:
    """What each long-running entry point calls first: :func:`no_dump`, and, in a deployment, list this process
    in :func:`sealed_dir` (removed at exit), since ``down`` can no longer read the marker in its environment
    unless it runs with CAP_SYS_PTRACE. Nothing is listed where the state directory is not (a remote node)."""
    no_dump()
    state = os.environ.get(DEPLOYMENT_VARIABLE, "")
    if not state or not (Path(state) / "run").is_dir():
        return
    import atexit

    import psutil

    path = sealed_dir(state) / str(os.getpid())
    try:
        path.parent.mkdir(mode=_DIR_MODE, exist_ok=True)
        path.write_text(repr(psutil.Process().create_time()))
    except (OSError, psutil.Error):
        return
    pid = os.getpid()

    def unlist() -> None:
        if os.getpid() == pid:  # not in a forked child that exits through Python
            path.unlink(missing_ok=True)

    atexit.register(unlist)


def sealed(state_dir: str | Path) -> list[int]:
    """The live processes :func:`seal` listed for this deployment (files of dead ones, zombies included, and of
    reused pids are removed)."""
    import psutil

    live = []
    directory = sealed_dir(state_dir)
    for path in directory.glob("*") if directory.is_dir() else []:
        try:
            process = psutil.Process(int(path.name))
            same = abs(process.create_time() - float(path.read_text())) < 1.0
            if same and process.status() != psutil.STATUS_ZOMBIE:  # a killed one nobody reaped is gone
                live.append(process.pid)
                continue
        except (OSError, ValueError, psutil.Error):
            pass
        path.unlink(missing_ok=True)
    return live


def dumpable() -> bool:
    """Whether this process is dumpable (the tests' check of :func:`no_dump`)."""
    try:
        return _prctl(_PR_GET_DUMPABLE) == 1
    except (OSError, AttributeError):
        return True


def write_private(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` (mode 0600, its directory 0700) through a rename: never half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    os.chmod(path.parent, _DIR_MODE)
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, _FILE_MODE)
    with os.fdopen(fd, "w") as handle:
        handle.write(text)
    os.replace(tmp, path)


def _read_values(path: Path, what: str) -> dict[str, str]:
    try:
        data = json.loads(path.read_text())
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read {what}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise ConfigError(f"{path}: {what} is not JSON: {exc}") from None
    if not isinstance(data, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in data.items()):
        raise ConfigError(f"{path}: {what} must be a JSON object of strings")
    return data


def write_secrets(path: Path, values: Mapping[str, str]) -> None:
    """The deployment's secrets file: the URL settings (:data:`SECRET_SETTINGS`) that have a value."""
    write_private(path, json.dumps({k: v for k, v in values.items() if k in SECRET_SETTINGS and v}))


def read_secrets(env: Mapping[str, str]) -> dict[str, str]:
    """The settings of the secrets file ``env`` names (empty when it names none)."""
    name = env.get(SECRETS_VARIABLE, "")
    if not name:
        return {}
    values = _read_values(Path(name), "the deployment's secrets file")
    unknown = sorted(set(values) - set(SECRET_SETTINGS))
    if unknown:
        raise ConfigError(f"{name}: unknown setting(s) in the secrets file: {', '.join(unknown)}")
    return values


#: The suffix of a variable naming a file that holds a secret setting's value (``PILOTFISH_REDIS_URL_FILE``): the
#: Docker-secrets convention, how a Kubernetes Secret mounted as a file reaches a process (the Helm chart).
FILE_SUFFIX = "_FILE"


def read_value_file(variable: str, path: str) -> str:
    """The value held in ``path`` (named by the environment variable ``variable``): its text without the trailing
    newline. A file missing, unreadable, not UTF-8, empty or of more than one line is refused, naming both."""
    where = f"${variable} ({path})"
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{where}: cannot read the file: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{where}: the file is not UTF-8 text") from None
    value = text.removesuffix("\n").removesuffix("\r")
    if not value:
        raise ConfigError(f"{where}: the file is empty")
    if "\n" in value or "\r" in value or "\0" in value:
        raise ConfigError(f"{where}: the file must hold one line (the value), it holds more or a NUL")
    return value


def file_values(env: Mapping[str, str], variables: Iterable[str]) -> dict[str, str]:
    """For each of ``variables`` (``PILOTFISH_REDIS_URL``...) whose ``<variable>_FILE`` ``env`` sets, the value
    its file holds (:func:`read_value_file`). Setting both a variable and its ``_FILE`` is refused: which one
    counts would be a guess."""
    values = {}
    for variable in variables:
        path = env.get(variable + FILE_SUFFIX)
        if path is None:
            continue
        if variable in env:
            raise ConfigError(f"both ${variable} and ${variable}{FILE_SUFFIX} are set: set only one")
        if not path:
            raise ConfigError(f"${variable}{FILE_SUFFIX} is set but empty: name the file holding {variable}'s value")
        values[variable] = read_value_file(variable + FILE_SUFFIX, path)
    return values


def pilot_files_dir(state_dir: str | Path) -> Path:
    """Where a director writes its pilots' credential files."""
    return Path(state_dir) / "run" / "pilot-credentials"


def write_pilot_file(directory: Path, values: Mapping[str, str]) -> Path:
    """A pilot's one-use credential file in ``directory`` (0700): ``values`` are its ``PILOTFISH_*``
    variables that carry passwords (``PILOTFISH_REDIS_URL``, ``PILOTFISH_BROKER_URL``)."""
    path = directory / f"pilot-{secrets.token_hex(8)}.json"
    write_private(path, json.dumps(dict(values)))
    return path


def take_pilot_file(env: MutableMapping[str, str]) -> dict[str, str]:
    """Read and remove the pilot credential file ``env`` names, and drop its name from ``env``; empty when
    none is named. A file already gone (a second start of the same batch job) is a clear error."""
    name = env.pop(PILOT_FILE_VARIABLE, "")
    if not name:
        return {}
    path = Path(name)
    values = _read_values(path, "the pilot's credential file")
    path.unlink(missing_ok=True)
    return values


def forget_pilot_file(env: Mapping[str, str]) -> None:
    """Remove the credential file ``env`` names, if any (a pilot the batch system refused)."""
    name = env.get(PILOT_FILE_VARIABLE, "")
    if name:
        Path(name).unlink(missing_ok=True)


def sweep_pilot_files(directory: Path, older_than: float, now: float) -> int:
    """Remove credential files no pilot took within ``older_than`` seconds (pilots cancelled while queued);
    the number removed."""
    removed = 0
    try:
        entries = list(directory.glob("pilot-*.json"))
    except OSError:
        return 0
    for path in entries:
        try:
            if now - path.stat().st_mtime > older_than:
                path.unlink()
                removed += 1
        except OSError:
            continue
    return removed
