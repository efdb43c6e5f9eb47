"""The periodic-task lock against a real redis-server, with real competing processes."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
import redis

from taskqueues.store import Store
from taskqueues.store.keys import Keys
from taskqueues.store.lock import Lock, LockError
from tests.support.polling import wait_until

# A worker process: tries the lock ROUNDS times; when it holds it, it logs enter/leave with a pause in
# between (long enough for the others to try meanwhile) and counts its skips.
WORKER = textwrap.dedent("""
    import sys, time, redis
    from taskqueues.store import Store
    url, me, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
    client = redis.Redis.from_url(url)
    client.incr("ready")
    while client.get("go") is None:
        time.sleep(0.001)
    for _ in range(rounds):
        with Store(client).control.locked("beat", ttl=5) as got:
            if got:
                client.rpush("log", f"enter {me} {time.time()!r}")
                time.sleep(0.01)
                client.rpush("log", f"leave {me} {time.time()!r}")
            else:
                client.incr(f"skipped:{me}")
        time.sleep(0.002)
""")


def test_only_one_process_holds_the_lock_at_a_time(redis_url: str, real_redis: redis.Redis) -> None:
    procs = [subprocess.Popen([sys.executable, "-c", WORKER, redis_url, str(i), "30"]) for i in range(4)]
    wait_until(lambda: int(real_redis.get("ready") or 0) == 4, what="the four workers waiting for the signal")
    real_redis.set("go", "1")
    for proc in procs:
        assert proc.wait(timeout=60) == 0
    log = [entry.decode().split() for entry in real_redis.lrange("log", 0, -1)]
    # Strictly alternating enter/leave of the same process: no two holders overlap.
    assert log, "somebody must have got the lock"
    for i in range(0, len(log), 2):
        (kind_in, who_in, _), (kind_out, who_out, _) = log[i], log[i + 1]
        assert (kind_in, kind_out, who_in) == ("enter", "leave", who_out)
    skipped = sum(int(real_redis.get(f"skipped:{i}") or 0) for i in range(4))
    assert skipped > 0, "with four processes competing, some runs must have been skipped"
    assert len(log) // 2 + skipped == 4 * 30
    assert real_redis.exists(Keys().lock("beat")) == 0, "every holder released it"


def test_a_crashed_holder_blocks_others_only_until_the_ttl(redis_url: str, real_redis: redis.Redis) -> None:
    # A real process takes the lock and dies without releasing it (a ttl that outlives its exit on a busy machine).
    code = (
        "import sys, redis; from taskqueues.store.keys import Keys; from taskqueues.store.lock import Lock; "
        "sys.exit(0 if Lock(redis.Redis.from_url(sys.argv[1]), Keys().lock('beat'), 3).acquire() else 3)"
    )
    assert subprocess.run([sys.executable, "-c", code, redis_url], timeout=30).returncode == 0
    with Store(real_redis).control.locked("beat", ttl=5) as got:
        assert not got
    wait_until(lambda: not real_redis.exists(Keys().lock("beat")), what="the dead holder's lock to expire")
    with Store(real_redis).control.locked("beat", ttl=5) as got:
        assert got


def test_an_expired_holder_never_releases_the_next_holders_lock(real_redis: redis.Redis) -> None:
    key = Keys().lock("beat")
    first = Lock(real_redis, key, 0.1)
    assert first.acquire()
    wait_until(lambda: not real_redis.exists(key), interval=0.01, what="the first holder's lock to expire")
    second = Lock(real_redis, key, 5)
    assert second.acquire()
    assert first.release() is False
    assert real_redis.get(key) == second.token.encode()
    assert first.held is False
    with pytest.raises(LockError, match="does not hold"):
        first.renew()
    assert second.release() is True
    assert real_redis.exists(key) == 0


def test_renew_extends_only_a_lock_still_held(real_redis: redis.Redis) -> None:
    key = Keys().lock("long")
    lock = Lock(real_redis, key, 0.2)
    assert lock.acquire()
    assert lock.renew(10)
    assert real_redis.pttl(key) > 5000
    real_redis.set(key, "someone else")  # as if ours had expired and been taken
    assert lock.renew() is False
    assert real_redis.get(key) == b"someone else"


@pytest.mark.parametrize("ttl", [0, -1, float("nan")])
def test_bad_ttl_is_refused(real_redis: redis.Redis, ttl: float) -> None:
    with pytest.raises(LockError, match="time to live"):
        Lock(real_redis, Keys().lock("x"), ttl)


def test_locked_releases_when_the_block_raises(real_redis: redis.Redis) -> None:
    with pytest.raises(RuntimeError), Store(real_redis).control.locked("beat", ttl=5) as got:
        assert got
        raise RuntimeError("task crashed")
    assert real_redis.exists(Keys().lock("beat")) == 0
