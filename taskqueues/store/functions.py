"""The store's Lua as one Redis function library: loaded once, kept with the data, replicated.

Each ``taskqueues/store/lua/<name>.lua`` stays one operation (:func:`taskqueues.store.scripts.source` gives its text,
with the shared helpers when it uses them). At load time every one becomes function ``pf_<name>`` of one
library, whose name carries a hash of the whole library (``pilotfish_<hash>``): the script's text is the
body of the function's callback, whose parameters are named ``KEYS`` and ``ARGV``, so the file reads the
same as a script. A script whose header has a line ``-- flags: no-writes`` is registered with that flag
and called with ``FCALL_RO`` (it may then run on a replica); none of the store's operations is read-only
today.

Redis keeps functions with the data (RDB and AOF) and sends them to replicas, so a restart, a failover or
a replica promoted by Sentinel answers every ``FCALL`` without a reload: no NOSCRIPT. The library is
loaded (:meth:`Library.ensure`) by the control plane's first call of a function in a process, when the
server holds another version or none (on a Redis Cluster: on every primary, so that a community's slot finds
it wherever it moves; a primary that joined later answers "not found", and the call loads it everywhere
again): the loaded version is read once per process and connection pool, and a different one is replaced
in one transaction (``FUNCTION DELETE`` of the older ``pilotfish_*`` libraries, ``FUNCTION LOAD REPLACE`` of
this one). The function names carry no version, so the pilots' ACL can name
them (``+fcall|pf_match``: :mod:`taskqueues.store.access`) and a chart can list them. A pilot (a client whose
user is a ``pf-pilot-<vo>``) may not load functions (it could replace the code the control plane runs) and
does not look at what is loaded; when it finds a function missing it waits for the control plane as for
an outage (:class:`~taskqueues.errors.StoreUnavailable`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from functools import cache
from typing import Any

import redis

from ..errors import StoreUnavailable
from . import access, cluster, scripts
from .connection import PerPool
from .guard import client_url
from .records import text as _text

LIBRARY_PREFIX = "pilotfish_"
FUNCTION_PREFIX = "pf_"
_READ_ONLY = "-- flags: no-writes"


def function_name(name: str) -> str:
    """The function of script ``name`` (``pf_match``)."""
    return FUNCTION_PREFIX + name


def read_only(name: str) -> bool:
    """Whether script ``name`` says in its header that it writes nothing (called with FCALL_RO)."""
    return any(line.strip() == _READ_ONLY for line in scripts.source(name).splitlines())


def _register(name: str) -> str:
    return wrapped(function_name(name), scripts.source(name), read_only=read_only(name))


def wrapped(function: str, source: str, *, read_only: bool = False) -> str:
    """``source``, a script reading ``KEYS`` and ``ARGV``, as the registration of ``function``.

    A script with a line ``-- per call:`` (:data:`taskqueues.store.scripts.PER_CALL`) is run in two parts: what is
    above the line once, when the library loads, and what is below it on every call (the callback's body). The
    load-time part makes the functions the calls share (a closure made per call costs a call about 1.5k
    instructions); it cannot call Redis, and no function it makes may keep one call's state for the next (the script
    sets every upvalue they use at the start of each call that uses them). The registration is then one ``do ...
    end`` block, so that scripts' load-time locals neither collide nor count together against Lua's 200 locals of a
    chunk. The prelude of constants (:func:`taskqueues.store.scripts.prelude`) is in the load-time part then: one
    upvalue each, not a local made per call."""
    flags = "{'no-writes'}" if read_only else "{}"
    head, marked, body = source.partition(scripts.PER_CALL)
    if not marked:
        body = source
    register = (
        f"redis.register_function{{function_name='{function}', flags={flags},\n"
        f"callback=function(KEYS, ARGV)\n{body}\nend}}\n"
    )
    return f"do\n{head}\n{register}end\n" if marked else register


@cache
def library_name() -> str:
    """``pilotfish_<hash>``: the hash of every function's registration, so any change makes a new name."""
    body = "".join(_register(name) for name in scripts.names())
    return LIBRARY_PREFIX + hashlib.sha1(body.encode()).hexdigest()[:12]


@cache
def code() -> str:
    """The library's code, as ``FUNCTION LOAD`` takes it."""
    return f"#!lua name={library_name()}\n" + "".join(_register(name) for name in scripts.names())


def not_found(exc: BaseException) -> bool:
    """Whether ``exc`` is the server's answer to an ``FCALL`` of a function it does not hold."""
    return isinstance(exc, redis.ResponseError) and "Function not found" in str(exc)


class Library:
    """This version of the library on the server of one connection pool (:meth:`of`): loaded at most once
    per process unless the server loses it."""

    def __init__(self, client: redis.Redis) -> None:
        self.where = client_url(client)
        user = client.connection_pool.connection_kwargs.get("username") or ""
        #: A pilot's client neither checks nor loads the library.
        self.loads = not user.startswith(access.pilot_user(""))
        self.checked = not self.loads

    @classmethod
    def of(cls, client: redis.Redis) -> Library:
        return _LIBRARIES.of(client)

    def ensure(self, client: redis.Redis) -> None:
        """Load this version unless the server holds it already (one round trip then, once per process)."""
        if not self.checked:
            self.load(client, only_if_missing=True)

    def load(self, client: redis.Redis, *, only_if_missing: bool = False) -> bool:
        """Make the server hold this version of the library and no other ``pilotfish_*`` one.

        False when the user may not list or load functions (a pilot): it loads nothing, and when the server
        holds no library the pilot's call says so (:meth:`missing`). With ``only_if_missing``, nothing is
        loaded when the server holds this version already."""
        if not self.loads:
            return False
        try:
            if cluster.is_slot_client(client):  # every primary, so a slot that moves finds it there
                for primary in cluster.primaries(client):
                    _load_on(primary, only_if_missing=only_if_missing)
            else:
                _load_on(client, only_if_missing=only_if_missing)
        except redis.exceptions.NoPermissionError:
            self.checked = True  # a pilot: the control plane loads the library
            return False
        self.checked = True
        return True

    def missing(self, function: str) -> StoreUnavailable:
        """The error of a call that found ``function`` missing and could not load it."""
        return StoreUnavailable(
            f"Redis at {self.where} holds no function {function} (library {library_name()}): "
            "the control plane loads it when it first runs a store operation"
        )


_LIBRARIES: PerPool[Library] = PerPool(Library)


def _load_on(client: redis.Redis, *, only_if_missing: bool) -> None:
    """:meth:`Library.load` on one server."""
    name = library_name()
    listed = client.function_list(library=LIBRARY_PREFIX + "*")
    held = [_text(dict(zip(entry[::2], entry[1::2], strict=False))[b"library_name"]) for entry in listed]
    if not (only_if_missing and held == [name]):
        pipe = client.pipeline(transaction=True)
        for old in held:
            if old != name:
                pipe.function_delete(old)
        pipe.function_load(code(), replace=True)
        pipe.execute()


class Function:
    """One function of the library, called like a redis-py ``Script``: ``fn(keys=[...], args=[...])``."""

    def __init__(self, client: redis.Redis, name: str, *, function: str = "") -> None:
        """Script ``name`` of ``taskqueues/lua``; or, named by ``function``, a function loaded apart (the
        benchmarks' floor and ceiling: ``scripts/bench_match.py``'s ``load_apart``)."""
        self.client = client
        self.library = Library.of(client)
        self.name = name
        self.function = function or function_name(name)
        self.command = "FCALL_RO" if not function and read_only(name) else "FCALL"

    def __call__(self, keys: Sequence[Any] = (), args: Sequence[Any] = (), client: redis.Redis | None = None) -> Any:
        """The function's reply; on ``client`` (a client of the same server) if given."""
        self.library.ensure(self.client)
        client = client or self.client
        try:
            return client.execute_command(self.command, self.function, len(keys), *keys, *args)  # type: ignore[no-untyped-call]
        except redis.ResponseError as exc:
            if not not_found(exc):
                raise
        self.reload()
        return client.execute_command(self.command, self.function, len(keys), *keys, *args)  # type: ignore[no-untyped-call]

    def reload(self) -> None:
        """Load the library after a call found this function missing, or say the caller cannot."""
        if not self.library.load(self.client):
            raise self.library.missing(self.function)


def register(client: redis.Redis) -> dict[str, Function]:
    """Every script of ``taskqueues/lua`` as a function of the library on ``client``'s server."""
    return {name: Function(client, name) for name in scripts.names()}
