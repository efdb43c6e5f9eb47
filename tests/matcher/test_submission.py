"""Submission chain, requests, pressure scores, deferred release and ETE learning, against a real Redis."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import redis

from matcher.job_release import release, sweep
from matcher.submission import JobSpec, SubmissionError, Submitter, specs_from_workflow, submit_workflow
from matcher.workflow import parse_workflow
from taskqueues.catalog import Catalog
from taskqueues.context import Context
from taskqueues.settings import Settings
from taskqueues.store import Store
from taskqueues.store.records import JobState, PilotOffer, RunResult
from tests.support.clock import FakeClock
from tests.support.keyspace import snapshot

pytestmark = pytest.mark.store(lease_seconds=30)

CATALOG = """
[sites.A]
Platform = "EL9"
[sites.A.ces.ce]
[sites.A.ces.ce.queues.q]
shapes = [{ name = "small", cpu = 4, mem = "8G" }, { name = "big", cpu = 16, mem = "64G" }]
[sites.B]
Platform = "EL8"
SoftwareTag = ["AppV1", "AppV2"]
[sites.B.ces.ce]
[sites.B.ces.ce.queues.q]
shapes = [{ name = "small", cpu = 4, mem = "8G" }]
"""
QA, QB = "A/ce/q", "B/ce/q"


@pytest.fixture
def submitter(store: Store, clock: FakeClock) -> Submitter:
    return Submitter(store, Catalog.loads(CATALOG), clock=clock)


def run(store: Store, queue: str, pilot: str = "p", **result: object) -> list[str]:
    """Match everything that fits now on ``queue`` and complete it; returns the completed ids in order."""
    done = []
    for job in store.match(PilotOffer(pilot, queue, 16, 64000), max_jobs=100):
        store.complete(job.id, job.attempt, pilot, RunResult(**result))  # type: ignore[arg-type]
        done.append(job.id)
    return done


def test_eligibility_follows_requirements(submitter: Submitter, store: Store) -> None:
    sub = submitter.submit(
        [
            JobSpec("a", "true", {"Platform": "EL8"}),
            JobSpec("b", "true", {"cpu": 8}),
            JobSpec("c", "true", {"SoftwareTag": ["AppV2", "AppV9"]}),
        ]
    )
    assert [j.id for j in store.match(PilotOffer("p", QA, 16, 64000), max_jobs=9)] == [sub.ids["b"]]
    assert sorted(j.id for j in store.match(PilotOffer("p", QB, 16, 64000), max_jobs=9)) == sorted(
        [sub.ids["a"], sub.ids["c"]]
    )


@pytest.mark.parametrize(
    ("jobs", "message"),
    [
        ([], "no job"),
        ([JobSpec("a", "true", {"Nope": "x"})], "Nope"),
        ([JobSpec("a", "true", {"cpu": 32})], "no shape holds it"),
        ([JobSpec("a", "true", {"mem": "-4G"})], "mem"),
        ([JobSpec("a", "true", deps=("b",))], "b"),
        ([JobSpec("a", "true", deps=("b",)), JobSpec("b", "true", deps=("a",))], "cycle"),
        ([JobSpec("a", "true"), JobSpec("a", "true")], "a"),
        ([JobSpec("a", "true", {"InstanceType": "big", "Platform": "EL8"})], "big"),
        ([JobSpec("a", "true", {"InstanceType": "small", "cpu": 8})], "cannot hold"),
    ],
)
def test_bad_requests_store_nothing(
    submitter: Submitter, real_redis: redis.Redis, jobs: list[JobSpec], message: str
) -> None:
    with pytest.raises(SubmissionError, match=message):
        submitter.submit([JobSpec("ok", "true"), *jobs] if jobs else [])
    assert real_redis.dbsize() == 0


def test_a_refusal_writes_nothing_even_for_values_the_store_would_choke_on(
    submitter: Submitter, real_redis: redis.Redis
) -> None:
    # Two chained estimates of 1e308 s made an infinite pressure: the store's script then failed after it
    # had written the task queue's definition, its pool and the id counter. Now refused before any write.
    submitter.submit([JobSpec("earlier", "true")])
    before = snapshot(real_redis)
    with pytest.raises(SubmissionError) as info:
        submitter.submit([JobSpec("a", "true", ete=1e308), JobSpec("b", "true", ete=1e308, deps=("a",))])
    assert str(info.value).startswith("request refused: job 'a', field 'ete': must be a number of seconds within 0..")
    assert snapshot(real_redis) == before


@pytest.mark.parametrize(
    ("spec", "field", "fragment"),
    [
        (JobSpec("a", "echo \x00"), "command", "holds a NUL character"),
        (JobSpec("a", "echo \ud800"), "command", "holds a lone surrogate"),
        (JobSpec("a", "echo " + "x" * 70_000), "command", "over the limit of 65536"),
        (JobSpec("a", "echo " + "é" * 40_000), "command", "80005 bytes long, over the limit of 65536"),
        (JobSpec("a", "true", key="in\ud800put"), "key", "holds a lone surrogate"),
        (JobSpec("a", "true", key="two\nlines"), "key", "control character '\\n'"),
        (JobSpec("a", "true", rule="a rule"), "rule", "a rule name is 1 to 200"),
        (JobSpec("a", "true", max_retries=-1), "max_retries", "within 0..100"),
        (JobSpec("a", "true", ete=float("nan")), "ete", "must be a number of seconds within"),
        (JobSpec("a", "true", deps="b"), "deps", "must be a list of job names"),  # type: ignore[arg-type]
        (JobSpec("a\tb", "true"), "name", "holds the control character '\\t'"),
        (JobSpec("", "true"), "name", "a job name must be a non-empty string"),
    ],
)
def test_what_the_store_or_a_shell_cannot_carry_is_refused(
    submitter: Submitter, real_redis: redis.Redis, spec: JobSpec, field: str, fragment: str
) -> None:
    with pytest.raises(SubmissionError) as info:
        submitter.submit([JobSpec("ok", "true"), spec])
    assert f"{f'job {spec.name!r}, ' if spec.name else ''}field {field!r}: " in str(info.value)
    assert fragment in str(info.value)
    assert real_redis.dbsize() == 0


@pytest.mark.parametrize(
    ("name", "priority", "fragment"),
    [
        ("two\nlines", 0.0, "field 'name': holds the control character"),
        ("ok", float("inf"), "field 'priority': must be a number of seconds within -1e+09..1e+09, not inf"),
    ],
)
def test_request_name_and_priority_are_checked(
    submitter: Submitter, real_redis: redis.Redis, name: str, priority: float, fragment: str
) -> None:
    with pytest.raises(SubmissionError, match=re.escape(fragment)):
        submitter.submit([JobSpec("a", "true")], name=name, priority=priority)
    assert real_redis.dbsize() == 0


@pytest.mark.parametrize(
    ("requirements", "field"),
    [
        ({"mem": "deps.a.out", "Platform": "EL7"}, "Platform"),  # known now, and no queue has it
        ({"MaxWidget": "deps.a.out"}, "MaxWidget"),  # deferred, but no queue offers the name
    ],
)
def test_deferred_jobs_are_checked_as_far_as_known(
    submitter: Submitter, real_redis: redis.Redis, requirements: dict[str, object], field: str
) -> None:
    workflow = parse_workflow(
        {
            "name": "w",
            "jobs": [
                {"name": "a", "command": "true"},
                {"name": "b", "command": "true", "deps": ["a"], "requirements": requirements},
            ],
        },
        "w.toml",
    )
    with pytest.raises(SubmissionError) as info:
        submit_workflow(submitter, workflow)
    assert str(info.value).startswith(f"w.toml: job 'b', field {field!r}: ")
    assert real_redis.dbsize() == 0


def test_instance_type_hint_makes_its_own_task_queue(submitter: Submitter, store: Store) -> None:
    sub = submitter.submit([JobSpec("h", "true", {"InstanceType": "big"}), JobSpec("n", "true")])
    hinted, plain = store.jobs([sub.ids["h"], sub.ids["n"]])
    assert hinted.tq_id != plain.tq_id
    assert store.pool(hinted.tq_id) == {QA}
    assert "InstanceType" in store.tq_definitions()[hinted.tq_id]


KINDS_CATALOG = """
[sites.S.ces.ce]
batch = "slurm"
[sites.S.ces.ce.queues.q]
shapes = [{ name = "small", cpu = 4, mem = "8G" }]
[sites.G.ces.ce]
batch = "sge"
[sites.G.ces.ce.queues.q]
shapes = [{ name = "small", cpu = 4, mem = "8G" }]
[sites.L.ces.ce]
[sites.L.ces.ce.queues.q]
shapes = [{ name = "small", cpu = 4, mem = "8G" }]
"""


def test_backend_options_restrict_a_job_to_the_queues_whose_backend_accepts_them(store: Store) -> None:
    submitter = Submitter(store, Catalog.loads(KINDS_CATALOG))
    sub = submitter.submit(
        [
            JobSpec("slurm", "true", {"BackendOptions": "-w  localhost --qos=high"}),
            JobSpec("slurm-again", "true", {"BackendOptions": "--qos=high -w localhost"}),
            JobSpec("same", "true", {"BackendOptions": "-w localhost --qos=high"}),
            JobSpec("prio", "true", {"BackendOptions": "-p -5"}),
            JobSpec("plain", "true"),
        ]
    )
    slurm, again, same, prio, plain = store.jobs(
        [sub.ids[n] for n in ("slurm", "slurm-again", "same", "prio", "plain")]
    )
    assert store.pool(plain.tq_id) == {"S/ce/q", "G/ce/q", "L/ce/q"}
    assert store.pool(slurm.tq_id) == {"S/ce/q"}  # -w is no Grid Engine option; local takes none
    assert store.pool(prio.tq_id) == {"G/ce/q"}  # -p -5: a priority for SGE; for Slurm -p lacks its partition
    assert slurm.tq_id == same.tq_id, "blanks do not make another task queue"
    assert again.tq_id != slurm.tq_id, "another order is another option string (later options win)"
    assert json.loads(store.tq_definitions()[slurm.tq_id])["BackendOptions"] == "-w localhost --qos=high"


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ("--bogus 1", "unknown option '--bogus'"),
        ("-c 4", "come from the job's requirements"),
        ("--mem 2G -p x", "come from the job's requirements"),
        ("-q 'open", "cannot split"),
        (["-p", "x"], "option string"),
    ],
)
def test_backend_options_no_queue_can_honour_are_refused(
    store: Store, real_redis: redis.Redis, options: object, message: str
) -> None:
    submitter = Submitter(store, Catalog.loads(KINDS_CATALOG))
    with pytest.raises(SubmissionError, match=message):
        submitter.submit([JobSpec("a", "true", {"BackendOptions": options})])
    assert real_redis.dbsize() == 0


def test_backend_options_on_a_local_only_catalog_are_refused(submitter: Submitter) -> None:
    with pytest.raises(SubmissionError, match="local backend takes no backend options"):
        submitter.submit([JobSpec("a", "true", {"BackendOptions": "-q high"})])


def test_pressure_puts_the_critical_path_first_across_requests(submitter: Submitter, store: Store) -> None:
    submitter.capacity = lambda: 1e6  # an idle giant: the ETA is the critical path alone
    # Request 1: a long chain (3 x 100 s); request 2: a short job submitted at the same time.
    chain = submitter.submit(
        [
            JobSpec("c1", "true", ete=100),
            JobSpec("c2", "true", deps=("c1",), ete=100),
            JobSpec("c3", "true", deps=("c2",), ete=100),
        ],
        name="chain",
    )
    short = submitter.submit([JobSpec("s", "true", ete=10), JobSpec("t", "true", ete=10)], name="short")
    assert chain.critical_path == 300 and chain.eta == 1_000_300
    c1, s = store.jobs([chain.ids["c1"], short.ids["s"]])
    assert c1.score == 1_000_000 and s.score == 1_000_000  # both should start now
    assert c1.pressure == 300
    # A prioritised request shifts its scores earlier.
    urgent = submitter.submit([JobSpec("u", "true", ete=10)], priority=50)
    assert store.job(urgent.ids["u"]).score == 999_950
    assert store.match(PilotOffer("p", QA, 1, 1000))[0].id == urgent.ids["u"]


def test_eta_counts_everyone_s_outstanding_work(submitter: Submitter, store: Store) -> None:
    submitter.capacity = lambda: 2.0
    chain = submitter.submit([JobSpec("c1", "true", ete=100), JobSpec("c2", "true", deps=("c1",), ete=100)])
    assert chain.eta == 1_000_200 and store.outstanding_work() == 200
    # 400 core-seconds of short jobs on 2 cores, behind 200 already waiting: 300 s before they can be done.
    fan = submitter.submit([JobSpec(f"f{i}", "true", ete=100) for i in range(4)])
    assert fan.eta == 1_000_300
    assert store.job(fan.ids["f0"]).score == 1_000_200 and store.job(chain.ids["c1"]).score == 1_000_000
    (first,) = store.match(PilotOffer("p", QA, 1, 1000))
    assert first.id == chain.ids["c1"]  # the critical path first, although the fan is as old
    store.complete(first.id, first.attempt, "p", RunResult(wall=100))
    assert store.outstanding_work() == 500
    store.cancel(fan.ids["f0"])
    assert store.outstanding_work() == 400


def test_eta_counts_what_a_join_behind_a_fan_needs(submitter: Submitter, store: Store) -> None:
    submitter.capacity = lambda: 2.0
    chain = submitter.submit(
        [
            JobSpec("c1", "true", ete=100),
            JobSpec("c2", "true", deps=("c1",), ete=100),
            JobSpec("c3", "true", deps=("c2",), ete=100),
        ]
    )
    assert chain.eta == 1_000_300
    # Four 100 s jobs, then a 450 s join. Critical path 550, load (300 + 850) / 2 = 575; but on 2 cores
    # the fan takes 200 s before the join can start: 650 s at least.
    fan = submitter.submit(
        [
            *(JobSpec(f"f{i}", "true", ete=100) for i in range(4)),
            JobSpec("join", "true", deps=tuple(f"f{i}" for i in range(4)), ete=450),
        ]
    )
    assert fan.critical_path == 550 and fan.eta == 1_000_650
    assert store.request(fan.request)["eta"] == 1_000_650
    # So its fan does not claim more urgency than the chain's second link (with the load's 575 it would
    # score 1_000_025 and run first).
    assert store.job(fan.ids["f0"]).score == 1_000_100 == store.job(chain.ids["c2"]).score


def test_dependency_release_is_atomic_with_completion(submitter: Submitter, store: Store) -> None:
    sub = submitter.submit([JobSpec("a", "true"), JobSpec("b", "true"), JobSpec("c", "true", deps=("a", "b"))])
    assert store.job(sub.ids["c"]).state is JobState.BLOCKED
    (a,) = [j for j in store.match(PilotOffer("p", QA, 1, 8000)) if True]
    assert store.complete(a.id, a.attempt, "p") == []
    (b,) = store.match(PilotOffer("p", QA, 1, 8000))
    assert store.complete(b.id, b.attempt, "p") == [sub.ids["c"]]
    assert store.job(sub.ids["c"]).state is JobState.WAITING


@pytest.mark.parametrize(
    ("requirements", "fragment"),
    [
        ({"mem": -0.5}, "field 'mem': must not be negative, got -0.5"),
        ({"wall": -0.1}, "field 'wall': must not be negative, got -0.1"),
        ({"tmp": float("inf")}, "field 'tmp': a size must be finite, got inf"),
        ({"mem": float("nan")}, "field 'mem': a size must be finite, got nan"),
        ({"cpu": "\u0664"}, "field 'cpu': cpu must be a whole number with the digits 0-9"),
        ({"wall": "\u0661\u0660m"}, "field 'wall': only the digits 0-9 are read in a size or duration"),
        ({"mem": "\u0664G"}, "field 'mem': only the digits 0-9 are read in a size or duration"),
        ({"mem": "--1"}, "field 'mem': malformed sign in '--1'"),
        ({"wall": "+-1"}, "field 'wall': malformed sign in '+-1'"),
    ],
)
def test_bad_amounts_are_refused_naming_job_and_field(
    submitter: Submitter, real_redis: redis.Redis, requirements: dict[str, object], fragment: str
) -> None:
    # Issue 32 part 8: each of these was read as a number (-0.5 as 0, Arabic-Indic digits as 4 and 600 s).
    with pytest.raises(SubmissionError) as info:
        submitter.submit([JobSpec("fine", "true"), JobSpec("bad", "true", requirements)], name="w")
    assert str(info.value).startswith(f"request refused: job 'bad', {fragment}"), str(info.value)
    assert real_redis.dbsize() == 0


def test_deferred_requirements_use_dependency_outputs(submitter: Submitter, store: Store) -> None:
    workflow = parse_workflow(
        {
            "name": "w",
            "jobs": [
                {"name": "size", "command": "true"},
                {
                    "name": "use",
                    "command": "echo {deps.size.mb}",
                    "deps": ["size"],
                    "requirements": {"mem": "2 * deps.size.mb"},
                },
            ],
        }
    )
    sub = submit_workflow(submitter, workflow)
    (first,) = store.match(PilotOffer("p", QA, 4, 8000))
    released = store.complete(first.id, first.attempt, "p", RunResult(outputs={"mb": 300}))
    assert released == [sub.ids["use"]] and store.job(sub.ids["use"]).state is JobState.RELEASING
    assert release(store, submitter.catalog, released) == {sub.ids["use"]: JobState.WAITING}
    (use,) = store.match(PilotOffer("p", QA, 4, 8000))
    assert use.mem == 600 and use.command == "echo 300"


def test_a_released_job_needs_its_evaluated_wall_from_a_pilot(submitter: Submitter, store: Store) -> None:
    workflow = parse_workflow(
        {
            "name": "w",
            "jobs": [
                {"name": "size", "command": "true"},
                {
                    "name": "use",
                    "command": "true",
                    "deps": ["size"],
                    "ete": 5,
                    "requirements": {"wall": "2 * deps.size.secs"},
                },
            ],
        }
    )
    sub = submit_workflow(submitter, workflow)
    (first,) = store.match(PilotOffer("p", QA, 4, 8000))
    released = store.complete(first.id, first.attempt, "p", RunResult(outputs={"secs": 300}))
    assert release(store, submitter.catalog, released) == {sub.ids["use"]: JobState.WAITING}
    assert store.match(PilotOffer("p", QA, 4, 8000, 0, 599)) == []  # 5 s estimated, but its wall is 600 s
    (use,) = store.match(PilotOffer("p", QA, 4, 8000, 0, 600))
    assert (use.id, use.requirements["wall"], use.ete) == (sub.ids["use"], 600, 5)


def test_the_safety_factor_setting_reaches_what_a_pilot_is_matched_on(redis_url: str, tmp_path: Path) -> None:
    assert Settings.load(env={"PILOTFISH_ETE_SAFETY_FACTOR": "3"}).ete_safety_factor == 3
    catalog = tmp_path / "catalog.toml"
    catalog.write_text(CATALOG)
    ctx = Context(Settings(redis_url=redis_url, catalog=str(catalog), ete_safety_factor=2.0))
    sub = Submitter.of(ctx).submit([JobSpec("j", "true", {"Platform": "EL9"}, ete=100)])
    assert ctx.store.match(PilotOffer("p", QA, 4, 8000, 0, 199)) == []
    assert [j.id for j in ctx.store.match(PilotOffer("p", QA, 4, 8000, 0, 200))] == [sub.ids["j"]]


def test_deferred_evaluation_failure_fails_the_job(submitter: Submitter, store: Store) -> None:
    workflow = parse_workflow(
        {
            "name": "w",
            "jobs": [
                {"name": "size", "command": "true"},
                {"name": "use", "command": "true", "deps": ["size"], "requirements": {"mem": "2 * deps.size.mb"}},
            ],
        }
    )
    sub = submit_workflow(submitter, workflow)
    (first,) = store.match(PilotOffer("p", QA, 4, 8000))
    store.complete(first.id, first.attempt, "p", RunResult(outputs={}))
    assert sweep(store, submitter.catalog) == {sub.ids["use"]: JobState.FAILED}
    assert "mb" in (store.job(sub.ids["use"]).reason or "")


def test_a_released_command_that_no_shell_can_run_fails_the_job(submitter: Submitter, store: Store) -> None:
    # A dependency's output is filled into the command at release: a NUL there was stored, and the pilot
    # then failed to start the payload. The job fails at release instead, saying why.
    workflow = parse_workflow(
        {
            "name": "w",
            "jobs": [{"name": "a", "command": "true"}, {"name": "b", "command": "echo {deps.a.word}", "deps": ["a"]}],
        }
    )
    sub = submit_workflow(submitter, workflow)
    (first,) = store.match(PilotOffer("p", QA, 4, 8000))
    store.complete(first.id, first.attempt, "p", RunResult(outputs={"word": "a\x00b"}))
    assert sweep(store, submitter.catalog) == {sub.ids["b"]: JobState.FAILED}
    assert (
        store.job(sub.ids["b"]).reason == "job 'b', field 'command': holds a NUL character at character 7"
    )  # in quotes


def test_run_times_are_learnt_from_successes_only(submitter: Submitter, store: Store) -> None:
    specs = [JobSpec(f"j{i}", "true", rule="r", key=f"k{i}") for i in range(3)]
    submitter.submit(specs)
    jobs = store.match(PilotOffer("p", QA, 4, 8000), max_jobs=3)
    store.complete(jobs[0].id, jobs[0].attempt, "p", RunResult(wall=10))
    store.complete(jobs[1].id, jobs[1].attempt, "p", RunResult(wall=20))
    store.fail(jobs[2].id, jobs[2].attempt, "p", RunResult(wall=1000, exit_code=1))
    last, rules = store.ete_stats(["k0", "k1", "k2"], ["r"])
    assert last == {"k0": 10, "k1": 20} and rules["r"].n == 2 and rules["r"].mean == 15
    # The next request uses them: key first, then the rule's mean, then the default.
    sub = submitter.submit(
        [JobSpec("a", "true", rule="r", key="k0"), JobSpec("b", "true", rule="r"), JobSpec("c", "true")]
    )
    assert [j.ete for j in store.jobs(list(sub.ids.values()))] == [10, 15, 60]


def test_learning_matches_the_reference_formula(store: Store, submitter: Submitter) -> None:
    from taskqueues.ete import RuleStats

    runs = [float(1 + (i * 7) % 13) for i in range(105)]
    submitter.submit([JobSpec(f"j{i}", "true", rule="r") for i in range(len(runs))])
    expected = RuleStats()
    for wall in runs:
        (job,) = store.match(PilotOffer("p", QA, 1, 100))
        store.complete(job.id, job.attempt, "p", RunResult(wall=wall))
        expected = expected.update(wall)
    stats = store.ete_stats([], ["r"])[1]["r"]
    assert stats.n == 105 and stats.mean == pytest.approx(expected.mean, rel=1e-12)


def test_request_record_and_jobs(submitter: Submitter, store: Store) -> None:
    sub = submitter.submit([JobSpec("a", "true"), JobSpec("b", "true", deps=("a",))], name="mine")
    rec = store.request(sub.request)
    assert rec["name"] == "mine" and rec["n"] == 2
    assert [j.name for j in store.request_jobs(sub.request)] == ["a", "b"]
    assert json.loads(json.dumps(rec))["eta"] == sub.eta


def test_examples_submit_against_the_example_catalog(store: Store, clock: FakeClock) -> None:
    from matcher.workflow import load_workflow

    submitter = Submitter(store, Catalog.load("examples/catalog.toml"), clock=clock)
    for name in ("small-dag", "mixed-batch", "montage"):
        workflow = load_workflow(f"examples/{name}.toml")
        sub = submitter.submit(specs_from_workflow(workflow), name=workflow.name)
        assert len(sub.ids) == len(workflow.jobs)


def test_the_max_retries_setting_is_a_jobs_unless_it_gives_its_own(redis_url: str, tmp_path: Path) -> None:
    """The setting has a reader: the submitter of a context, from its settings; a job's own value wins."""
    ctx = Context(Settings(redis_url=redis_url, state_dir=str(tmp_path), max_retries=1))
    sub = Submitter.of(ctx).submit([JobSpec("plain", "true"), JobSpec("own", "true", max_retries=5)], name="retries")
    assert ctx.store.job(sub.ids["plain"]).max_retries == 1
    assert ctx.store.job(sub.ids["own"]).max_retries == 5
    assert Submitter(ctx.store, ctx.catalog).max_retries == Settings().max_retries == 3
