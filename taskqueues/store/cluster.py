"""A community's store on a Redis Cluster: a client of the primary that owns the community's slot.

Every key of a community carries the hash tag ``{vo}`` (:mod:`taskqueues.store.keys`), so all of them live in
one slot, and each of the store's scripts, reads and transactions touches that slot only. A process of the
control plane or a pilot serves one community, so its client does not need a router: it is a plain redis-py
client whose connections go to the primary owning that slot (:class:`SlotPool`). Everything the store does
on one server (its functions, the pilots' connection of their own, subscriptions, ``WAIT``, ``INFO``) then
works unchanged, and addresses the right node. The URL names a few nodes of the cluster to start from::

    redis+cluster://[user:password@]host1:6379[,host2:6379,...][/0]
    rediss+cluster://...        (TLS)

(the database, if given, must be 0: a cluster has only that one). A slot moves between primaries (a
resharding, or a replica promoted by the cluster's own failover):

* ``MOVED`` names the new owner: the connection that read it records it, every connection of the pool
  reconnects there before its next command, and the command is sent again (it did not run). A connection
  held for ordered traffic whose replies are read later (a pilot's exchanges: :func:`hold`) moves only when
  its user says no reply is due (:func:`follow`); until then its scripts answer ``MOVED`` and are redone alone;
* ``ASK`` and ``TRYAGAIN`` come during a classic migration (``CLUSTER SETSLOT ... MIGRATING``), while the slot's
  keys are on their way: a script of several keys cannot run on either side then, so the call is sent again
  to the owner after a short wait until the slot's move is over (``MOVED``), at most :data:`PATIENCE` seconds;
  then the error is :class:`SlotMigrating`, a lost connection to the store's callers (they ride it out as
  an outage). An atomic migration (Valkey 9's ``CLUSTER MIGRATESLOTS``) shows only ``MOVED``.

The owner is learnt from the redirections themselves: a new client sends its first command to the first
node of the URL that answers, which runs it or says ``MOVED``, so a pilot's ACL user needs no ``CLUSTER``
command. What must reach every primary (loading the function library: :mod:`taskqueues.store.functions`)
asks the cluster for its primaries (:func:`primaries`, the control plane's right). Celery's Redis transport
has no Cluster support: the broker stays on a standalone or Sentinel-managed server (the ``broker_url``
setting).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import unquote, urlsplit

import redis
from redis.client import Pipeline
from redis.connection import Connection, ConnectionPool, SSLConnection
from redis.crc import key_slot
from redis.exceptions import AskError, ClusterDownError, MovedError, TryAgainError

from ..errors import ConfigError

SCHEMES = ("redis+cluster", "rediss+cluster")
DEFAULT_PORT = 6379
#: How long a call waits for a slot's migration to end (``ASK``, ``TRYAGAIN``, ``CLUSTERDOWN``) before it fails.
PATIENCE = 15.0
_FIRST_WAIT, _LONGEST_WAIT = 0.005, 0.25
#: A node's answers that the slot is elsewhere or on its way (``MOVED`` is an ``AskError``): the call did not run.
_REDIRECTIONS = (AskError, TryAgainError, ClusterDownError)

T = TypeVar("T")


def is_cluster(url: str) -> bool:
    return url.split("://", 1)[0] in SCHEMES


@dataclass(frozen=True)
class ClusterURL:
    """A parsed ``redis+cluster://`` URL: the nodes to start from, and the user's credentials."""

    nodes: tuple[tuple[str, int], ...]
    username: str | None
    password: str | None
    tls: bool

    @classmethod
    def parse(cls, url: str) -> ClusterURL:
        """The URL's parts; a bad form is a :class:`ConfigError` naming the URL (without its password)."""
        scheme, _, rest = url.partition("://")
        credentials, _, where = rest.rpartition("@")
        user, _, password = credentials.partition(":")
        shown = shown_url(url)
        if scheme not in SCHEMES:
            raise ConfigError(f"redis_url {shown!r}: a Cluster URL starts with redis+cluster:// or rediss+cluster://")
        hosts, _, path = where.partition("/")
        if "?" in where or "#" in where:
            raise ConfigError(f"redis_url {shown!r}: a Cluster URL takes no query (user and password go before '@')")
        if path.strip("/") not in ("", "0"):
            raise ConfigError(f"redis_url {shown!r}: a cluster has only database 0, not {path.strip('/')!r}")
        nodes: list[tuple[str, int]] = []
        for part in hosts.split(","):
            parts = urlsplit(f"//{part.strip()}")
            try:
                port = parts.port or DEFAULT_PORT
            except ValueError:
                raise ConfigError(f"redis_url {shown!r}: {part!r} has a bad port") from None
            if not parts.hostname:
                raise ConfigError(f"redis_url {shown!r}: {part!r} is not host:port (nodes are ','-separated)")
            nodes.append((parts.hostname, port))
        return cls(tuple(nodes), unquote(user) or None, unquote(password) or None, scheme == SCHEMES[1])


def shown_url(url: str) -> str:
    """``url`` without its password (the user name stays)."""
    scheme, _, rest = url.partition("://")
    credentials, at, where = rest.rpartition("@")
    return f"{scheme}://{credentials.partition(':')[0]}{at}{where}"


class SlotMigrating(redis.ConnectionError):
    """The community's slot kept answering ``ASK``, ``TRYAGAIN`` or ``CLUSTERDOWN`` for :data:`PATIENCE` seconds."""


class Topology:
    """Where one slot lives, as last learnt: its owner, else the URL's nodes in turn."""

    def __init__(self, url: ClusterURL, slot: int) -> None:
        self.url = url
        self.slot = slot
        self._owner: tuple[str, int] | None = None
        #: Bumped when the owner changes: a connection made before reconnects.
        self.generation = 0
        self._lock = threading.Lock()

    def candidates(self) -> list[tuple[str, int]]:
        """The owner if known, then every node of the URL."""
        owner = self._owner
        return ([owner] if owner else []) + [node for node in self.url.nodes if node != owner]

    def moved(self, host: str, port: int) -> None:
        """A node answered ``MOVED``: the slot is at ``host:port`` now."""
        with self._lock:
            if self._owner != (host, port):
                self._owner = (host, port)
                self.generation += 1

    def unreachable(self, address: tuple[str, int]) -> None:
        """The owner did not answer: start again from the URL's nodes."""
        with self._lock:
            if self._owner == address:
                self._owner = None
                self.generation += 1


class _SlotConnection(Connection):
    """A connection to the node owning its pool's slot (see the module doc)."""

    def __init__(self, **kwargs: Any) -> None:
        self.topology: Topology = kwargs.pop("topology")
        self.generation = -1
        #: Held by one user for ordered traffic with replies read later (a pilot's exchanges): not moved to
        #: the slot's new owner when it sends, only by :func:`follow` when no reply is due.
        self.held = False
        super().__init__(**kwargs)  # type: ignore[no-untyped-call]

    def connect(self) -> None:
        if self._sock is not None and self.generation != self.topology.generation:
            self.disconnect()
        if self._sock is not None:
            return
        generation = self.topology.generation
        last: Exception | None = None
        for address in self.topology.candidates():
            self.host, self.port = address
            self.generation = generation
            try:
                super().connect()  # type: ignore[no-untyped-call]
            except (redis.ConnectionError, redis.TimeoutError) as exc:
                last = exc
                self.topology.unreachable(address)
                continue
            return
        raise last or redis.ConnectionError("a Cluster URL with no node")

    def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        if self._sock is not None and self.generation != self.topology.generation and not self.held:
            self.connect()  # the slot moved since this connection was made: to its new owner first
        super().send_packed_command(command, check_health)  # type: ignore[no-untyped-call]

    def read_response(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return super().read_response(*args, **kwargs)
        except MovedError as exc:
            if exc.slot_id == self.topology.slot:
                self.topology.moved(exc.host, int(exc.port))
            raise


class _SlotSSLConnection(_SlotConnection, SSLConnection):
    """:class:`_SlotConnection` over TLS (``rediss+cluster://``)."""


class SlotPool(ConnectionPool):
    """The connections of one client to the owner of one slot."""

    def __init__(self, url: str, slot: int, **kwargs: Any) -> None:
        parsed = ClusterURL.parse(url)
        self.topology = Topology(parsed, slot)
        kwargs.setdefault("connection_class", _SlotSSLConnection if parsed.tls else _SlotConnection)
        super().__init__(username=parsed.username, password=parsed.password, topology=self.topology, **kwargs)


def hold(conn: Connection) -> None:
    """Mark a connection taken out of its pool for ordered traffic (see :attr:`_SlotConnection.held`)."""
    if isinstance(conn, _SlotConnection):
        conn.held = True


def follow(conn: Connection) -> None:
    """Move a held connection to its slot's owner if the slot moved since it connected (no reply may be due
    on it: they would be lost); it reconnects when next used."""
    if isinstance(conn, _SlotConnection) and conn.generation != conn.topology.generation:
        conn.disconnect()  # type: ignore[no-untyped-call]


def redirected(exc: BaseException) -> bool:
    """Whether ``exc`` is a node's answer that the slot is elsewhere or on its way (the call did not run)."""
    return isinstance(exc, _REDIRECTIONS)


def patiently(call: Callable[[], T], slot: int) -> T:
    """``call()``, sent again while the slot answers a redirection: at once after the first ``MOVED`` (the
    connection learnt the new owner, and the next send goes there), else after a wait growing to a quarter of
    a second; at most :data:`PATIENCE` seconds."""
    deadline = time.monotonic() + PATIENCE
    wait = _FIRST_WAIT
    followed = False
    while True:
        try:
            return call()
        except _REDIRECTIONS as exc:
            if isinstance(exc, MovedError) and not followed:
                followed = True
                continue
            if time.monotonic() + wait > deadline:
                raise SlotMigrating(f"slot {slot} is still migrating after {PATIENCE:g} s ({exc})") from None
            time.sleep(wait)
            wait = min(2 * wait, _LONGEST_WAIT)


class SlotClient(redis.Redis):
    """A client of the owner of one slot, whose commands and pipelines follow the slot (:func:`patiently`)."""

    connection_pool: SlotPool

    @property
    def slot(self) -> int:
        return self.connection_pool.topology.slot

    def execute_command(self, *args: Any, **options: Any) -> Any:
        return patiently(
            lambda: super(SlotClient, self).execute_command(*args, **options),  # type: ignore[no-untyped-call]
            self.slot,
        )

    def pipeline(self, transaction: bool = True, shard_hint: Any = None) -> Pipeline:
        return _SlotPipeline(self.connection_pool, self.response_callbacks, transaction, shard_hint)


class _SlotPipeline(Pipeline):
    """A pipeline sent again whole when the slot answered a redirection (none of it ran: one slot)."""

    def execute(self, raise_on_error: bool = True) -> list[Any]:
        stack = list(self.command_stack)
        slot = self.connection_pool.topology.slot  # type: ignore[attr-defined]

        def once() -> list[Any]:
            self.command_stack = list(stack)
            return super(_SlotPipeline, self).execute(raise_on_error)

        return patiently(once, slot)


def client(url: str, community: str | None, **kwargs: Any) -> SlotClient:
    """A client of the primary owning ``community``'s slot (a key or hash tag base: ``pf:{vo}``)."""
    if community is None:
        raise ConfigError(f"redis_url {shown_url(url)!r} names a Redis Cluster: a client of it serves one community")
    return SlotClient(connection_pool=SlotPool(url, key_slot(community.encode()), **kwargs))


def is_slot_client(client: redis.Redis) -> bool:
    return isinstance(client.connection_pool, SlotPool)


def slot_of(client: redis.Redis) -> int:
    pool = client.connection_pool
    assert isinstance(pool, SlotPool)
    return pool.topology.slot


def where(client: redis.Redis) -> str:
    """``client``'s cluster as errors name it: its URL's nodes, the user and the slot, no password."""
    pool = client.connection_pool
    assert isinstance(pool, SlotPool)
    parsed = pool.topology.url
    user = f"{parsed.username}@" if parsed.username else ""
    nodes = ",".join(f"{host}:{port}" for host, port in parsed.nodes)
    scheme = SCHEMES[1] if parsed.tls else SCHEMES[0]
    return f"{scheme}://{user}{nodes} (slot {pool.topology.slot})"


@dataclass(frozen=True)
class Node:
    """One node of a cluster as ``CLUSTER NODES`` lists it: ``primary`` when a primary not marked failing,
    ``slots`` the ranges it owns; ``migrating``: slot → the node id it is on its way to (a classic move
    under way, which only the node itself lists)."""

    host: str
    port: int
    id: str
    primary: bool
    slots: tuple[tuple[int, int], ...]
    migrating: tuple[tuple[int, str], ...] = ()

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def owns(self, slot: int) -> bool:
        return any(first <= slot <= last for first, last in self.slots)


def nodes(client: redis.Redis) -> list[Node]:
    """Every node of ``client``'s cluster (``CLUSTER NODES``: the control plane's right)."""
    listed = client.execute_command("CLUSTER", "NODES")  # type: ignore[no-untyped-call]
    found: list[Node] = []
    for line in (listed.decode() if isinstance(listed, bytes) else str(listed)).splitlines():
        fields = line.split()
        if len(fields) < 8:
            continue
        flags = fields[2].split(",")
        host, _, port = fields[1].split("@")[0].rpartition(":")
        slots = [part.partition("-")[::2] for part in fields[8:] if not part.startswith("[")]
        migrating = [part[1:-1].split("->-") for part in fields[8:] if "->-" in part]
        found.append(
            Node(
                host=host or "127.0.0.1",
                port=int(port),
                id=fields[0],
                primary="master" in flags and "fail" not in flags,
                slots=tuple((int(first), int(last or first)) for first, last in slots),
                migrating=tuple((int(slot), to) for slot, to in migrating),
            )
        )
    return found


def node_client(client: redis.Redis, node: Node) -> redis.Redis:
    """An administrative client of ``node`` alone, with ``client``'s credentials (and TLS)."""
    pool = client.connection_pool
    assert isinstance(pool, SlotPool)
    kwargs = {k: v for k, v in pool.connection_kwargs.items() if k != "topology"}
    connection_class = SSLConnection if pool.topology.url.tls else Connection
    return redis.Redis(
        connection_pool=ConnectionPool(connection_class=connection_class, host=node.host, port=node.port, **kwargs)
    )


def primaries(client: redis.Redis) -> Iterator[redis.Redis]:
    """A client of each primary of ``client``'s cluster, with its credentials (``CLUSTER NODES``: the
    control plane's right), closed when the next is yielded."""
    for primary in [node for node in nodes(client) if node.primary]:
        admin = node_client(client, primary)
        try:
            yield admin
        finally:
            admin.connection_pool.disconnect()
