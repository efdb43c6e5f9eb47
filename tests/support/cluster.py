"""A real Redis Cluster for tests: three primaries (the project's server binary, ``cluster-enabled yes``) on
loopback ports of their own, their slots assigned and the nodes introduced as ``valkey-cli --cluster create``
does, and the two ways of moving a slot between primaries."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path

import redis

from taskqueues.store.redis_server import RedisServer, free_port
from tests.support.polling import wait_until

SLOTS = 16384


def _ok(check: redis.Redis) -> bool:
    try:
        return bool(check.execute_command("CLUSTER", "INFO").decode().find("cluster_state:ok") >= 0)
    except redis.RedisError:
        return False


@dataclass
class ClusterSet:
    directory: Path
    size: int = 3
    nodes: list[RedisServer] = field(default_factory=list)

    @property
    def url(self) -> str:
        """The store's Cluster URL (taskqueues.store.cluster) naming every node."""
        return "redis+cluster://" + ",".join(f"127.0.0.1:{node.port}" for node in self.nodes)

    def admin(self, i: int) -> redis.Redis:
        return redis.Redis(port=self.nodes[i].port)

    def start(self) -> ClusterSet:
        for i in range(self.size):
            folder = self.directory / f"node{i}"
            options = ("--cluster-enabled", "yes", "--cluster-config-file", str(folder / "nodes.conf"))
            # The bus port's own (the default, port + 10000, may be past 65535).
            options += ("--cluster-node-timeout", "5000", "--cluster-port", str(free_port()))
            self.nodes.append(RedisServer(folder, options=options).start())
        share = SLOTS // self.size
        for i in range(self.size):
            last = SLOTS - 1 if i == self.size - 1 else (i + 1) * share - 1
            self.admin(i).execute_command("CLUSTER", "ADDSLOTSRANGE", i * share, last)
        for node in self.nodes[1:]:
            bus = node.options[node.options.index("--cluster-port") + 1]
            self.admin(0).execute_command("CLUSTER", "MEET", "127.0.0.1", node.port, bus)
        for i in range(self.size):
            wait_until(lambda i=i: _ok(self.admin(i)), what=f"cluster_state:ok on node {i}")
        return self

    def node_id(self, i: int) -> str:
        return str(self.admin(i).execute_command("CLUSTER", "MYID").decode())

    def owner(self, slot: int) -> int:
        """The index of the node that owns ``slot`` as node 0 sees it."""
        for start, end, primary, *_ in self.admin(0).execute_command("CLUSTER", "SLOTS"):
            if start <= slot <= end:
                return next(i for i, node in enumerate(self.nodes) if node.port == primary[1])
        raise AssertionError(f"slot {slot} has no owner")

    def migrate_classic(self, slot: int, source: int, target: int) -> int:
        """Move ``slot`` as ``valkey-cli --cluster reshard`` does: IMPORTING/MIGRATING, MIGRATE of its keys (a
        batch at a time), SETSLOT NODE on both sides; returns the number of keys moved."""
        moved = self.start_classic(slot, source, target)
        self.end_classic(slot, source, target)
        return moved

    def start_classic(self, slot: int, source: int, target: int) -> int:
        """The first half of :meth:`migrate_classic`: the slot marked on both sides and its keys moved."""
        src, dst = self.admin(source), self.admin(target)
        dst.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", self.node_id(source))
        src.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", self.node_id(target))
        moved = 0
        while True:
            keys = src.execute_command("CLUSTER", "GETKEYSINSLOT", slot, 100)
            if not keys:
                return moved
            src.execute_command("MIGRATE", "127.0.0.1", self.nodes[target].port, "", 0, 5000, "KEYS", *keys)
            moved += len(keys)

    def end_classic(self, slot: int, source: int, target: int) -> None:
        """The second half of :meth:`migrate_classic`: the slot given to ``target`` on every node."""
        src, dst = self.admin(source), self.admin(target)
        dst_id = self.node_id(target)
        for side in (dst, src):
            side.execute_command("CLUSTER", "SETSLOT", slot, "NODE", dst_id)
        for i in range(self.size):
            if i not in (source, target):
                self.admin(i).execute_command("CLUSTER", "SETSLOT", slot, "NODE", dst_id)

    def migrate_atomic(self, slot: int, source: int, target: int) -> None:
        """Move ``slot`` with Valkey 9's atomic slot migration (``CLUSTER MIGRATESLOTS``), and wait for its end."""
        self.admin(source).execute_command(
            "CLUSTER", "MIGRATESLOTS", "SLOTSRANGE", slot, slot, "NODE", self.node_id(target)
        )
        wait_until(lambda: self.owner(slot) == target, what=f"slot {slot} owned by node {target}")

    def stop(self) -> None:
        for node in self.nodes:
            with suppress(ProcessLookupError):
                node.stop()


@contextmanager
def cluster_set(directory: Path, size: int = 3) -> Iterator[ClusterSet]:
    deployment = ClusterSet(directory, size)
    try:
        yield deployment.start()
    finally:
        deployment.stop()
