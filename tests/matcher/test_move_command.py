"""``pilotfish move VO --to HOST:PORT`` on a real 3-primary Redis Cluster (tests/support/cluster.py): it moves
a community with jobs (atomically where the server has CLUSTER MIGRATESLOTS, chunked with ``--classic``) and
says so in one line, the community's store works at the new owner (a submit and a match, through a new
client and through one made before the move), and every move that cannot be asked for is refused in one
line, exit status 1, no traceback, with nothing moved."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from click.testing import CliRunner, Result

from matcher.cli.main import main
from taskqueues.store import Store, cluster
from taskqueues.store.keys import Keys
from taskqueues.store.records import PilotOffer
from tests.support.cluster import ClusterSet, cluster_set
from tests.support.pilots import QUEUE
from tests.support.store import job

JOBS = 60


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterSet]:
    with cluster_set(tmp_path_factory.mktemp("cluster")) as made:
        yield made


def _env(url: str) -> dict[str, str]:
    # A Cluster store needs a broker apart (settings); `move` never connects to it.
    return {"PILOTFISH_REDIS_URL": url, "PILOTFISH_BROKER_URL": "redis://127.0.0.1:1/0"}


def _move(deployment: ClusterSet, *args: str, url: str | None = None) -> Result:
    return CliRunner().invoke(main, ["move", *args], env=_env(deployment.url if url is None else url))


def _community(deployment: ClusterSet, vo: str) -> Store:
    keys = Keys(vo=vo)
    store = Store(cluster.client(deployment.url, keys.base), keys)
    store.submit([job(queues=(QUEUE,), name=f"j{i}") for i in range(JOBS)])
    assert len(store.match(PilotOffer(pilot="p1", queue=QUEUE, cpu=4, mem=4000), max_jobs=3)) == 3
    return store


def _address(deployment: ClusterSet, i: int) -> str:
    return f"127.0.0.1:{deployment.nodes[i].port}"


@pytest.mark.parametrize(
    ("vo", "host", "options", "how"),
    [
        ("atom", "127.0.0.1", [], "atomically"),
        ("chunks", "localhost", ["--classic"], "by a chunked classic move"),  # a name for the node's address
    ],
)
def test_move_moves_a_community_and_its_store_works_at_the_new_owner(
    deployment: ClusterSet, vo: str, host: str, options: list[str], how: str
) -> None:
    store = _community(deployment, vo)
    slot = cluster.slot_of(store.client)
    source = deployment.owner(slot)
    target = (source + 1) % len(deployment.nodes)
    keys = int(deployment.admin(source).execute_command("CLUSTER", "COUNTKEYSINSLOT", slot))
    result = _move(deployment, vo, "--to", f"{host}:{deployment.nodes[target].port}", *options, "--chunk", "10")
    assert result.exit_code == 0, result.output
    [line] = result.output.splitlines()
    assert line.startswith(
        f"moved community {vo!r} (slot {slot}, {keys} keys) from {_address(deployment, source)} "
        f"to {_address(deployment, target)} {how}"
    ), line
    if options:
        assert "(2 big keys copied piecewise)" in line  # the jobs hash and the task queue, 10 elements a step
    assert line.endswith(" s")
    assert deployment.owner(slot) == target
    assert deployment.admin(source).execute_command("CLUSTER", "COUNTKEYSINSLOT", slot) == 0
    fresh = Store(cluster.client(deployment.url, store.keys.base), store.keys)
    for each in (fresh, store):  # a client made after the move, and one that learns it from MOVED
        assert len(each.match(PilotOffer(pilot="p2", queue=QUEUE, cpu=1, mem=1000))) == 1
    assert [int(i) for i in fresh.submit([job(queues=(QUEUE,))])] == [JOBS + 1]
    assert [int(i) for i in store.submit([job(queues=(QUEUE,))])] == [JOBS + 2]
    assert fresh.client.hlen(fresh.keys.jobs) == JOBS + 2


def _refusals(deployment: ClusterSet, owner: int, empty: int) -> list[tuple[list[str], str | None, str]]:
    """(arguments, store URL, what the one line says) of each refusal, for community 'stay' at ``owner`` and
    community 'nobody' (no keys) whose slot is at ``empty``."""
    other, elsewhere = ((i + 1) % len(deployment.nodes) for i in (owner, empty))
    primaries = ", ".join(sorted(_address(deployment, i) for i in range(len(deployment.nodes))))
    return [
        (
            ["stay", "--to", "127.0.0.1:1"],
            None,
            f"target 127.0.0.1:1 is not a primary of the cluster (its primaries: {primaries})",
        ),
        (["stay", "--to", "nowhere"], None, "target 'nowhere' is not HOST:PORT"),
        (["nobody", "--to", _address(deployment, elsewhere)], None, "community 'nobody' has no keys at "),
        (["stay", "--to", _address(deployment, owner)], None, f"{_address(deployment, owner)} already owns slot "),
        (
            ["stay", "--to", _address(deployment, other)],
            f"redis://127.0.0.1:{deployment.nodes[0].port}/0",
            f"redis_url 'redis://127.0.0.1:{deployment.nodes[0].port}/0' is not a Redis Cluster",
        ),
        (["stay", "--to", _address(deployment, other)], "", "the embedded server is not a Redis Cluster"),
        (["stay", "--to", _address(deployment, other)], "redis+cluster://127.0.0.1:1", "cannot reach Redis at "),
        (["st*y", "--to", _address(deployment, other)], None, "vo 'st*y' must be non-empty"),
    ]


def test_move_refuses_in_one_line_and_moves_nothing(deployment: ClusterSet) -> None:
    store = _community(deployment, "stay")
    slot = cluster.slot_of(store.client)
    owner = deployment.owner(slot)
    nobody = cluster.slot_of(cluster.client(deployment.url, Keys(vo="nobody").base))
    owner_of_nobody = deployment.owner(nobody)
    assert deployment.admin(owner_of_nobody).execute_command("CLUSTER", "COUNTKEYSINSLOT", nobody) == 0
    for args, url, says in _refusals(deployment, owner, owner_of_nobody):
        result = _move(deployment, *args, url=url)
        assert result.exit_code == 1, (args, result.output)
        [line] = result.output.splitlines()
        assert line.startswith(f"pilotfish: error: {says}"), (args, line)
        assert "Traceback" not in result.output
        assert deployment.owner(slot) == owner and deployment.owner(nobody) == owner_of_nobody
    assert store.client.hlen(store.keys.jobs) == JOBS
    assert len(store.match(PilotOffer(pilot="p2", queue=QUEUE, cpu=1, mem=1000))) == 1


def test_move_finishes_a_move_that_stopped_half_way_and_refuses_another_target(deployment: ClusterSet) -> None:
    store = _community(deployment, "halfway")
    slot = cluster.slot_of(store.client)
    source = deployment.owner(slot)
    target, third = ((source + i) % len(deployment.nodes) for i in (1, 2))
    src, dst = deployment.admin(source), deployment.admin(target)
    before = int(src.execute_command("CLUSTER", "COUNTKEYSINSLOT", slot))
    # A classic move stopped after its first key: the slot marked on both sides, the stats hash at the target.
    dst.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", deployment.node_id(source))
    src.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", deployment.node_id(target))
    src.execute_command("MIGRATE", "127.0.0.1", deployment.nodes[target].port, "", 0, 5000, "KEYS", store.keys.stats)
    refused = _move(deployment, "halfway", "--to", _address(deployment, third))
    assert refused.exit_code == 1
    assert refused.output == (
        f"pilotfish: error: slot {slot} of community 'halfway' is half-way to {_address(deployment, target)} (a "
        f"move that stopped): finish that one first (pilotfish move halfway --to {_address(deployment, target)})\n"
    )
    result = _move(deployment, "halfway", "--to", _address(deployment, target), "--classic", "--chunk", "10")
    assert result.exit_code == 0, result.output
    assert f"(slot {slot}, {before} keys) from {_address(deployment, source)}" in result.output
    assert deployment.owner(slot) == target
    assert store.client.hlen(store.keys.jobs) == JOBS
    assert len(store.match(PilotOffer(pilot="p2", queue=QUEUE, cpu=1, mem=1000))) == 1
