"""``pilotfish logs``: real pilots ship their payloads' output to a real redis-server on every end path (success,
failure, kill, requeue), while they run (``--follow``), capped whatever a payload prints; the command shows
it escaped and says where the files are; bad input is named."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import redis

from matcher.logview import follow, output
from taskqueues.errors import NotFound, ValidationError
from taskqueues.store import Store, StreamTail
from taskqueues.store.records import JobState, NewJob
from tests.support.paths import ROOT
from tests.support.pilots import QUEUE, finish, pilot_env, running_pilot
from tests.support.polling import wait_until
from tests.support.store import job


@pytest.fixture
def store(redis_url: str) -> Store:
    return Store.from_url(redis_url, lease_seconds=60)


def cli(redis_url: str, *args: str) -> subprocess.CompletedProcess[bytes]:
    env = {**os.environ, "PILOTFISH_REDIS_URL": redis_url, "PILOTFISH_CATALOG": "", "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "matcher.cli", *args], cwd=ROOT, env=env, capture_output=True, timeout=60
    )


def run_all(store: Store, redis_url: str, tmp_path: Path, jobs: list[NewJob], *args: str) -> list[str]:
    ids = store.submit(jobs)
    with running_pilot(redis_url, tmp_path, "--idle-timeout", "1", *args, env=pilot_env(tmp_path, cores=2)) as proc:
        log = finish(proc, tmp_path, 90)
    assert all(store.job(i).state.final for i in ids), log
    return ids


def test_output_is_shipped_with_the_end_and_shown_escaped(store: Store, redis_url: str, tmp_path: Path) -> None:
    ok, bad = run_all(
        store,
        redis_url,
        tmp_path,
        [
            job(command="echo hello; printf 'caf\\303\\251 \\377\\376 \\033[2J\\r end\\n'; echo oops >&2"),
            job(command="echo partial; echo broken >&2; exit 3"),
        ],
    )
    assert store.job(ok).state is JobState.DONE and store.job(bad).state is JobState.FAILED
    shown = cli(redis_url, "logs", ok)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.decode() == "==> stdout <==\nhello\ncafé \\xff\\xfe \\x1b[2J\\x0d end\n==> stderr <==\noops\n"
    work = tmp_path / "pilot-work" / "logs"
    host = socket.gethostname().split(".")[0]
    note = shown.stderr.decode()
    assert f"job {ok} attempt 1 ran on pilot local-" in note
    assert f"stdout: full tail in {host}:{work}/{ok}.1.out" in note and (work / f"{ok}.1.out").exists()
    only = cli(redis_url, "logs", bad, "--stream", "stderr")
    assert (only.returncode, only.stdout) == (0, b"broken\n"), only.stderr
    assert cli(redis_url, "logs", bad, "--stream", "stdout").stdout == b"partial\n"


def test_every_attempt_keeps_its_own_tail(store: Store, redis_url: str, tmp_path: Path) -> None:
    """The first attempt is killed from outside (given back: requeued), the second succeeds."""
    [twice] = run_all(
        store,
        redis_url,
        tmp_path,
        [job(command='echo "attempt $PILOTFISH_ATTEMPT"; [ "$PILOTFISH_ATTEMPT" = 1 ] && kill -TERM $$; true')],
    )
    record = store.job(twice)
    assert (record.state, record.attempt) == (JobState.DONE, 2)
    assert cli(redis_url, "logs", twice, "--attempt", "1", "--stream", "stdout").stdout == b"attempt 1\n"
    assert cli(redis_url, "logs", twice, "--stream", "stdout").stdout == b"attempt 2\n"
    missing = cli(redis_url, "logs", twice, "--attempt", "3")
    assert missing.returncode == 1
    assert missing.stderr.decode() == f"pilotfish: error: job {twice} has no attempt 3: its attempts are 1 to 2\n"


def test_a_killed_payload_ships_what_it_printed(store: Store, redis_url: str, tmp_path: Path) -> None:
    [victim] = store.submit([job(command="echo before the kill; exec sleep 60")])
    with running_pilot(
        redis_url, tmp_path, "--idle-timeout", "1", "--kill-grace", "1", env=pilot_env(tmp_path, cores=1)
    ) as proc:
        wait_until(lambda: store.job(victim).state is JobState.RUNNING, timeout=60, what="the payload to run")
        store.kill(victim)
        wait_until(lambda: store.job(victim).state.final, timeout=60, what="the kill")
        finish(proc, tmp_path, 60)
    out = output(store, victim)
    assert out.text("out") == "before the kill\n" and out.log is not None and not out.log.live


def test_follow_prints_a_running_payload_until_it_ends(store: Store, redis_url: str, tmp_path: Path) -> None:
    flag = tmp_path / "go-on"
    [job_id] = store.submit(
        [job(command=f"echo first; while [ ! -e {flag} ]; do sleep 0.05; done; printf 'second\\n\\377'")]
    )
    seen: list[tuple[str, str]] = []
    with running_pilot(
        redis_url, tmp_path, "--idle-timeout", "1", "--log-interval", "0.1", env=pilot_env(tmp_path, cores=1)
    ) as proc:
        for stream, text in follow(store, job_id, poll=0.05):
            if not seen:
                assert not store.job(job_id).state.final, "the first line came before the payload ended"
                flag.touch()
            seen.append((stream, text))
        assert store.job(job_id).state is JobState.DONE
        finish(proc, tmp_path, 60)
    assert "".join(t for s, t in seen if s == "out") == "first\nsecond\n\\xff"
    followed = cli(redis_url, "logs", "--follow", job_id)  # an ended job: what was shipped, then the end
    assert (followed.returncode, followed.stdout) == (0, b"first\nsecond\n\\xff"), followed.stderr


def test_huge_binary_output_without_newlines_stays_capped(
    store: Store, redis_url: str, real_redis: redis.Redis, tmp_path: Path
) -> None:
    command = "head -c 3000000 /dev/urandom; head -c 2000000 /dev/zero | tr '\\0' x; head -c 4000000 /dev/urandom >&2"
    [noisy] = run_all(
        store, redis_url, tmp_path, [job(command=command)], "--output-cap", "4096", "--log-interval", "0.1"
    )
    assert store.job(noisy).state is JobState.DONE
    usage = real_redis.memory_usage(store.keys.log(noisy))
    assert usage is not None and usage < 4 * 4096, usage
    logs = store.logs.read(noisy)[1]
    assert logs.streams["out"] == StreamTail(b"x" * 4096, 5_000_000)
    assert logs.streams["err"].total == 4_000_000 and len(logs.streams["err"].data) == 4096
    shown = cli(redis_url, "logs", noisy)
    text = shown.stdout.decode()
    assert shown.returncode == 0 and all(c.isprintable() or c in "\n\t" for c in text), "a control byte got through"
    assert "the first 4995904 of its 5000000 bytes are only in that file" in shown.stderr.decode()


def test_bad_input_is_named(store: Store, redis_url: str) -> None:
    [waiting] = store.submit([job()])
    unknown = cli(redis_url, "logs", "424242")
    assert (unknown.returncode, unknown.stderr) == (1, b"pilotfish: error: no job '424242'\n")
    bad = cli(redis_url, "logs", waiting, "--stream", "stdin")
    assert bad.returncode == 1 and b"--stream 'stdin' is not a stream: use stdout or stderr" in bad.stderr
    never = cli(redis_url, "logs", waiting, "--attempt", "1")
    assert never.stderr.decode() == f"pilotfish: error: job {waiting} has not run yet (waiting): it has no attempt 1\n"
    quiet = cli(redis_url, "logs", waiting)
    assert (quiet.returncode, quiet.stdout) == (0, b"")
    assert quiet.stderr.decode() == f"job {waiting} has not run yet (waiting): no output\n"
    with pytest.raises(NotFound):
        output(store, "424242")
    with pytest.raises(ValidationError):
        output(store, waiting, 0)
    # The store refuses a shipment for a job that does not exist (no log hash without its record).
    assert (
        store.logs.ship("424242", 1, "p", cap=10, host="h", directory="/d", live=False, chunks={"out": (b"x", 1)})
        == "unknown job 424242"
    )
    assert not store.client.exists(store.keys.log("424242"))
    assert QUEUE
