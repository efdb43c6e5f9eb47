"""How an unconfined payload's command line is started: the program itself when the shell would only run it.

A job's command is a shell command line, run as ``/bin/sh -c <command>``. For the common case, one program
and its arguments, the shell is a process between the pilot and the payload: Debian's ``sh`` (dash) forks
and execs the program and waits for it, so each payload costs two execs and a fork instead of one exec
(1.07 ms of CPU against 0.45 ms for ``sh -c /usr/bin/true`` against ``/usr/bin/true`` on a two-core host:
``docs/performance.md``, "The payload's own start"). ``bash -c`` skips its fork the same way.

:func:`argv` gives the program's own argv when the command is a **simple command of plain words**, where
the shell would do nothing but look the program up and exec it:

* every character a letter, a digit, a space or one of ``_@%+=:,./-``: no quoting, expansion, globbing,
  redirection, operator, comment or line break (a tab or any other byte sends it to the shell);
* its first word neither a shell keyword nor a builtin (``cd``, ``exit``, ``echo``, ``test``...: the shell runs
  those itself, and some behave otherwise as programs), nor an assignment (``NAME=value``); except ``true``
  and ``false`` alone, whose programs do exactly what the builtins do;
* its program found as the shell would find it: a word with a ``/`` as it stands (relative to the payload's
  work directory), another one in the ``PATH`` of the payload's environment (the shell's default path when
  it has none), the first regular file there it may execute. A relative entry of ``PATH`` sends the command
  to the shell. What is found is kept for a second (:func:`lookup`).

Everything else runs in the shell as before, and so does a program the kernel refuses to exec
(:func:`pilot.agent.payload.Payload.spawn` retries it through the shell): a script without ``#!``, which the
shell runs itself, or a file gone or made unexecutable since it was found, whose error the shell reports with
its own message and status (126 or 127), as it would have. The payload's environment, work directory, session
and descriptors are the same either way.
"""

from __future__ import annotations

import math
import os
import re
import stat
import time
from collections.abc import Mapping

#: The shell an unconfined payload's command runs in, and what ``bwrap`` runs in a sandbox.
SHELL = ["/bin/sh", "-c"]

#: dash's path when the environment has no ``PATH``.
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

_PLAIN = re.compile(r"[A-Za-z0-9_@%+=:,./ -]+")

#: Words the shell runs itself (dash's builtins and keywords; bash's too, should ``/bin/sh`` be bash).
_SHELL_WORDS = (
    ". : [ [[ ]] ! { } alias bg bind break builtin caller case cd chdir command compgen complete continue coproc "
    "declare dirs disown do done echo elif else enable esac eval exec exit export false fc fg fi for function "
    "getopts hash help history if in jobs kill let local logout mapfile popd printf pushd pwd read readarray "
    "readonly return select set shift shopt source suspend test then time times trap true type typeset ulimit "
    "umask unalias unset until wait while"
)
SHELL_WORDS = frozenset(_SHELL_WORDS.split())

#: Builtins whose program does the same, when given no arguments (``true --help`` prints help as a program).
SAME_AS_PROGRAM = frozenset({"true", "false"})


def words(command: str) -> list[str] | None:
    """The words of ``command`` when it is a simple command of plain words the shell would only exec, or None."""
    if not _PLAIN.fullmatch(command):
        return None
    split = command.split()
    if not split:
        return None
    first = split[0]
    if "=" in first or (first in SHELL_WORDS and not (first in SAME_AS_PROGRAM and len(split) == 1)):
        return None
    return split


def find_program(name: str, env: Mapping[str, str]) -> str | None:
    """The file the shell would exec for ``name`` (no ``/`` in it) in ``env``'s ``PATH``, or None when it would
    find none, or finding it is left to the shell (a relative ``PATH`` entry)."""
    dirs = env.get("PATH", DEFAULT_PATH).split(":")
    if not all(d.startswith("/") for d in dirs):
        return None
    for d in dirs:
        path = f"{d}/{name}"
        if os.access(path, os.X_OK):  # False for a missing path, without an exception's cost
            try:
                if stat.S_ISREG(os.stat(path).st_mode):
                    return path
            except OSError:
                continue
    return None


#: How long a program found is taken as found: a program put since then earlier in ``PATH`` is seen at most this
#: late (one gone or made unexecutable since is seen at once: the kernel refuses it and the shell looks again).
FOUND_SECONDS = 1.0
_FOUND_MAX = 256
_found: dict[tuple[str, str], tuple[float, str | None]] = {}  # (PATH, name) -> (when looked up, file)


def lookup(name: str, env: Mapping[str, str]) -> str | None:
    """:func:`find_program`, looked up again once :data:`FOUND_SECONDS` have passed (about 1 us a job
    instead of 12-25 us, a stat per ``PATH`` entry before the program's)."""
    key = (env.get("PATH", DEFAULT_PATH), name)
    now = time.monotonic()
    when, path = _found.get(key, (-math.inf, None))
    if now - when > FOUND_SECONDS:
        if len(_found) >= _FOUND_MAX:
            _found.clear()
        path = find_program(name, env)
        _found[key] = (now, path)
    return path


def argv(command: str, env: Mapping[str, str]) -> tuple[str, list[str]]:
    """The file and argv that start an unconfined payload running ``command`` with ``env``: the program itself
    for a plain simple command (:func:`words`), else the shell. A word with a ``/`` is passed as it stands,
    relative to the payload's work directory (:func:`pilot.agent.payload.spawn_in` starts it there)."""
    split = words(command)
    if split is not None:
        path = split[0] if "/" in split[0] else lookup(split[0], env)
        if path is not None:
            return path, split
    return SHELL[0], [*SHELL, command]
