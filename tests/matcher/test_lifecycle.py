"""After submission (issue 28), with a real redis-server, real pilot subprocesses and the real ``pilotfish``
command: a failed job resubmitted runs again as attempt 2 and its dep-failed dependents after it; a held job
is never matched until released and blocks no pilot; an updated job runs with its new requirements; the
events of a job that lost its pilot, was requeued, held, released and resubmitted say so in order, with who."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from matcher.client import Client
from matcher.lifecycle import local_user
from taskqueues.errors import JobRefused, NoEligibleQueue
from taskqueues.store import JobState, Store
from tests.support.paths import ROOT
from tests.support.pilots import finish, pilot_env, running_pilot
from tests.support.polling import wait_until

#: The queue of the local default catalog (PILOTFISH_CATALOG=""), 2 cores.
LOCAL = "local/localhost/local"


def cli(redis_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PILOTFISH_REDIS_URL": redis_url, "PILOTFISH_CATALOG": "", "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "matcher.cli", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )


def drain(redis_url: str, tmp_path: Path, name: str = "pilot", *args: str) -> str:
    """Run one pilot of the local queue until it has found nothing to do for a second; its log."""
    env = pilot_env(tmp_path, cores=2)
    with running_pilot(redis_url, tmp_path, "--queue", LOCAL, "--idle-timeout", "1", *args, env=env, name=name) as p:
        return finish(p, tmp_path, 120, name)


def test_a_failed_job_resubmitted_runs_as_attempt_2_and_its_dependents_after_it(redis_url: str, tmp_path: Path) -> None:
    flag, timeline = tmp_path / "fixed", tmp_path / "timeline"
    client = Client(redis_url)
    request = client.submit(
        {
            "name": "again",
            "jobs": [
                {"name": "a", "command": f"echo try; test -e {flag} || exit 3; echo a >> {timeline}"},
                {"name": "b", "command": f"echo b >> {timeline}", "deps": ["a"]},
                {"name": "c", "command": f"echo c >> {timeline}", "deps": ["b"]},
            ],
        }
    )
    a, b, c = (request.ids[n] for n in "abc")
    drain(redis_url, tmp_path, "first")
    assert client.status(request).states == {"failed": 1, "dep-failed": 2}
    refused = cli(redis_url, "resubmit", b)
    assert refused.returncode == 1 and f"job {b} is dep-failed" in refused.stderr
    flag.touch()
    done = cli(redis_url, "resubmit", request.id, "--failed", "--reason", "input fixed")
    assert done.returncode == 0, done.stderr
    who = local_user()
    assert (
        done.stdout.strip()
        == f"request {request.id}: 1 jobs resubmitted by {who}, and 2 dep-failed dependents with them"
    )
    assert [j.state for j in client.store.jobs([a, b, c])] == [JobState.WAITING, JobState.BLOCKED, JobState.BLOCKED]
    drain(redis_url, tmp_path, "second")
    assert [j.state for j in client.store.jobs([a, b, c])] == [JobState.DONE] * 3
    assert client.store.job(a).attempt == 2
    assert timeline.read_text().split() == ["a", "b", "c"]
    assert client.logs(a, attempt=1).text("out") == "try\n"  # the earlier attempt's output is kept
    assert client.logs(a).text("out") == "try\n"
    running = cli(redis_url, "resubmit", a, c)
    assert running.returncode == 0, running.stderr  # ended jobs may run again, done ones too


def test_a_held_job_is_never_matched_until_released(redis_url: str, tmp_path: Path) -> None:
    client = Client(redis_url)
    request = client.submit(
        {"name": "hold", "jobs": [{"name": "x", "command": "true"}, {"name": "y", "command": "true"}]}
    )
    x, y = request.ids["x"], request.ids["y"]
    held = cli(redis_url, "hold", x, "--reason", "check the inputs", "--by", "alice")
    assert held.returncode == 0, held.stderr
    assert held.stdout.strip() == f"job {x}: held by alice (check the inputs): it is matched by no pilot until released"
    drain(redis_url, tmp_path, "first")  # y runs; the held x blocks nobody: the pilot goes idle and stops
    assert client.store.job(y).state is JobState.DONE and client.store.job(x).state is JobState.HELD
    listed = json.loads(cli(redis_url, "jobs", "--request", request.id, "--json").stdout)["jobs"]
    assert [(r["id"], r["state"], r["held_by"], r["reason"]) for r in listed] == [
        (x, "held", "alice", "check the inputs")
    ]
    assert client.status(request).states == {"done": 1, "held": 1}
    explained = cli(redis_url, "explain", x)
    assert "held by alice (check the inputs): no pilot matches it until it is released" in explained.stdout
    with pytest.raises(JobRefused, match=f"job {y} is done, not held"):
        client.release(y)
    assert client.release(request, by="bob") == f"request {request.id}: 1 released by bob"
    drain(redis_url, tmp_path, "second")
    assert client.store.job(x).state is JobState.DONE


def test_hold_refuses_a_running_job_with_the_reason(redis_url: str, tmp_path: Path) -> None:
    started = tmp_path / "started"
    client = Client(redis_url)
    request = client.submit({"name": "busy", "jobs": [{"name": "s", "command": f"touch {started}; sleep 30"}]})
    (s,) = request.ids.values()
    env = pilot_env(tmp_path, cores=2)
    with running_pilot(redis_url, tmp_path, "--queue", LOCAL, "--idle-timeout", "60", env=env):
        wait_until(started.exists, timeout=60, what="the payload to start")
        refused = cli(redis_url, "hold", s)
        assert refused.returncode == 1
        assert f"job {s} is running: only a job that is blocked, held, releasing, waiting is held" in refused.stderr
        assert client.store.job(s).state is JobState.RUNNING


def test_an_updated_job_runs_with_its_new_requirements(redis_url: str, tmp_path: Path) -> None:
    out = tmp_path / "cores"
    client = Client(redis_url)
    request = client.submit(
        {"name": "grow", "jobs": [{"name": "g", "command": f"cat $JOBFEATURES/allocated_CPU > {out}"}]}
    )
    (g,) = request.ids.values()
    before = client.store.job(g)
    with pytest.raises(NoEligibleQueue):
        client.update(g, requirements={"cpu": 64})
    refused = cli(redis_url, "update", g, "--requirement", "cpu=64")
    assert refused.returncode == 1 and len(refused.stderr.strip().splitlines()) == 1 and "cpu" in refused.stderr
    assert client.store.job(g) == before  # nothing changed
    done = cli(redis_url, "update", g, "--requirement", "cpu=2", "--wall", "10m", "--priority", "60")
    assert done.returncode == 0, done.stderr
    assert "cpu 1 -> 2" in done.stdout and "wall - -> 600" in done.stdout and "priority 0 -> 60" in done.stdout
    updated = client.store.job(g)
    assert updated.cpu == 2 and updated.requirements["wall"] == 600 and updated.score == before.score - 60
    assert updated.tq_id != before.tq_id and client.store.task_queue(before.tq_id) == []
    drain(redis_url, tmp_path)
    assert client.store.job(g).state is JobState.DONE and out.read_text().strip() == "2"


def test_events_show_a_lost_pilot_the_requeue_hold_release_and_resubmit_in_order(
    redis_url: str, tmp_path: Path
) -> None:
    started, pid, mark = tmp_path / "started", tmp_path / "pid", tmp_path / "mark"
    client = Client(redis_url)
    command = f"if [ -e {mark} ]; then exit 3; fi; echo $$ > {pid}; touch {started}; exec sleep 60"
    request = client.submit({"name": "lost", "jobs": [{"name": "l", "command": command}]})
    (job,) = request.ids.values()
    env = pilot_env(tmp_path, cores=2)
    store = Store.from_url(redis_url)
    with running_pilot(redis_url, tmp_path, "--queue", LOCAL, "--lease", "2", env=env, name="doomed") as pilot:
        wait_until(started.exists, timeout=60, what="the payload to start")
        wait_until(lambda: store.job(job).state is JobState.RUNNING, timeout=30, what="the pilot to report the start")
        pilot.send_signal(signal.SIGKILL)  # the pilot is lost with its lease
        pilot.wait()
    os.kill(int(pid.read_text()), signal.SIGKILL)
    mark.touch()
    wait_until(lambda: store.requeue_expired()[0], timeout=30, interval=0.5, what="the reaper to requeue the job")
    assert store.job(job).state is JobState.WAITING
    assert cli(redis_url, "hold", job, "--by", "alice", "--reason", "look at it").returncode == 0
    assert cli(redis_url, "release", job, "--by", "bob").returncode == 0
    drain(redis_url, tmp_path, "second")  # exits 3
    assert store.job(job).state is JobState.FAILED
    assert cli(redis_url, "resubmit", job, "--by", "carol").returncode == 0
    shown = cli(redis_url, "events", job)
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[0] == f"job {job}: 10 events", shown.stdout
    expected = [
        ("waiting", "by submit"),
        ("waiting -> matched", "by match"),
        ("matched -> running", "by pilot "),
        ("running -> waiting", "by reaper"),
        ("waiting -> held", "by alice"),
        ("held -> waiting", "by bob"),
        ("waiting -> matched", "by match"),
        ("matched -> running", "by pilot "),
        ("running -> failed", "by pilot "),
        ("failed -> waiting", "by carol"),
    ]
    for line, (change, by) in zip(lines[1:], expected, strict=True):
        assert f"  {change} " in line and by in line, line
    assert "exit 3" in lines[9] and "look at it" in lines[5]
    events = client.events(job)
    assert [(e.source, e.state) for e in events] == [
        (None, "waiting"),
        ("waiting", "matched"),
        ("matched", "running"),
        ("running", "waiting"),
        ("waiting", "held"),
        ("held", "waiting"),
        ("waiting", "matched"),
        ("matched", "running"),
        ("running", "failed"),
        ("failed", "waiting"),
    ]
    pilots = {e.pilot for e in events if e.pilot}
    assert len(pilots) == 2
    by = [e.by for e in events]
    assert by[0] == "submit" and by[3] == "reaper" and by[4:6] == ["alice", "bob"] and by[9] == "carol"
    assert by[2].startswith("pilot ") and by[8].startswith("pilot ") and by[2] != by[8]
    assert "lease expired on pilot" in (events[3].reason or "") and events[8].exit_code == 3
    assert events[4].reason == "look at it" and [e.attempt for e in events[6:9]] == [2, 2, 2]
    assert [e.time for e in events] == sorted(e.time for e in events)
