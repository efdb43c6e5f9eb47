"""End to end through the CLI, as a user runs it: real Redis, real director, real pilots, real payloads."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import redis

from taskqueues.store.keys import Keys
from tests.support.paths import ROOT
from tests.support.polling import wait_until

pytestmark = pytest.mark.timeout(600)  # whole workflows through real pilots (each run bounded at 300 s)


def cli(
    args: list[str], env: dict[str, str], timeout: float = 120, check: bool = True
) -> subprocess.CompletedProcess[str]:
    try:
        done = subprocess.run(
            [sys.executable, "-m", "matcher.cli", *args],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired as exc:
        raise AssertionError(
            f"pilotfish {' '.join(args)} still running after {timeout} s:\n{exc.stdout!s}\n{exc.stderr!s}"
        ) from None
    if check and done.returncode != 0:
        raise AssertionError(f"pilotfish {' '.join(args)} exited {done.returncode}:\n{done.stdout}\n{done.stderr}")
    return done


@pytest.fixture
def env(tmp_path: Path, redis_url: str) -> dict[str, str]:
    return {
        **os.environ,
        "PILOTFISH_STATE_DIR": str(tmp_path / "state"),
        "PILOTFISH_REDIS_URL": redis_url,
        "PILOTFISH_PILOT_IDLE_TIMEOUT": "20",
        "PILOTFISH_PILOT_EVENTS": "false",
    }


@pytest.mark.parametrize(
    ("example", "catalog"), [("small-dag", ""), ("montage", ""), ("mixed-batch", "examples/catalog.toml")]
)
def test_each_example_runs_to_completion(env: dict[str, str], example: str, catalog: str) -> None:
    done = cli(["run", f"examples/{example}.toml"], {**env, "PILOTFISH_CATALOG": catalog}, timeout=300)
    summary = done.stdout.splitlines()
    assert any(line.startswith("request ") and "submitted" in line for line in summary)
    final = next(line for line in summary if line.startswith("request ") and " done" in line)
    assert "failed" not in final and "waiting" not in final, done.stdout
    assert any(line.startswith("makespan ") for line in summary)
    assert any(line.startswith("pilots ") and "utilisation" in line for line in summary)


def test_a_failing_job_makes_run_fail_with_its_reason(env: dict[str, str], tmp_path: Path) -> None:
    workflow = tmp_path / "w.toml"
    workflow.write_text(
        'name = "w"\n[[jobs]]\nname = "bad"\ncommand = "exit 3"\n'
        '[[jobs]]\nname = "after"\ncommand = "true"\ndeps = ["bad"]\n'
    )
    done = cli(["run", str(workflow)], env, check=False)
    assert done.returncode != 0
    assert "failed: bad: exit code 3" in done.stdout
    assert "dep-failed: after: dependency" in done.stdout


def test_kill_9_of_a_pilot_loses_nothing_and_runs_each_job_once(
    env: dict[str, str], tmp_path: Path, redis_url: str
) -> None:
    jobs = "".join(f'[[jobs]]\nname = "j{i}"\ncommand = "sleep 1.5"\n' for i in range(8))
    workflow = tmp_path / "w.toml"
    workflow.write_text(f'name = "killme"\n{jobs}')
    env = {**env, "PILOTFISH_LEASE_SECONDS": "3", "PILOTFISH_BACKOFF_SECONDS": "0.5"}
    # With a shares policy stored, so the match counts each account's running cores: the killed pilot's
    # leases must give theirs back when they expire, or its group would be charged for them forever.
    shares = tmp_path / "shares.toml"
    shares.write_text('halflife = "1s"\n[groups.default]\nshare = 1\nmax_cores = 4\n[groups.other]\nshare = 1\n')
    cli(["shares", str(shares)], env)
    killed: list[int] = []

    store = redis.Redis.from_url(redis_url)

    def killed_a_pilot() -> bool:
        # Kill the pilot that holds a running job (not just any pilot: one that has not matched yet would
        # lose nothing and prove nothing). A local pilot's batch id is in its environment.
        holders = {
            json.loads(raw).get("pl") for raw in store.hvals(Keys().jobs) if json.loads(raw).get("s") == "running"
        }
        for pid in subprocess.run(["pgrep", "-f", "matcher.cli pilot"], capture_output=True, text=True).stdout.split():
            try:
                environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            except OSError:
                continue
            batch = next((v.split(b"=", 1)[1].decode() for v in environ if v.startswith(b"PILOTFISH_BATCH_ID=")), None)
            if batch and any(h and h.split("@")[0] == batch for h in holders):
                os.kill(int(pid), signal.SIGKILL)
                killed.append(int(pid))
                return True
        return False

    # In a thread, while the run goes on; if it fails, the assertion on ``killed`` below says so.
    killer = threading.Thread(
        target=wait_until, args=(killed_a_pilot,), kwargs={"timeout": 60, "what": "a pilot holding a running job"}
    )
    killer.start()
    done = cli(["run", str(workflow)], env, timeout=180)
    killer.join()
    assert killed, "no pilot was seen to kill"
    assert "8 done" in done.stdout, done.stdout
    store = redis.Redis.from_url(redis_url)
    records = [json.loads(raw) for raw in store.hvals(Keys().jobs)]
    assert len(records) == 8 and all(r["s"] == "done" for r in records)
    assert any(r["a"] >= 2 for r in records), "the killed pilot's jobs should have been requeued"
    # Completion is recorded once per job: its last attempt completed; an orphaned payload of the killed
    # pilot may have finished too, but its report could not be accepted (the pilot died with it).
    assert int(store.zcard(Keys().donelog)) == 8
    running = {k.decode(): v.decode() for k, v in store.hgetall(Keys().fair).items() if k.startswith(b"r:")}
    assert running and set(running.values()) == {"0"}, f"running cores still charged after the run: {running}"


def test_unreachable_batch_systems_are_one_warning_line_naming_their_queues(
    env: dict[str, str], tmp_path: Path
) -> None:
    """The example catalog with Slurm's and Grid Engine's paths pointing nowhere: one line for the run, in the
    command's format (no time stamp, no logger name), naming every queue that now runs on this host."""
    catalog = (ROOT / "examples" / "catalog.toml").read_text()
    catalog = catalog.replace("/var/tmp/pilotfish-slurm/slurm.conf", str(tmp_path / "nowhere" / "slurm.conf"))
    catalog = catalog.replace("/var/lib/gridengine", str(tmp_path / "nowhere" / "gridengine"))
    (tmp_path / "catalog.toml").write_text(catalog)
    done = cli(
        ["run", "examples/small-dag.toml"], {**env, "PILOTFISH_CATALOG": str(tmp_path / "catalog.toml")}, timeout=300
    )
    warnings = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(warnings) == 1, done.stderr
    [line] = warnings
    assert line.startswith("pilotfish: warning: batch system not reachable"), line
    assert "slurm for LCG.CERN.ch/ce503.cern.ch/long, LCG.CERN.ch/ce503.cern.ch/short" in line, line
    assert "sge for LCG.RAL.uk/" in line, line


def test_explain_says_why_a_job_cannot_run(env: dict[str, str], tmp_path: Path) -> None:
    workflow = tmp_path / "w.toml"
    workflow.write_text('name = "stuck"\n[[jobs]]\nname = "big"\ncommand = "true"\nrequirements = { cpu = 1 }\n')
    submitted = json.loads(cli(["submit", "--json", str(workflow)], env).stdout)
    job = submitted["ids"]["big"]
    text = cli(["explain", job], env).stdout
    assert "waiting" in text and "local/localhost/local" in text
    assert "no live pilot" in text


def test_embedded_redis_keeps_its_data_across_down_and_up(tmp_path: Path) -> None:
    env = {**os.environ, "PILOTFISH_STATE_DIR": str(tmp_path / "state"), "PILOTFISH_FLOWER_PORT": "0"}
    env.pop("PILOTFISH_REDIS_URL", None)
    env["PILOTFISH_FLOWER_PORT"] = str(_free_port())
    env["PILOTFISH_API_PORT"] = str(_free_port())
    try:
        up = cli(["up"], env).stdout
        assert "redis: started" in up and "Flower: http://127.0.0.1:" in up
        workflow = tmp_path / "w.toml"
        workflow.write_text('name = "keep"\n[[jobs]]\nname = "a"\ncommand = "true"\n')
        request = json.loads(cli(["submit", "--json", str(workflow)], env).stdout)["request"]
        assert "redis: stopped" in cli(["down"], env).stdout
        assert "redis: started" in cli(["up"], env).stdout
        assert request in cli(["status", request], env).stdout
    finally:
        cli(["down"], env, check=False)


def _free_port() -> int:
    from taskqueues.store.redis_server import free_port

    return free_port()


def test_run_calls_the_workflows_webhook_once_when_it_ends(env: dict[str, str], tmp_path: Path) -> None:
    """Issue 28: ``pilotfish run`` has no worker; it calls the request's webhook itself when the request ends."""
    from matcher.notify import DELIVERY_HEADER
    from tests.matcher.test_notify import Hook

    hook = Hook()
    try:
        workflow = tmp_path / "w.toml"
        workflow.write_text(f'name = "w"\nnotify = "{hook.url}"\n[[jobs]]\nname = "bad"\ncommand = "exit 3"\n')
        done = cli(["run", str(workflow)], env, check=False)
        assert done.returncode != 0 and "failed: bad: exit code 3" in done.stdout
        [(body, headers, code)] = hook.calls
        assert code == 200 and body["event"] == "request.ended" and body["states"] == {"failed": 1}
        assert headers[DELIVERY_HEADER] == body["id"] and body["name"] == "w"
        status = cli(["status", body["id"]], env).stdout
        assert f"notify {hook.url}: sent " in status, status
    finally:
        hook.close()


def test_the_workers_notifier_calls_the_webhook_when_a_request_ends(tmp_path: Path) -> None:
    """Issue 28: in a deployment (``up``) the Celery worker's notifier thread sends the notification."""
    from tests.matcher.test_notify import Hook

    env = {**os.environ, "PILOTFISH_STATE_DIR": str(tmp_path / "state"), "PILOTFISH_FLOWER_PORT": str(_free_port())}
    env.pop("PILOTFISH_REDIS_URL", None)
    env["PILOTFISH_NOTIFY_BACKOFF"] = "1"  # the worker's: its second attempt a second after the first
    hook = Hook(codes=(500,))
    try:
        cli(["up"], env)
        workflow = tmp_path / "w.toml"
        workflow.write_text('name = "hooked"\n[[jobs]]\nname = "a"\ncommand = "true"\n')
        request = json.loads(cli(["submit", "--json", "--notify", hook.url, str(workflow)], env).stdout)["request"]
        wait_until(lambda: len(hook.answered()) == 1, timeout=120, interval=0.5, what="the webhook called")
        assert [code for _, _, code in hook.calls] == [500, 200]
        assert hook.answered()[0]["id"] == request and hook.answered()[0]["states"] == {"done": 1}
        assert "notify " in cli(["status", request], env).stdout
    finally:
        cli(["down"], env, check=False)
        hook.close()
