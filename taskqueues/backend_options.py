"""Parse the open-lmake ``-b``/``--backend`` option strings into resources a backend understands.

Slurm takes a space-separated list of ``srun``-like options (the seed's table); Grid Engine takes only the
priority, ``-p N``. Both forms end up as a plain mapping so a per-submission string can override the
configured resources key by key. Unknown options are refused with the option named, never ignored: a
typo in a partition option would otherwise send pilots to the wrong place silently.
"""

from __future__ import annotations

import math
import shlex

from taskqueues.errors import BackendError, ConfigError
from taskqueues.units import read_size, to_mib


class BackendOptionError(ConfigError, BackendError):
    """A ``-b``/``--backend`` option string is wrong: the message names the option and the string.

    Both a configuration error (it is user input) and a backend error (``submit`` raises it for a
    per-submission string, and callers of ``submit`` catch :class:`BackendError`).
    """


# (short, long, resource key) — the resource keys are those of PilotRequest.resources.
SLURM_OPTIONS: tuple[tuple[str | None, str, str], ...] = (
    ("-c", "--cpus-per-task", "cpu"),
    (None, "--mem", "mem"),
    (None, "--tmp", "tmp"),
    ("-C", "--constraint", "features"),
    ("-x", "--exclude", "excludes"),
    (None, "--gres", "gres"),
    ("-L", "--licenses", "licenses"),
    ("-w", "--nodelist", "nodes"),
    ("-p", "--partition", "partition"),
    ("-q", "--qos", "qos"),
    (None, "--reservation", "reservation"),
)

SLURM_USAGE = (
    "slurm backend options: "
    + ", ".join(f"{short + '/' if short else ''}{long} VALUE" for short, long, _ in SLURM_OPTIONS)
    + " (-h/--help: this text)"
)

SGE_USAGE = "sge backend options: -p PRIORITY (an integer in -1023..1024) (-h/--help: this text)"


def parse_size_mib(text: str, *, option: str, where: str) -> int:
    """A Slurm-style size (``500``, ``500M``, ``2G``, ``1.5G``; no suffix = MB) in whole MiB, rounded up.

    Slurm's MB is a MiB (2^20 bytes) and its letters count 1024, so ``2G`` is 2048: the binary reading
    of :func:`taskqueues.units.read_size`, converted with :func:`taskqueues.units.to_mib`.
    """
    size = read_size(text, binary_letters=True)
    if size is None:
        raise BackendOptionError(f"{where}: {option} needs a size like 500, 500M or 2G, got {text!r}")
    return math.ceil(to_mib(size))


def _split(text: str, where: str) -> list[str]:
    try:
        return shlex.split(text)
    except ValueError as exc:
        raise BackendOptionError(f"{where}: cannot split {text!r}: {exc}") from None


def parse_slurm_options(text: str, *, where: str = "slurm options") -> dict[str, str]:
    """``"-c 4 --mem=2G -p long --gres gpu:1"`` → ``{"cpu": "4", "mem": "2048", "partition": "long", ...}``.

    Accepts ``-cVALUE``, ``-c VALUE``, ``--mem=VALUE`` and ``--mem VALUE``. ``mem``/``tmp`` come out in
    Slurm's MB (MiB), ``cpu`` as a positive integer; the rest verbatim. Raises :class:`BackendOptionError`
    on an unknown option, a missing value, or ``-h``/``--help`` (whose message is the usage).
    """
    by_short = {short: (long, key) for short, long, key in SLURM_OPTIONS if short}
    by_long = {long: (long, key) for _, long, key in SLURM_OPTIONS}
    tokens = _split(text, where)
    out: dict[str, str] = {}
    i = 0
    while i < len(tokens):
        token = tokens[i]
        value: str | None = None
        if token in ("-h", "--help"):
            raise BackendOptionError(f"{where}: {SLURM_USAGE}")
        if token.startswith("--"):
            name, eq, inline = token.partition("=")
            if name not in by_long:
                raise BackendOptionError(f"{where}: unknown option {name!r} in {text!r}; {SLURM_USAGE}")
            long, key = by_long[name]
            value = inline if eq else None
        elif token.startswith("-") and len(token) >= 2:
            short = token[:2]
            if short not in by_short:
                raise BackendOptionError(f"{where}: unknown option {short!r} in {text!r}; {SLURM_USAGE}")
            long, key = by_short[short]
            value = token[2:] or None
        else:
            raise BackendOptionError(f"{where}: expected an option, got {token!r} in {text!r}; {SLURM_USAGE}")
        if value is None:
            if i + 1 >= len(tokens) or (tokens[i + 1].startswith("-") and key != "cpu"):
                raise BackendOptionError(f"{where}: option {token!r} needs a value in {text!r}")
            i += 1
            value = tokens[i]
        if key == "cpu":
            if not (value.isascii() and value.isdigit()) or int(value) <= 0:  # "\u0664" would reach sbatch
                raise BackendOptionError(f"{where}: {long} needs a positive integer, got {value!r}")
        elif key in ("mem", "tmp"):
            value = str(parse_size_mib(value, option=long, where=where))
        elif not value:
            raise BackendOptionError(f"{where}: {long} needs a non-empty value in {text!r}")
        out[key] = value
        i += 1
    return out


def parse_sge_options(text: str, *, where: str = "sge options") -> dict[str, str]:
    """``"-p -100"`` → ``{"priority": "-100"}``; the only option the seed gives Grid Engine."""
    tokens = _split(text, where)
    out: dict[str, str] = {}
    i = 0
    while i < len(tokens):
        token = tokens[i]
        if token in ("-h", "--help"):
            raise BackendOptionError(f"{where}: {SGE_USAGE}")
        if token == "-p" or (token.startswith("-p") and len(token) > 2):
            value = token[2:]
            if not value:
                if i + 1 >= len(tokens):
                    raise BackendOptionError(f"{where}: option '-p' needs a value in {text!r}")
                i += 1
                value = tokens[i]
            try:
                priority = int(value)
            except ValueError:
                raise BackendOptionError(f"{where}: -p needs an integer priority, got {value!r}") from None
            if not -1023 <= priority <= 1024:
                raise BackendOptionError(f"{where}: -p {priority} is outside Grid Engine's range -1023..1024")
            out["priority"] = str(priority)
        else:
            raise BackendOptionError(f"{where}: unknown option {token!r} in {text!r}; {SGE_USAGE}")
        i += 1
    return out


def parse_options(kind: str, text: str, *, where: str | None = None) -> dict[str, str]:
    """Parse ``text`` with the syntax of backend ``kind``; ``local`` takes the Slurm syntax (cpu/mem/tmp)."""
    label = where or f"{kind} options"
    if kind in ("slurm", "local"):
        return parse_slurm_options(text, where=label)
    if kind == "sge":
        return parse_sge_options(text, where=label)
    raise BackendOptionError(f"{label}: no option syntax for backend kind {kind!r}")


#: Keys a job's own option string may not set: a pilot's cpu/mem/tmp are its shape, which the planner chose
#: and the pilot advertises; an option changing them would make the batch system grant something else.
SHAPE_KEYS = frozenset({"cpu", "mem", "tmp"})


def normalize_options(text: str, *, where: str = "backend options") -> str:
    """One spelling per option string (blanks collapsed, quoting canonical), so equal strings group together."""
    return shlex.join(_split(text, where))


def check_job_options(kind: str, text: str, *, where: str) -> dict[str, str]:
    """Parse a job's ``-b`` style string for a queue of backend ``kind``; refuse what that queue cannot honour.

    The local backend takes none (it has no partitions, qos or priorities to choose from: such a string
    means the job wants a batch system). Options that would change the pilot's shape are refused too.
    """
    if kind == "local":
        raise BackendOptionError(f"{where}: the local backend takes no backend options, got {text!r}")
    parsed = parse_options(kind, text, where=where)
    shaped = sorted(SHAPE_KEYS & set(parsed))
    if shaped:
        raise BackendOptionError(
            f"{where}: {', '.join(shaped)} come from the job's requirements and the pilot's shape, "
            f"not from its backend options {text!r}"
        )
    return parsed
