"""Moving a community between the primaries of a Redis Cluster without stalling the others.

Every key of a community carries its ``{vo}`` hash tag, so a community is one slot, and moving it is moving
that slot. Two ways, chosen by :func:`move_slot`:

* **Atomic** (Valkey 9's ``CLUSTER MIGRATESLOTS``): the source forks a snapshot of the slot and streams it,
  then its writes, to the target, which takes the slot over in one step. Neither node blocks for longer
  than the final hand-over, whatever the community's size, and the community itself keeps working until
  then (its clients see one ``MOVED``). Used whenever the source knows the command.
* **Chunked classic** (any Redis >= 7 / Valkey): the slot marked ``IMPORTING`` / ``MIGRATING`` as
  ``valkey-cli --cluster reshard`` does, but no key is moved by one ``MIGRATE`` longer than
  ``chunk`` elements: ``MIGRATE`` of a key serialises and restores it whole inside both nodes' event loops,
  so a 500,000-job hash blocked both nodes (and every community they serve) for seconds. Small keys go by
  ``MIGRATE`` first; then each big key is copied ``chunk`` elements at a time (``HSCAN``/``ZSCAN``/``SSCAN``/
  ``LRANGE`` on the source, ``ASKING`` + ``HSET``/``ZADD``/``SADD``/``RPUSH`` on the target), checked by its
  length, and ``UNLINK``-ed on the source (freed in the background). Each step costs both nodes about the
  same small time whatever the community's size. The big keys cannot change meanwhile: every script of the
  store declares the community's stats hash, which goes first (a script whose keys are split between the
  nodes, or missing on the source, is answered ``TRYAGAIN``, and the store's client waits:
  :mod:`taskqueues.store.cluster`); the store writes no big key outside a script. The moved community
  waits for the whole move (as with ``MIGRATE``); the others do not.

The clients given are administrative connections to single nodes (``CLUSTER SETSLOT``, ``MIGRATE``), not the
store's community clients. :func:`move_community` (``pilotfish move``) finds them from the store's Cluster URL:
the community's slot, its owner and the target primary named by its address.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import redis
from redis.exceptions import AskError

from ..errors import StoreError
from . import cluster
from .guard import guard
from .keys import Keys

#: Elements of one key moved in one step of a chunked classic move (also the largest key moved by MIGRATE).
CHUNK = 1000
#: Keys per MIGRATE of the small keys (as valkey-cli's reshard does, which sends ten at a time by default).
_KEYS_PER_MIGRATE = 100
_MIGRATE_TIMEOUT_MS = 60000


class MoveFailed(StoreError):
    """A slot move could not be completed; the message says where it stopped."""


class MoveRefused(StoreError):
    """A move that cannot be asked for (not a Cluster, no such primary, nothing to move...); nothing was done."""


@dataclass(frozen=True)
class Move:
    """What :func:`move_slot` did: ``how`` is ``atomic`` or ``chunked``; ``keys`` moved (``None`` when the
    server moved them itself), ``chunked_keys`` of them copied piecewise, in ``seconds``."""

    slot: int
    how: str
    keys: int | None
    chunked_keys: int
    seconds: float


def _cmd(node: redis.Redis, *args: Any) -> Any:
    return node.execute_command(*args)  # type: ignore[no-untyped-call]


def node_id(node: redis.Redis) -> str:
    return str(_text(_cmd(node, "CLUSTER", "MYID")))


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _address(node: redis.Redis) -> tuple[str, int]:
    kwargs = node.connection_pool.connection_kwargs
    return str(kwargs.get("host", "127.0.0.1")), int(kwargs.get("port", 6379))


def move_slot(
    source: redis.Redis,
    target: redis.Redis,
    slot: int,
    others: Sequence[redis.Redis] = (),
    *,
    atomic: bool | None = None,
    chunk: int = CHUNK,
    first: Sequence[bytes | str] = (),
    timeout: float = 600.0,
) -> Move:
    """Move ``slot`` from the primary ``source`` to the primary ``target`` (``others``: the cluster's other
    primaries, told the new owner in a classic move). ``atomic``: ``None`` uses ``CLUSTER MIGRATESLOTS``
    when the source knows it, ``False`` forces the chunked classic move. ``first``: keys a classic move
    sends before any other (the community's stats hash, which every script declares)."""
    if not 0 <= slot < 16384 or chunk < 1:
        raise MoveFailed(f"slot {slot} is not in 0..16383 or chunk {chunk} is not positive")
    start = time.monotonic()
    if atomic is not False:
        try:
            _cmd(source, "CLUSTER", "MIGRATESLOTS", "SLOTSRANGE", slot, slot, "NODE", node_id(target))
        except redis.ResponseError as exc:
            if atomic or "unknown subcommand" not in str(exc).lower():
                raise MoveFailed(f"CLUSTER MIGRATESLOTS of slot {slot} refused: {exc}") from None
        else:
            _await_atomic(source, target, slot, start + timeout)
            return Move(slot, "atomic", None, 0, time.monotonic() - start)
    keys, chunked = _move_classic(source, target, slot, others, chunk, [_key(k) for k in first])
    return Move(slot, "chunked", keys, chunked, time.monotonic() - start)


def _key(key: bytes | str) -> bytes:
    return key.encode() if isinstance(key, str) else key


def _await_atomic(source: redis.Redis, target: redis.Redis, slot: int, deadline: float) -> None:
    wanted = f"{slot}-{slot}"
    while True:
        jobs = [j for j in _cmd(source, "CLUSTER", "GETSLOTMIGRATIONS") if _text(j[b"slot_ranges"]) == wanted]
        state = _text(jobs[-1][b"state"]) if jobs else "success"
        if state == "success" and _owner(target, slot) == _address(target)[1]:
            return
        if state in ("failed", "cancelled"):
            message = _text(jobs[-1].get(b"message", b""))
            raise MoveFailed(f"CLUSTER MIGRATESLOTS of slot {slot} {state}: {message}")
        if time.monotonic() > deadline:
            raise MoveFailed(f"CLUSTER MIGRATESLOTS of slot {slot} still {state} at the deadline")
        time.sleep(0.02)


def _owner(node: redis.Redis, slot: int) -> int | None:
    """The port of the primary that owns ``slot``, as ``node`` sees it."""
    for start, end, primary, *_ in _cmd(node, "CLUSTER", "SLOTS"):
        if start <= slot <= end:
            return int(primary[1])
    return None


def _size(node: redis.Redis, key: bytes) -> tuple[str, int]:
    kind = _text(node.type(key))
    length = {"hash": node.hlen, "zset": node.zcard, "set": node.scard, "list": node.llen}.get(kind)
    return kind, int(length(key)) if length is not None else 0


def _move_classic(
    source: redis.Redis,
    target: redis.Redis,
    slot: int,
    others: Sequence[redis.Redis],
    chunk: int,
    first: list[bytes],
) -> tuple[int, int]:
    host, port = _address(target)
    first = [key for key in first if _here(source, key)]
    _cmd(target, "CLUSTER", "SETSLOT", slot, "IMPORTING", node_id(source))
    _cmd(source, "CLUSTER", "SETSLOT", slot, "MIGRATING", node_id(target))
    moved = chunked = 0
    if first:
        moved += _migrate(source, host, port, first)
    while True:
        keys: list[bytes] = _cmd(source, "CLUSTER", "GETKEYSINSLOT", slot, 10 * _KEYS_PER_MIGRATE)
        sizes = {k: _size(source, k)[1] for k in keys}
        small = [k for k in keys if sizes[k] <= chunk]
        big = [k for k in keys if sizes[k] > chunk]
        for i in range(0, len(small), _KEYS_PER_MIGRATE):
            moved += _migrate(source, host, port, small[i : i + _KEYS_PER_MIGRATE])
        for key in big:
            _copy(source, target, key, chunk)
            moved, chunked = moved + 1, chunked + 1
        if not keys:
            break
    target_id = node_id(target)
    for node in (target, source, *others):
        _cmd(node, "CLUSTER", "SETSLOT", slot, "NODE", target_id)
    return moved, chunked


def _here(source: redis.Redis, key: bytes) -> bool:
    """Whether ``key`` is on the source; once its slot is ``MIGRATING`` (a move that stopped half-way, taken
    up again), a key already gone answers ``ASK``."""
    try:
        return bool(source.exists(key))
    except AskError:
        return False


def _migrate(source: redis.Redis, host: str, port: int, keys: list[bytes]) -> int:
    auth: list[Any] = []
    kwargs = source.connection_pool.connection_kwargs
    if kwargs.get("password"):
        auth = ["AUTH2", kwargs.get("username") or "default", kwargs["password"]]
    _cmd(source, "MIGRATE", host, port, "", 0, _MIGRATE_TIMEOUT_MS, *auth, "KEYS", *keys)
    return len(keys)


def _copy(source: redis.Redis, target: redis.Redis, key: bytes, chunk: int) -> None:
    """Copy one big key to the target ``chunk`` elements at a time, check it, and unlink it on the source."""
    kind, length = _size(source, key)
    _asking(target, ("DEL", key))
    if kind == "hash":
        _scan(source, target, key, "HSCAN", "HSET", chunk, pairs=lambda items: _flat(items.items()))
    elif kind == "zset":
        _scan(source, target, key, "ZSCAN", "ZADD", chunk, pairs=lambda items: _flat((s, m) for m, s in items))
    elif kind == "set":
        _scan(source, target, key, "SSCAN", "SADD", chunk, pairs=list)
    elif kind == "list":
        for i in range(0, length, chunk):
            _asking(target, ("RPUSH", key, *source.lrange(key, i, i + chunk - 1)))
    else:
        raise MoveFailed(f"key {key!r} of type {kind} is too big to move by MIGRATE and has no chunked copy")
    copied = int(_asking(target, (_LENGTH[kind], key)))
    if copied != length:
        raise MoveFailed(f"key {key!r} changed while it was copied ({length} elements, {copied} copied)")
    ttl = int(source.pttl(key))
    if ttl > 0:
        _asking(target, ("PEXPIRE", key, ttl))
    source.unlink(key)


_LENGTH = {"hash": "HLEN", "zset": "ZCARD", "set": "SCARD", "list": "LLEN"}


def _flat(items: Any) -> list[Any]:
    return [x for item in items for x in item]


def _scan(source: redis.Redis, target: redis.Redis, key: bytes, scan: str, add: str, chunk: int, pairs: Any) -> None:
    method = {"HSCAN": source.hscan, "ZSCAN": source.zscan, "SSCAN": source.sscan}[scan]
    cursor = 0
    while True:
        cursor, items = method(key, cursor, count=chunk)  # type: ignore[operator]
        if items:
            _asking(target, (add, key, *pairs(items)))
        if cursor == 0:
            return


def _asking(target: redis.Redis, command: tuple[Any, ...]) -> Any:
    """``command`` on the target for a slot it imports (``ASKING`` holds for the next command only)."""
    pipe = target.pipeline(transaction=False)
    pipe.execute_command("ASKING")  # type: ignore[no-untyped-call]
    pipe.execute_command(*command)  # type: ignore[no-untyped-call]
    return pipe.execute()[1]


@dataclass(frozen=True)
class CommunityMove:
    """What :func:`move_community` did: ``community``'s ``slot`` went from ``source`` to ``target``
    (``host:port``); ``keys``: the keys of the slot now at the target."""

    community: str
    slot: int
    source: str
    target: str
    keys: int
    move: Move

    def __str__(self) -> str:
        how = (
            "atomically (CLUSTER MIGRATESLOTS)"
            if self.move.how == "atomic"
            else f"by a chunked classic move ({self.move.chunked_keys} big keys copied piecewise)"
        )
        return (
            f"moved community {self.community!r} (slot {self.slot}, {self.keys} keys) from {self.source} to "
            f"{self.target} {how} in {self.move.seconds:.2f} s"
        )


def address(text: str) -> tuple[str, int]:
    """``host:port`` (``[v6]:port``) as a pair; a bad form is a :class:`MoveRefused` naming it."""
    host, _, port = text.strip().rpartition(":")
    host = host.removeprefix("[").removesuffix("]")
    if not host or not port.isascii() or not port.isdigit() or not 0 < int(port) < 65536:
        raise MoveRefused(f"target {text!r} is not HOST:PORT (the address of a primary of the cluster)")
    return host, int(port)


def _same_host(a: str, b: str) -> bool:
    if a == b:
        return True
    try:
        return bool({i[4][0] for i in socket.getaddrinfo(a, None)} & {i[4][0] for i in socket.getaddrinfo(b, None)})
    except OSError:
        return False


def _under_way(source: redis.Redis, source_id: str, slot: int) -> str | None:
    """The node id ``slot`` is migrating to from ``source`` (a classic move that stopped half-way), if any."""
    for node in cluster.nodes(source):
        if node.id == source_id:
            return next((to for moving, to in node.migrating if moving == slot), None)
    return None


def move_community(
    url: str, keys: Keys, target: str, *, atomic: bool | None = None, chunk: int = CHUNK
) -> CommunityMove:
    """Move ``keys``' community (its slot: the keyslot of its ``{vo}`` tag) on the Redis Cluster of ``url`` to
    the primary at ``target`` (``host:port``), by :func:`move_slot` (``atomic`` and ``chunk`` as there, its
    stats hash first). Refused, with nothing done, unless ``url`` names a Cluster, ``target`` one of its
    primaries that does not own the slot already, and the community has keys."""
    with guard(cluster.shown_url(url) if url else "the embedded server", f"moving community {keys.vo!r}"):
        return _move_community(url, keys, target, atomic=atomic, chunk=chunk)


def _move_community(url: str, keys: Keys, target: str, *, atomic: bool | None, chunk: int) -> CommunityMove:
    if not cluster.is_cluster(url):
        shown = f"redis_url {cluster.shown_url(url)!r}" if url else "the embedded server"
        raise MoveRefused(
            f"{shown} is not a Redis Cluster (redis+cluster://...): a community moves between its primaries"
        )
    host, port = address(target)
    client = cluster.client(url, keys.base)
    admins: list[redis.Redis] = []
    try:
        slot = cluster.slot_of(client)
        primaries = [node for node in cluster.nodes(client) if node.primary]
        named = [node for node in primaries if node.port == port and _same_host(node.host, host)]
        if not named:
            listed = ", ".join(sorted(node.address for node in primaries))
            raise MoveRefused(f"target {target} is not a primary of the cluster (its primaries: {listed})")
        owners = [node for node in primaries if node.owns(slot)]
        if not owners:
            raise MoveRefused(f"slot {slot} of community {keys.vo!r} has no primary: is a move of it under way?")
        source, goal = owners[0], named[0]
        if goal.id == source.id:
            raise MoveRefused(f"{goal.address} already owns slot {slot} of community {keys.vo!r}: nothing to move")
        admins = [cluster.node_client(client, node) for node in primaries]
        by_id = {node.id: admin for node, admin in zip(primaries, admins, strict=True)}
        under_way = _under_way(by_id[source.id], source.id, slot)
        if under_way is not None and under_way != goal.id:
            going = next((node.address for node in primaries if node.id == under_way), under_way)
            raise MoveRefused(
                f"slot {slot} of community {keys.vo!r} is half-way to {going} (a move that stopped): "
                f"finish that one first (pilotfish move {keys.vo} --to {going})"
            )
        if under_way is None and not by_id[source.id].exists(keys.stats, keys.seq, keys.jobs, keys.requests):
            raise MoveRefused(
                f"community {keys.vo!r} has no keys at {source.address} (slot {slot}, prefix {keys.prefix!r}): "
                "nothing to move"
            )
        others = [admin for node_id, admin in by_id.items() if node_id not in (source.id, goal.id)]
        move = move_slot(by_id[source.id], by_id[goal.id], slot, others, atomic=atomic, chunk=chunk, first=[keys.stats])
        held = int(_cmd(by_id[goal.id], "CLUSTER", "COUNTKEYSINSLOT", slot))
        return CommunityMove(keys.vo, slot, source.address, goal.address, held, move)
    finally:
        for admin in admins:
            admin.connection_pool.disconnect()
        client.connection_pool.disconnect()
