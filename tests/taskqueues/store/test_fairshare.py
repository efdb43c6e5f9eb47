"""Owners, groups, shares and limits: identity through submission, the shares file, the match's order, and
what explain says (real Redis)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import redis
from click.testing import CliRunner

from matcher.cli.shares_command import shares as shares_command
from matcher.explain import explain, render_explanation
from matcher.submission import JobSpec, SubmissionError, Submitter
from matcher.workflow import parse_workflow
from matcher.workflow.model import WorkflowError
from taskqueues.catalog import Catalog
from taskqueues.errors import ConfigError
from taskqueues.store import Store
from taskqueues.store.fairshare import (
    Policy,
    job_account,
    parse_policy,
    read_policy,
)
from taskqueues.store.keys import Keys, account_of
from taskqueues.store.records import PilotOffer
from tests.support.catalogs import QA, TWO_SITES
from tests.support.clock import FakeClock
from tests.support.store import check_store

NOW = 1_000_000.0
VO = "fair-tests"


@pytest.fixture
def store(real_redis: redis.Redis) -> Store:
    return Store(real_redis, Keys(vo=VO), lease_seconds=600, clock=FakeClock(NOW))


@pytest.fixture
def submitter(store: Store) -> Submitter:
    return Submitter(store, Catalog.loads(TWO_SITES), vo=VO, clock=store.clock, capacity=lambda: 1e6)


def el9(name: str, ete: float = 100, **reqs: object) -> JobSpec:
    return JobSpec(name, "true", {"Platform": "EL9", **reqs}, ete=ete)


def test_a_request_carries_its_owner_and_group(submitter: Submitter, store: Store) -> None:
    sub = submitter.submit([el9("a"), el9("b")], name="r", owner="alice", group="prod")
    assert {k: store.request(sub.request)[k] for k in ("owner", "group")} == {"owner": "alice", "group": "prod"}
    job = store.job(sub.ids["a"])
    assert account_of(job.tq_id) == ("prod", "alice", "")
    other = submitter.submit([el9("a")], owner="bob", group="prod")
    assert store.job(other.ids["a"]).tq_id != job.tq_id, "another account is another task queue"
    plain = submitter.submit([el9("a")])
    assert store.request(plain.request)["group"] == "default" and store.request(plain.request)["owner"]


@pytest.mark.parametrize(
    ("owner", "group", "bad"), [("al ice", "prod", "'al ice'"), ("alice", "a.b", "'a.b'"), ("-x", "prod", "'-x'")]
)
def test_a_bad_owner_or_group_is_refused_by_name(
    submitter: Submitter, store: Store, owner: str, group: str, bad: str
) -> None:
    with pytest.raises(SubmissionError) as refused:
        submitter.submit([el9("a")], owner=owner, group=group)
    assert bad in str(refused.value) and "is not a name" in str(refused.value)
    assert store.requests() == {}, "nothing stored"


def test_a_workflow_file_names_its_owner_and_group() -> None:
    workflow = parse_workflow(
        {"name": "w", "owner": "carol", "group": "astro", "jobs": [{"name": "a", "command": "true"}]}
    )
    assert (workflow.owner, workflow.group) == ("carol", "astro")
    with pytest.raises(WorkflowError, match="group 'no/slash' is not a name"):
        parse_workflow({"name": "w", "group": "no/slash", "jobs": [{"name": "a", "command": "true"}]})


def test_a_shares_file_is_validated_key_by_key(tmp_path: Path) -> None:
    path = tmp_path / "shares.toml"
    path.write_text(
        'halflife = "1h"\n[groups.prod]\nshare = 50\nmax_cores = 100\n[groups.prod.sites]\n'
        '"A" = 20\n"A/ce/q" = 8\n[groups.prod.owners]\nalice = 2\n[groups.ana]\nshare = 30\n'
        "[types]\nreco = 5\n"
    )
    policy = read_policy(path)
    assert policy.halflife == 3600 and policy.shares == {"prod": 50, "ana": 30}
    assert policy.cores == {("prod", "*"): 100, ("prod", "A"): 20, ("prod", "A/ce/q"): 8}
    assert policy.owner_shares == {("prod", "alice"): 2} and policy.jobs == {"reco": 5}
    assert Policy.from_fields(policy.fields()) == policy
    for data, said in [
        ({"groups": {"prod": {"share": -1}}}, "groups.prod.share: wants a number above 0"),
        ({"groups": {"p.q": {}}}, "groups.p.q: group 'p.q' is not a name"),
        ({"groups": {"prod": {"sites": {"a b": 3}}}}, "'a b' is neither a site nor a queue"),
        ({"groups": {"prod": {"quota": 3}}}, "groups.prod.quota: unknown key"),
        ({"types": {"reco": 2.5}}, "types.reco: wants a whole number"),
        ({"halflife": "soon"}, "halflife:"),
        ({"share": 1}, "share: unknown key"),
    ]:
        with pytest.raises(ConfigError, match=said.replace(".", r"\.").replace("(", r"\(")):
            parse_policy(data, "f.toml")


def test_groups_are_served_by_share_and_limits_hold(submitter: Submitter, store: Store) -> None:
    flood = submitter.submit([el9(f"f{i}", ete=10) for i in range(40)], owner="prod1", group="prod", priority=1e6)
    late = submitter.submit([el9(f"a{i}", ete=10) for i in range(40)], owner="ana1", group="ana")
    store.shares.publish(Policy(shares={"prod": 3, "ana": 1}, cores={("ana", "A"): 8}))
    got = store.match(PilotOffer("p", QA, 16, 64000), max_jobs=16)
    by_group = [account_of(j.tq_id)[0] for j in got]
    # The flood is far more urgent (its priority), yet cores go 3:1 by share until ana's limit of 8 at site A.
    assert by_group.count("prod") == 12 and by_group.count("ana") == 4
    got += store.match(PilotOffer("p2", QA, 16, 64000), max_jobs=16)
    assert sum(account_of(j.tq_id)[0] == "ana" for j in got) == 8, "ana's limit of 8 cores at site A"
    e = explain(store, Catalog.loads(TWO_SITES), late.ids["a39"])
    assert "group ana runs 8 cores at site A, its limit there is 8" in "\n".join(e.fairness)
    store.heartbeat(
        "p3",
        {},
        {
            "queue": QA,
            "cores": 4,
            "mem": 8000,
            "tmp": 1000,
            "used_cpu": 0,
            "used_mem": 0,
            "used_tmp": 0,
            "time_left": 3600,
            "running": [],
            "draining": False,
        },
    )
    e = explain(store, Catalog.loads(TWO_SITES), late.ids["a39"])
    assert e.verdict.startswith("a running limit holds it: group ana runs 8 cores at site A, its limit there is 8")
    text = "\n".join(render_explanation(e, NOW))
    assert "owner ana1, group ana" in text and "vs a share of 25.0%" in text
    assert flood.ids and check_store(store) is None


def test_explain_names_the_groups_served_first(submitter: Submitter, store: Store) -> None:
    submitter.submit([el9(f"f{i}", ete=10) for i in range(8)], owner="p1", group="prod")
    late = submitter.submit([el9("a", ete=10)], owner="a1", group="ana", priority=1e6)
    store.shares.publish(Policy(shares={"prod": 1, "ana": 1}))
    store.client.hset(store.keys.fair, mapping={"u:ana": f"5000 {NOW}"})  # ana ran recently, prod did not
    e = explain(store, Catalog.loads(TWO_SITES), late.ids["a"])
    assert e.verdict.startswith(
        "its group's share: group ana used 100.0% against a share of 50.0%; groups served first: prod"
    )
    (got,) = store.match(PilotOffer("p", QA, 1, 64000))
    assert account_of(got.tq_id)[0] == "prod", "prod goes first although ana's job is far more urgent"


def test_the_shares_command_stores_shows_and_removes(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, redis_url: str
) -> None:
    monkeypatch.setenv("PILOTFISH_REDIS_URL", redis_url)
    monkeypatch.setenv("PILOTFISH_VO", VO)
    path = tmp_path / "s.toml"
    path.write_text("[groups.prod]\nshare = 2\nmax_cores = 4\n[groups.ana]\nshare = 1\n")
    runner = CliRunner()
    out = runner.invoke(shares_command, [str(path)])
    assert out.exit_code == 0 and "2 groups, 1 core limits" in out.output, out.output
    assert store.shares.policy() == read_policy(path)
    out = runner.invoke(shares_command, ["--json"])
    doc = json.loads(out.output)
    assert {g["group"]: round(g["share"], 3) for g in doc["groups"]} == {"prod": 0.667, "ana": 0.333}
    assert doc["limits"] == [{"group": "prod", "where": "*", "limit": 4, "running": 0}]
    out = runner.invoke(shares_command, ["--off"])
    assert out.exit_code == 0 and store.shares.policy() is None


def test_a_job_outside_a_task_queue_takes_its_account_from_its_request() -> None:
    assert job_account("", {"owner": "x", "group": "g"}) == ("g", "x")  # deferred: released later
    assert job_account("abc.g.o.reco", {"owner": "x", "group": "h"}) == ("g", "o")
    assert job_account("", {}) == ("default", "default")  # a request stored before owners existed


def test_a_shares_file_caps_the_catch_up() -> None:
    policy = parse_policy({"catchup": 1.2, "groups": {"prod": {"share": 1}}}, "f.toml")
    assert policy.catchup == 1.2 and Policy.from_fields(policy.fields()) == policy
    lo, hi = policy.clamp() or (0.0, 0.0)
    assert (hi + 1) / (lo + 1) == pytest.approx(1.2)  # no group runs more than 1.2 x another's cores per share
    assert Policy().clamp() is None and "catchup" not in Policy().fields()
    for bad in (0.5, -1, "fast"):
        with pytest.raises(ConfigError, match=r"f\.toml: catchup: wants a number"):
            parse_policy({"catchup": bad}, "f.toml")


@pytest.mark.parametrize("catchup", [None, 1.2])
def test_the_catch_up_cap_bounds_what_a_late_group_takes(
    submitter: Submitter, store: Store, catchup: float | None
) -> None:
    """Issue 29 part 5: prod has run 8 cores for ten half-lives (its decayed usage is 8 x tau), then ana
    arrives with none, equal shares, and a pilot of 16 cores matches. Without a cap ana takes all 16 (its
    E = R * tau stays below prod's 16 tau): twice prod's cores. With catchup = 1.2 no group runs more than
    1.2 x another's cores per share (one core of rounding): ana 12, prod 8 + 4."""
    policy = Policy(halflife=600.0, shares={"prod": 1, "ana": 1}, catchup=catchup)
    store.shares.publish(policy)
    submitter.submit([el9(f"f{i}", ete=10) for i in range(40)], owner="p", group="prod")
    first = store.match(PilotOffer("p0", QA, 8, 64000), max_jobs=8)
    assert {account_of(j.tq_id)[0] for j in first} == {"prod"}
    store.clock.now += 6000  # type: ignore[attr-defined]
    submitter.submit([el9(f"a{i}", ete=10) for i in range(40)], owner="a", group="ana")
    got = store.match(PilotOffer("p1", QA, 16, 64000), max_jobs=16)
    ana = sum(account_of(j.tq_id)[0] == "ana" for j in got)
    prod = 8 + len(got) - ana
    if catchup is None:
        assert (ana, prod) == (16, 8)
    else:
        assert ana <= catchup * prod + 1 and prod <= catchup * ana + 1 and (ana, prod) == (12, 12)
    check_store(store)
